//! Issue 36, item 9: after a resize, a launcher pane's worker cuts its agents' lines at the new width, not the one it started with.

use std::time::Duration;

use conductor::Slot;

use crate::harness::{bin, wait_until, TestRoot};
use crate::launch::{text, Server};
use crate::prereq::{self, require};

const BOUND: Duration = Duration::from_secs(60);

/// The visible screen of session `name`, wrapped lines joined (`-J`).
fn screen_of(srv: &Server, name: &str) -> String {
    let target = format!("={name}:");
    text(
        &srv.tmux(&["capture-pane", "-p", "-J", "-t", &target])
            .stdout,
    )
}

/// The line of the screen that starts with `start`, once it is there.
fn line_of(srv: &Server, start: &str) -> String {
    let mut found = String::new();
    wait_until(BOUND, start, || {
        let screen = screen_of(srv, "w");
        match screen.lines().find(|l| l.starts_with(start)) {
            Some(l) => {
                found = l.to_string();
                true
            }
            None => false,
        }
    });
    found
}

#[test]
fn after_a_resize_the_agents_lines_are_cut_at_the_new_width() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let srv = Server::new();
    let worker = bin("conductor-worker").display().to_string();
    let root = t.path().display().to_string();
    let home = format!("CONDUCTOR_HOME={root}");
    let dir = t.dir.path().display().to_string();
    #[rustfmt::skip]
    let started = srv.tmux(&[
        "new-session", "-d", "-s", "w", "-x", "40", "-y", "12", "--",
        "env", "-u", "CONDUCTOR_WORKER", "-u", "COLUMNS", "-u", "RUST_LOG",
        // Marks the worker as this test's (`harness::processes_of` looks for it).
        &home,
        &worker, "0", &dir, "--root", &root, "--agent", "cat", "--show-output",
    ]);
    assert!(started.status.success(), "{started:?}");
    wait_until(BOUND, "the worker to serve", || {
        screen_of(&srv, "w").contains("worker 0")
    });
    let run = |prompt: String| {
        let id = t
            .client
            .write_task(Slot(0), &conductor::Task::new(prompt))
            .unwrap();
        t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    };
    run(format!("first {}", "a".repeat(100)));
    let first = line_of(&srv, "│ first");
    assert_eq!(first.chars().count(), 40, "{first:?}");

    let resized = srv.tmux(&["resize-window", "-t", "=w:", "-x", "70", "-y", "12"]);
    assert!(resized.status.success(), "{resized:?}");
    wait_until(BOUND, "the pane to be 70 wide", || {
        let out = srv.tmux(&["list-panes", "-t", "=w:", "-F", "#{pane_width}"]);
        text(&out.stdout).trim() == "70"
    });
    run(format!("second {}", "b".repeat(100)));
    let second = line_of(&srv, "│ second");
    assert_eq!(
        second.chars().count(),
        70,
        "cut at the old width: {second:?}\n{}",
        screen_of(&srv, "w")
    );
    drop(srv);
    wait_until(BOUND, "the worker to go with its pane", || {
        crate::harness::processes_of(t.path()).is_empty()
    });
}
