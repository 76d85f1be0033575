//! `conductor run` on a real terminal (tmux on a private socket, 80x24): what stays on
//! the screen after Ctrl-C.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use conductor::{Client, Root, Slot, WorkerState};

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot};

const BOUND: Duration = Duration::from_secs(60);

/// A private tmux server for one test; `kill-server` when dropped.
struct Server {
    socket: String,
}

impl Server {
    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        self.screen_of("run")
    }

    /// The visible screen of session `name`, wrapped lines joined (`-J`): a line longer
    /// than the pane is one that wrapped.
    fn screen_of(&self, name: &str) -> String {
        let target = format!("={name}:");
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-J", "-t", &target])
                .stdout,
        )
        .into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
        let dir = std::env::var_os("TMUX_TMPDIR")
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/tmp".into())
            .join(format!("tmux-{}", nix::unistd::getuid()));
        let _ = std::fs::remove_file(dir.join(&self.socket));
    }
}

fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: `tmux -V` failed; install tmux to run the terminal tests of views");
    }
    ok
}

#[test]
fn a_worker_in_a_forty_column_pane_never_wraps_its_log_lines() {
    if !tmux_available() {
        return;
    }
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let srv = Server {
        socket: format!("conductor-views-w-{}", std::process::id()),
    };
    let worker = bin("conductor-worker").display().to_string();
    let root = t.path().display().to_string();
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
        srv.screen_of("w").contains("worker 0")
    });
    let task = conductor::Task::new(
        "summarise the design document and list every open question it leaves for the team",
    );
    let id = t.client.write_task(Slot(0), &task).unwrap();
    t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    let deadline = std::time::Instant::now() + BOUND;
    while !srv.screen_of("w").contains("ok \"summarise") {
        assert!(
            std::time::Instant::now() < deadline,
            "no line for the finished task:\n{}",
            srv.screen_of("w")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let screen = srv.screen_of("w");
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
    if !tmux_available() {
        return;
    }
    let t = TestRoot::new();
    let srv = Server {
        socket: format!("conductor-views-{}", std::process::id()),
    };
    let conductor = bin("conductor").display().to_string();
    let slow = agent("slow.sh").display().to_string();
    let root = t.path().display().to_string();
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
        let s = srv.screen();
        s.contains("worker 0 #") && s.contains("worker 1 #")
    });
    srv.tmux(&["send-keys", "-t", "=run:", "C-c"]);
    let deadline = std::time::Instant::now() + BOUND;
    while !srv.screen().contains("task(s):") {
        assert!(
            std::time::Instant::now() < deadline,
            "no summary after Ctrl-C; the screen:\n{}",
            srv.screen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let screen = srv.screen();
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
