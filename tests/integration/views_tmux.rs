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
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "=run:"]).stdout)
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

#[test]
fn after_ctrl_c_run_leaves_no_spinner_and_names_how_tasks_ended() {
    if !Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED: `tmux -V` failed; install tmux to run the terminal test of `run`");
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
