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

/// The visible screen as the terminal shows it, row by row (no joining of wrapped rows).
fn rows_of(srv: &Server, name: &str) -> Vec<String> {
    let target = format!("={name}:");
    text(&srv.tmux(&["capture-pane", "-p", "-t", &target]).stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Issue 25, item 1: `conductor run`'s live view in a real terminal, several workers,
/// a streaming agent — one row per worker (not each line starting where the last one
/// stopped), the agent's activity on its worker's row, and nothing of the live view
/// left above the results.
fn run_view_at(cols: u16, rows: u16) {
    let t = TestRoot::new();
    let srv = Server::new();
    let conductor = bin("conductor").display().to_string();
    let fake = agent("fake-claude-stream").display().to_string();
    let root = t.path().display().to_string();
    let home = format!("CONDUCTOR_HOME={root}");
    let gate = t.dir.path().join("answer-now");
    let prompts: Vec<String> = ["alpha", "beta", "gamma"]
        .iter()
        .map(|p| format!("{p} review gate={}", gate.display()))
        .collect();
    let (x, y) = (cols.to_string(), rows.to_string());
    let mut cmd = vec![
        "new-session",
        "-d",
        "-s",
        "run",
        "-x",
        &x,
        "-y",
        &y,
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
        "3",
        "--root",
        &root,
        "--preset",
        "claude",
        "--agent",
        &fake,
    ];
    cmd.extend(prompts.iter().map(String::as_str));
    let started = srv.tmux(&cmd);
    assert!(started.status.success(), "{started:?}");
    let _ = srv.tmux(&["set-option", "-w", "-t", "=run:", "remain-on-exit", "on"]);

    // Every worker on a row of its own, showing its agent's tool call.
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let screen = rows_of(&srv, "run");
        let worker_rows: Vec<&String> = screen.iter().filter(|r| r.contains("worker ")).collect();
        let settled =
            worker_rows.len() == 3 && worker_rows.iter().all(|r| r.contains("› Read src/main.rs"));
        if settled {
            for (i, row) in worker_rows.iter().enumerate() {
                assert_eq!(
                    row.matches("worker ").count(),
                    1,
                    "two workers on one row:\n{}",
                    screen.join("\n")
                );
                assert!(
                    row.contains(&format!("worker {i} #")),
                    "row {i}: {row:?}\n{}",
                    screen.join("\n")
                );
                assert!(row.chars().count() <= cols as usize, "{row:?}");
            }
            assert!(
                screen.iter().any(|r| r.contains("0/3 done")),
                "{}",
                screen.join("\n")
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "at {cols}x{rows} the workers never showed on rows of their own with their \
             activity:\n{}",
            screen.join("\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    std::fs::write(&gate, "").unwrap();
    wait_until(BOUND, "run to end", || {
        let dead = srv.tmux(&["display-message", "-p", "-t", "=run:", "#{pane_dead}"]);
        String::from_utf8_lossy(&dead.stdout).trim() == "1"
    });
    let screen = rows_of(&srv, "run").join("\n");
    for stale in [
        "worker 0 #",
        "worker 1 #",
        "worker 2 #",
        "/3 done",
        "› Read",
    ] {
        assert!(
            !screen.contains(stale),
            "left on screen at {cols}x{rows}: {stale:?}\n{screen}"
        );
    }
    assert!(screen.contains("3 task(s): 3 succeeded"), "{screen}");
    assert!(screen.contains("answer to: alpha review"), "{screen}");
    assert_nothing_left(t.path());
}

#[test]
fn run_shows_one_row_per_worker_with_its_activity_at_80x24() {
    require!(prereq::tmux());
    run_view_at(80, 24);
}

#[test]
fn run_shows_one_row_per_worker_with_its_activity_at_120x40() {
    require!(prereq::tmux());
    run_view_at(120, 40);
}
