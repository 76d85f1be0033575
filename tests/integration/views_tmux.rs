//! `conductor run` on a real terminal (tmux on a private socket, 80x24): what stays on
//! the screen after Ctrl-C.

use std::time::Duration;

use conductor::{Client, Root, Slot, WorkerState};

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot};
use crate::launch::{text, Server};
use crate::prereq::{self, require};

const BOUND: Duration = Duration::from_secs(60);

/// The visible screen of session `name`, wrapped lines joined (`-J`): a line longer
/// than the pane is one that wrapped.
fn screen_of(srv: &Server, name: &str) -> String {
    let target = format!("={name}:");
    text(
        &srv.tmux(&["capture-pane", "-p", "-J", "-t", &target])
            .stdout,
    )
}

#[test]
fn a_worker_in_a_forty_column_pane_never_wraps_its_log_lines() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let srv = Server::new();
    let worker = bin("conductor-worker").display().to_string();
    let root = t.path().display().to_string();
    let home = format!("CONDUCTOR_HOME={root}");
    let dir = t.dir.path().display().to_string();
    let started = srv.tmux(&[
        "new-session",
        "-d",
        "-s",
        "w",
        "-x",
        "40",
        "-y",
        "12",
        "--",
        "env",
        "-u",
        "CONDUCTOR_WORKER",
        "-u",
        "NO_COLOR",
        "-u",
        "RUST_LOG",
        // Marks the worker as this test's, so the check that it went with its pane
        // can find it (`harness::processes_of` looks for this entry).
        &home,
        &worker,
        "0",
        &dir,
        "--root",
        &root,
        "--agent",
        "cat",
    ]);
    assert!(started.status.success(), "{started:?}");
    wait_until(BOUND, "the worker to serve", || {
        screen_of(&srv, "w").contains("worker 0")
    });
    let task = conductor::Task::new(
        "summarise the design document and list every open question it leaves for the team",
    );
    let id = t.client.write_task(Slot(0), &task).unwrap();
    t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    let deadline = std::time::Instant::now() + BOUND;
    while !screen_of(&srv, "w").contains("ok \"summarise") {
        assert!(
            std::time::Instant::now() < deadline,
            "no line for the finished task:\n{}",
            screen_of(&srv, "w")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let screen = screen_of(&srv, "w");
    for line in screen.lines() {
        assert!(
            line.chars().count() <= 40,
            "a wrapped line: {line:?}\n{screen}"
        );
    }
    assert!(screen.contains("started \"summarise"), "{screen}");
    drop(srv);
    wait_until(BOUND, "the worker to go with its pane", || {
        crate::harness::processes_of(t.path()).is_empty()
    });
}

#[test]
fn after_ctrl_c_run_leaves_no_spinner_and_names_how_tasks_ended() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let srv = Server::new();
    let conductor = bin("conductor").display().to_string();
    let slow = agent("slow.sh").display().to_string();
    let root = t.path().display().to_string();
    let home = format!("CONDUCTOR_HOME={root}");
    let started = srv.tmux(&[
        "new-session",
        "-d",
        "-s",
        "run",
        "-x",
        "80",
        "-y",
        "24",
        "--",
        "env",
        "-u",
        "CONDUCTOR_WORKER",
        "-u",
        "NO_COLOR",
        &home,
        &conductor,
        "run",
        "-n",
        "2",
        "--root",
        &root,
        "--agent",
        &slow,
        "alpha task",
        "beta task",
        "gamma task",
        "delta task",
    ]);
    assert!(started.status.success(), "{started:?}");
    let _ = srv.tmux(&["set-option", "-w", "-t", "=run:", "remain-on-exit", "on"]);

    let client = Client::new(Root::new(t.path()));
    wait_until(BOUND, "two agents running", || {
        (0..2).all(|i| {
            matches!(client.read_status(Slot(i)), Ok(Some(s)) if s.status == WorkerState::Working)
        })
    });
    wait_until(BOUND, "the spinners showing the prompts", || {
        let s = screen_of(&srv, "run");
        s.contains("worker 0 #") && s.contains("worker 1 #")
    });
    srv.tmux(&["send-keys", "-t", "=run:", "C-c"]);
    let deadline = std::time::Instant::now() + BOUND;
    while !screen_of(&srv, "run").contains("task(s):") {
        assert!(
            std::time::Instant::now() < deadline,
            "no summary after Ctrl-C; the screen:\n{}",
            screen_of(&srv, "run")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let screen = screen_of(&srv, "run");
    for stale in ["worker 0 #", "worker 1 #", " idle", "done (", "/4 done"] {
        assert!(
            !screen.contains(stale),
            "left on screen: {stale:?}\n{screen}"
        );
    }
    assert!(
        screen.contains("INTERRUPTED") && screen.contains("CANCELLED"),
        "{screen}"
    );
    assert!(!screen.contains("FAILED"), "{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "{line}");
    }
    wait_until(BOUND, "run to end", || {
        let dead = srv.tmux(&["display-message", "-p", "-t", "=run:", "#{pane_dead}"]);
        String::from_utf8_lossy(&dead.stdout).trim() == "1"
    });
    assert_nothing_left(t.path());
}
