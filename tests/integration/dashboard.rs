//! `conductor dashboard` in a real terminal: a shell in an 80x24 tmux pane on a private
//! server runs it; the tests read the screen with `capture-pane` and check that the
//! terminal is given back as it was (no alternate screen, cursor shown, cooked mode).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use conductor::queue::Queue;
use conductor::{Outcome, Slot, Task, WorkerState};

use crate::harness::{agent, assert_nothing_left, bin, TestRoot, WorkerProc};
use crate::launch::{text, Server};
use crate::prereq::{self, require};

const BOUND: Duration = Duration::from_secs(30);
const SESSION: &str = "dash";

/// A `/bin/sh` in an 80x24 pane of a private tmux server.
pub(crate) struct Shell {
    srv: Server,
}

impl Shell {
    pub(crate) fn start(t: &TestRoot) -> Shell {
        Shell::start_sized(t, 80, 24)
    }

    fn start_sized(t: &TestRoot, cols: u16, rows: u16) -> Shell {
        let (x, y) = (cols.to_string(), rows.to_string());
        let srv = Server::new();
        let cmd = format!(
            "env -u TMUX RUST_BACKTRACE=0 CONDUCTOR_HOME='{}' PS1='$ ' ENV= /bin/sh",
            t.path().display()
        );
        let out = srv.tmux(&["new-session", "-d", "-s", SESSION, "-x", &x, "-y", &y, &cmd]);
        assert!(out.status.success(), "new-session: {}", text(&out.stderr));
        Shell { srv }
    }

    pub(crate) fn screen(&self) -> String {
        text(
            &self
                .srv
                .tmux(&["capture-pane", "-p", "-t", "=dash:"])
                .stdout,
        )
    }

    /// The screen with what scrolled off it (a panic's report may push lines up).
    fn history(&self) -> String {
        let out = self
            .srv
            .tmux(&["capture-pane", "-p", "-S", "-200", "-t", "=dash:"]);
        text(&out.stdout)
    }

    fn format(&self, f: &str) -> String {
        let out = self.srv.tmux(&["display-message", "-p", "-t", "=dash:", f]);
        text(&out.stdout).trim().to_string()
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "=dash:"];
        args.extend(keys);
        assert!(self.srv.tmux(&args).status.success(), "send-keys {keys:?}");
    }

    pub(crate) fn type_line(&self, line: &str) {
        self.keys(&["-l", line]);
        self.keys(&["Enter"]);
    }

    /// Wait (bounded, polling: a screen offers no event) until the screen shows `what`.
    pub(crate) fn wait_for(&self, what: &str) -> String {
        let deadline = Instant::now() + BOUND;
        loop {
            let screen = self.screen();
            if screen.contains(what) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what:?} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start `conductor SUBCOMMAND --root ROOT` (`dashboard` or its alias `top`) at the
    /// shell's prompt, below a line it must leave on the screen.
    pub(crate) fn dashboard(&self, t: &TestRoot, subcommand: &str) {
        self.type_line("clear; echo BEFORE-THE-DASHBOARD");
        self.wait_for("BEFORE-THE-DASHBOARD");
        let line = format!(
            "{} {subcommand} --root '{}'",
            bin("conductor").display(),
            t.path().display()
        );
        self.type_line(&line);
        self.wait_for("q quit");
        assert_eq!(self.format("#{alternate_on}"), "1", "full screen");
    }

    /// The dashboard has ended and left the terminal as the shell had it: the normal
    /// screen with what was on it, the cursor shown, and a cooked tty (a raw one would
    /// not even turn Enter into the newline the shell waits for).
    pub(crate) fn assert_given_back(&self, t: &TestRoot) {
        // The screen is left and the cursor shown by two writes: tmux may be asked
        // between them (seen once in CI, under load), so both are waited for.
        let deadline = Instant::now() + BOUND;
        while self.format("#{alternate_on}") != "0" || self.format("#{cursor_flag}") != "1" {
            assert!(
                Instant::now() < deadline,
                "still full screen (alternate_on {}) or the cursor hidden (cursor_flag {}):\n{}",
                self.format("#{alternate_on}"),
                self.format("#{cursor_flag}"),
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            self.history().contains("BEFORE-THE-DASHBOARD"),
            "{}",
            self.history()
        );
        let stty = t.dir.path().join("stty.txt");
        let _ = fs::remove_file(&stty);
        self.type_line(&format!(
            "stty -a > '{}'; echo STTY-$((6 * 7))",
            stty.display()
        ));
        self.wait_for("STTY-42");
        let flags = fs::read_to_string(&stty).unwrap();
        let words: Vec<&str> = flags
            .split(|c: char| c.is_whitespace() || c == ';')
            .collect();
        for flag in ["icanon", "echo", "isig", "icrnl"] {
            assert!(
                words.contains(&flag),
                "{flag} is off after the dashboard:\n{flags}"
            );
        }
    }
}

/// The pid of the dashboard running on `root` (its command line names the root).
fn dashboard_pid(root: &Path) -> u32 {
    let needle = root.display().to_string();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmd) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let named = args.iter().any(|a| a == "dashboard" || a == "top");
        if named && args.iter().any(|a| a == &needle) {
            return pid;
        }
    }
    panic!("no dashboard process on {needle}");
}

#[test]
fn the_dashboard_shows_prompts_live_output_queue_reasons_and_cancels() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let ticker = agent("ticker.sh").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &ticker, &[], &[]);
    let running = t
        .client
        .write_task(
            Slot(0),
            &Task::new("count the ticks slowly please").with_id("tick-task"),
        )
        .unwrap();
    t.client
        .wait_for_status(Slot(0), &[WorkerState::Working], BOUND)
        .unwrap();
    let queue = Queue::new(t.client.root().clone());
    queue
        .submit(&Task::new("first in the queue").with_id("qa"))
        .unwrap();
    queue
        .submit(
            &Task::new("after the first")
                .with_id("qb")
                .with_after(["qa"]),
        )
        .unwrap();

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    // The running task's prompt, its live output (a later tick replaces an earlier
    // one on screen), and why each queued task waits.
    let screen = sh.wait_for("count the ticks slowly please");
    assert!(screen.contains("working"), "{screen}");
    sh.wait_for("tick 3");
    sh.wait_for("tick 6");
    let screen = sh.wait_for("no idle worker");
    assert!(screen.contains("waiting for qa"), "{screen}");
    assert!(screen.contains("first in the queue"), "{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "wider than the pane: {line:?}");
    }

    // Enter: the whole output, from tick 1; Esc: back.
    sh.keys(&["Enter"]);
    sh.wait_for("Esc back");
    sh.keys(&["g"]);
    let screen = sh.wait_for("lines 1-21 of");
    assert!(screen.contains("│tick 1 "), "{screen}");
    assert!(screen.contains("task tick-task"), "{screen}");
    sh.keys(&["Escape"]);
    sh.wait_for("q quit");

    // c, then n: nothing happens; c, then y: the running task is cancelled.
    sh.keys(&["c"]);
    sh.wait_for("Cancel task tick-task (count the ticks slowly please)? y/n");
    sh.keys(&["n"]);
    sh.wait_for("task tick-task not cancelled");
    sh.keys(&["c"]);
    sh.wait_for("? y/n");
    sh.keys(&["y"]);
    let res = t.client.wait_for_result(Slot(0), &running, BOUND).unwrap();
    assert_eq!(res.outcome, Some(Outcome::Cancelled));
    sh.wait_for("cancel requested: worker 0 stops task tick-task");

    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(_w);
    assert_nothing_left(t.path());
}

#[test]
fn ctrl_c_and_sigterm_give_the_terminal_back() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let sh = Shell::start(&t);

    sh.dashboard(&t, "dashboard");
    let screen = sh.wait_for("no worker");
    assert!(screen.contains("queue: 0 pending"), "{screen}");
    sh.keys(&["C-c"]);
    sh.assert_given_back(&t);

    sh.dashboard(&t, "top");
    let pid = dashboard_pid(t.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    sh.assert_given_back(&t);
    drop(sh);
    assert_nothing_left(t.path());
}

#[test]
fn without_a_terminal_the_dashboard_says_what_to_use_instead() {
    let t = TestRoot::new();
    let r = crate::harness::run_conductor(&t, &["dashboard"], 2);
    assert!(r.stderr.contains("needs a terminal"), "{}", r.stderr);
    assert!(r.stderr.contains("conductor status"), "{}", r.stderr);
}

#[test]
fn a_panic_gives_the_terminal_back() {
    if crate::harness::child_role().as_deref() == Some("panic") {
        // In the tmux pane: take the terminal as the dashboard does, draw, wait for a
        // key, then panic.
        let (mut term, _guard) = conductor::cli::dashboard::term::enter().unwrap();
        term.draw(|f| {
            let text = ratatui::widgets::Paragraph::new("DRAWN-BEFORE-THE-PANIC");
            f.render_widget(text, f.area());
        })
        .unwrap();
        let _ = ratatui::crossterm::event::read();
        panic!("a deliberate panic in the dashboard");
    }
    require!(prereq::tmux());
    let t = TestRoot::new();
    let sh = Shell::start(&t);
    sh.type_line("clear; echo BEFORE-THE-DASHBOARD");
    sh.wait_for("BEFORE-THE-DASHBOARD");
    let exe = std::env::current_exe().unwrap();
    sh.type_line(&format!(
        "{}=panic '{}' dashboard::a_panic_gives_the_terminal_back --exact --nocapture",
        crate::harness::CHILD_ROLE,
        exe.display()
    ));
    sh.wait_for("DRAWN-BEFORE-THE-PANIC");
    assert_eq!(sh.format("#{alternate_on}"), "1", "full screen");
    sh.keys(&["x"]);
    sh.assert_given_back(&t);
    // The panic message is printed after the terminal is restored, so it stays visible.
    sh.wait_for("a deliberate panic in the dashboard");
}

#[test]
fn the_output_view_keeps_a_task_s_whole_log_after_it_ends() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let ticker = agent("ticker.sh").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &ticker, &[], &[("TICKS", "15")]);
    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    let id = t
        .client
        .write_task(Slot(0), &Task::new("fifteen ticks").with_id("fifteen"))
        .unwrap();
    sh.wait_for("tick 2");
    sh.keys(&["Enter"]);
    sh.wait_for("task fifteen");
    // The task ends while its output is shown: its log moves to tasks/<id>.log and an
    // empty output.log takes its place; the view goes on showing the whole log.
    let res = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert_eq!(res.outcome, Some(Outcome::Success));
    let screen = sh.wait_for("lines 1-16 of 16");
    assert!(screen.contains("│ticker done"), "{screen}");
    sh.keys(&["q"]);
    sh.wait_for("q quit");
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
}

/// The claude preset's stream shows in the dashboard as readable lines while the agent
/// works (what `logs -f` shows), and its cost once it is done.
#[test]
fn a_streaming_claude_agent_shows_readable_live_output_and_its_cost() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "claude"], &[]);
    let gate = t.dir.path().join("answer-now");
    let id = t
        .client
        .write_task(
            Slot(0),
            &Task::new(format!("review the entry point gate={}", gate.display()))
                .with_id("stream-task"),
        )
        .unwrap();
    t.client
        .wait_for_status(Slot(0), &[WorkerState::Working], BOUND)
        .unwrap();

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    sh.wait_for("review the entry point");
    // Mid-run (the agent waits for the gate): its text and tool use, not raw JSON.
    sh.wait_for("I will read the entry point first.");
    let screen = sh.wait_for("› Read src/main.rs");
    assert!(
        !screen.contains("\"type\":"),
        "raw stream on screen:\n{screen}"
    );
    fs::write(&gate, "").unwrap();
    let res = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert_eq!(res.cost_usd, Some(0.0375));
    sh.wait_for("$0.0375");

    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(_w);
    assert_nothing_left(t.path());
}

/// Issue 25, item 6: the queue box grows with the screen and says how many it does not
/// show; `?` shows the keys; a message leaves the key hints on screen; a cost keeps four
/// decimals.
fn queue_keys_and_costs_at(cols: u16, rows: u16) {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let q = Queue::new(t.client.root().clone());
    for i in 0..10 {
        q.submit(&Task::new(format!("queued task {i:02}"))).unwrap();
    }
    let results = t.path().join("workers/0/results");
    fs::create_dir_all(&results).unwrap();
    fs::write(
        results.join("c1.json"),
        r#"{"taskId":"c1","output":"x","success":true,"timestamp":"2026-11-26T00:00:00.000Z","costUsd":0.0123}"#,
    )
    .unwrap();

    let sh = Shell::start_sized(&t, cols, rows);
    sh.dashboard(&t, "dashboard");
    let screen = sh.wait_for("queue: 10 pending");
    let shown = screen.matches("queued task").count();
    let more: usize = screen
        .split_once("+")
        .and_then(|(_, r)| r.split_once(" more"))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or(0);
    assert_eq!(
        shown + more,
        10,
        "{cols}x{rows}: {shown} shown, +{more}:\n{screen}"
    );
    if rows >= 50 {
        assert_eq!(more, 0, "room for all ten at {cols}x{rows}:\n{screen}");
    } else {
        assert!(shown > 4, "only {shown} shown at {cols}x{rows}:\n{screen}");
    }
    assert!(screen.contains("$0.0123"), "{screen}");

    // A message (nothing to cancel on an idle slot) leaves the keys in view.
    sh.keys(&["c"]);
    let screen = sh.wait_for("nothing to cancel");
    assert!(screen.contains("q quit"), "{screen}");
    // `?` shows every key; any key puts the view back.
    sh.keys(&["?"]);
    // The box's last line: the screen is captured as it is drawn, top to bottom.
    let screen = sh.wait_for("back to the list");
    for k in ["any key closes", "Enter", "cancel", "merge", "PgUp", "quit"] {
        assert!(screen.contains(k), "{k}:\n{screen}");
    }
    sh.keys(&["x"]);
    sh.wait_for("queue: 10 pending");
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
}

#[test]
fn the_queue_box_grows_keys_show_on_question_mark_at_80x24() {
    require!(prereq::tmux());
    queue_keys_and_costs_at(80, 24);
}

#[test]
fn the_queue_box_grows_keys_show_on_question_mark_at_200x50() {
    require!(prereq::tmux());
    queue_keys_and_costs_at(200, 50);
}

/// Each slot's row names the agent preset running its task, and once it is done the one
/// that ran it: here a worker serving `command` (cat) and `codex` (a fake on PATH).
#[test]
fn the_dashboard_shows_which_agent_runs_and_ran_each_task() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let path = crate::views::path_with_fake_codex(&t);
    let _w = WorkerProc::start(
        &t,
        Slot(0),
        "cat",
        &["--preset", "command", "--preset", "codex"],
        &[("PATH", &path)],
    );
    let gate = t.dir.path().join("go");
    let mut task =
        Task::new(format!("codex looks around gate={}", gate.display())).with_id("cx-dash");
    task.agent = Some("codex".into());
    let id = t.client.write_task(Slot(0), &task).unwrap();
    t.client
        .wait_for_status(Slot(0), &[WorkerState::Working], BOUND)
        .unwrap();

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    let screen = sh.wait_for("codex looks around");
    assert!(screen.contains("AGENT"), "{screen}");
    let row = |screen: &str, what: &str| {
        screen
            .lines()
            .find(|l| l.contains(what) && l.contains("codex looks around"))
            .map(String::from)
    };
    assert!(
        row(&screen, "working").is_some_and(|l| l.contains(" codex ")),
        "{screen}"
    );
    fs::write(&gate, "").unwrap();
    let res = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert_eq!(res.agent.as_deref(), Some("codex"));
    let screen = sh.wait_for("0    done");
    assert!(
        row(&screen, "0    done").is_some_and(|l| l.contains(" codex ")),
        "{screen}"
    );

    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(_w);
    assert_nothing_left(t.path());
}

/// A `--worktree` task's branch and diffstat show on its worker's row and in the tail's
/// title at 80x24, and `d` opens its diff (stat first, then the patch) in the output view.
#[test]
fn the_dashboard_shows_a_worktree_tasks_branch_and_opens_its_diff() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let repo = t.dir.path().join("repo");
    fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "--quiet", "--initial-branch=main"]);
    git(&["config", "user.name", "Test Person"]);
    git(&["config", "user.email", "test@example.com"]);
    fs::write(repo.join("a.txt"), "base\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "--quiet", "-m", "start"]);
    let repo = repo.canonicalize().unwrap();
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    let mut task =
        Task::new("WRITE hello.txt hello from the task\nAPPEND a.txt more").with_id("dw1");
    task.dir = Some(repo.clone());
    task.worktree = Some(true);
    let id = t.client.write_task(Slot(0), &task).unwrap();
    let r = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(r.worktree.as_ref().unwrap().diffstat(), "+2 -0 in 2 files");

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    let screen = sh.wait_for("conductor/dw1 +2 -0 in 2 files");
    assert!(
        screen.contains("[unmerged +2 -0] WRITE hello.txt"),
        "{screen}"
    );
    assert!(screen.contains("d diff"), "the key is named: {screen}");
    sh.keys(&["d"]);
    let screen = sh.wait_for("task dw1 · conductor/dw1");
    assert!(
        screen.contains("hello.txt | 1 +"),
        "the stat first: {screen}"
    );
    assert!(
        screen.contains("+hello from the task"),
        "then the patch: {screen}"
    );
    assert!(screen.contains("+more"), "{screen}");
    sh.keys(&["q"]);
    sh.wait_for("q quit");
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(w);
    assert_nothing_left(t.path());
}

/// Issue 25, item 10: a paused slot says so in its row, and the queue says why its task
/// waits; resumed, the slot runs it.
#[test]
fn a_paused_slot_and_its_held_task_show_on_the_dashboard_at_80x24() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    crate::harness::run_conductor(&t, &["pause", "--slot", "0"], 0);
    let q = Queue::new(t.client.root().clone());
    q.submit(&Task::new("held by the pause").with_id("held1"))
        .unwrap();

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    let screen = sh.wait_for("paused (slot 0");
    let row = screen
        .lines()
        .find(|l| l.contains("> 0 ") && !l.contains("slot 0"))
        .unwrap_or_else(|| panic!("no row for slot 0:\n{screen}"));
    assert!(row.contains("paused"), "{screen}");
    assert!(screen.contains("held by the pause"), "{screen}");

    crate::harness::run_conductor(&t, &["resume", "--slot", "0"], 0);
    // The header counts it done once it ran; nothing says paused any more.
    let screen = sh.wait_for("done 1");
    assert!(!screen.contains("paused"), "{screen}");
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
}

/// A dashboard whose terminal goes away (the window closed, the tmux server killed)
/// exits: its key reader saw endless end-of-file and quitting waited for it for ever,
/// which left dashboards spinning at half a core for over an hour after their tests.
#[test]
fn a_dashboard_whose_terminal_hangs_up_exits() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let sh = Shell::start(&t);
    sh.type_line(&format!("{} dashboard", bin("conductor").display()));
    sh.wait_for("SLOT");
    drop(sh);
    assert_nothing_left(t.path());
}
