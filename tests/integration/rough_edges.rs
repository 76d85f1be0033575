//! Issue 36, item 9: the rough edges a new user hit, each reproduced and fixed.

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use conductor::{Slot, TaskId};
use serde_json::Value;

use crate::harness::{bin, keyed_worker, run_conductor, run_conductor_env, wait_until, TestRoot};
use crate::harness::{Ran, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A task.json written by hand that is no task (bad JSON, but its id readable): `tasks`
/// lists it as `rejected` (it was invisible), and `status` says `rejected` with the
/// reason where the prompt goes (it said `failed`, the id in PROMPT).
#[test]
fn a_bad_task_file_written_by_hand_is_listed_rejected_with_its_reason() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let w = t.client.worker(S0);
    let staged = t.dir.path().join("bad.json");
    fs::write(&staged, "{\"id\": \"hand1\", \"prompt\": ").unwrap();
    fs::rename(&staged, w.task()).unwrap();
    let id = TaskId::from("hand1");
    // The result is published first, then the status that tells of it.
    wait_until(BOUND, "the rejection's result and status", || {
        w.result_for(&id).exists()
            && t.client
                .read_status(S0)
                .ok()
                .flatten()
                .is_some_and(|s| s.task_id.as_ref() == Some(&id))
    });
    let listed = run_conductor(&t, &["tasks", "--state", "rejected"], 0).stdout;
    assert!(
        listed.contains("hand1") && listed.contains("rejected"),
        "{listed}"
    );
    let status = run_conductor_env(&t, &["status"], &env(&[("COLUMNS", "120")]), 0).stdout;
    let row = status
        .lines()
        .find(|l| l.starts_with("0 "))
        .unwrap_or_else(|| panic!("no row for slot 0:\n{status}"));
    assert!(row.contains("rejected"), "{status}");
    assert!(
        row.contains("not valid JSON"),
        "the reason goes where the prompt would: {row}"
    );
}

/// `send` to a paused slot and `status` hint a resume command that works (a bare
/// `conductor resume` is a usage error).
#[test]
fn send_and_status_hint_a_resume_command_that_works() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    run_conductor(&t, &["pause", "--slot", "0"], 0);
    let sent = run_conductor(&t, &["send", "0", "--id", "held1", "a prompt"], 0);
    assert!(
        sent.stderr.contains("(`conductor resume --slot 0`)"),
        "{}",
        sent.stderr
    );
    let status = run_conductor(&t, &["status"], 0).stdout;
    assert!(
        status.contains("paused: slot 0 (`conductor resume --slot 0`)"),
        "{status}"
    );
    // Two pauses: `--all` lifts both.
    run_conductor(&t, &["pause", "--key", "k"], 0);
    let status = run_conductor(&t, &["status"], 0).stdout;
    assert!(status.contains("(`conductor resume --all`)"), "{status}");
    run_conductor(&t, &["resume", "--all"], 0);
    run_conductor(&t, &["pause", "--slot", "0"], 0);
    run_conductor(&t, &["resume", "--slot", "0"], 0);
}

/// `retry` of a task whose dependency failed, which never ran: the retry is cancelled
/// at once again, so it says so and names the command that runs the chain again.
#[test]
fn retrying_a_task_its_failed_dependency_cancelled_names_retry_with_dependents() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let _w = keyed_worker(&t, S0, &log);
    run_conductor(&t, &["submit", "--id", "b7", "x fail"], 0);
    run_conductor(&t, &["submit", "--id", "t7", "--after", "b7", "x 0"], 0);
    run_conductor(&t, &["submit", "--id", "s7", "--after", "t7", "x 0"], 0);
    run_conductor(&t, &["wait", "s7", "--timeout", "60"], 1);
    let again: Ran = run_conductor(&t, &["retry", "s7"], 0);
    assert_eq!(again.stdout.trim(), "s7-r1");
    assert!(
        again
            .stderr
            .contains("`conductor retry b7 --with-dependents`"),
        "the hint names the chain's first failure: {}",
        again.stderr
    );
}

/// `run` with one prompt starts one worker, not the default three (an explicit `-n` is
/// kept: an agent may hand work to the run's queue for the others).
#[test]
fn run_starts_no_more_workers_than_prompts() {
    let t = TestRoot::new();
    let root = t.path().to_str().unwrap().to_string();
    let ran = run_conductor(
        &t,
        &[
            "run", "--agent", "cat", "--json", "--root", &root, "only one",
        ],
        0,
    );
    let doc: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(doc["workers"], 1, "{doc}");
    assert!(t.path().join("workers/0").is_dir());
    assert!(
        !t.path().join("workers/1").exists(),
        "a second slot was made"
    );
}

/// `edit` with no terminal and no $EDITOR refuses, saying what to give, instead of
/// starting `vi` on no terminal.
#[test]
fn edit_without_a_terminal_or_an_editor_is_refused_clearly() {
    let t = TestRoot::new();
    run_conductor(&t, &["submit", "--id", "e7", "a prompt"], 0);
    let r = run_conductor_env(
        &t,
        &["edit", "e7"],
        &env(&[("EDITOR", ""), ("VISUAL", "")]),
        2,
    );
    assert!(
        r.stderr.contains("no terminal") && r.stderr.contains("--prompt"),
        "{}",
        r.stderr
    );
}

/// `conductor worker 0` with no DIR and no agent says which directory and agent it took.
#[test]
fn a_worker_given_no_dir_and_no_agent_says_what_it_serves_with() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let here = t.dir.path().join("here");
    fs::create_dir_all(&here).unwrap();
    let err = t.dir.path().join("worker.err");
    let mut child = Command::new(bin("conductor"))
        .args(["worker", "0", "--root"])
        .arg(t.path())
        .current_dir(&here)
        .env_remove("CONDUCTOR_WORKER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    wait_until(BOUND, "the note on stderr", || {
        fs::read_to_string(&err).is_ok_and(|s| s.contains("note: no DIR and no agent given"))
    });
    let _ = child.kill();
    let _ = child.wait();
    let said = fs::read_to_string(&err).unwrap();
    assert!(said.contains(&here.display().to_string()), "{said}");
    // Given them, nothing is said.
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    assert!(!w.stderr().contains("note: no DIR"), "{}", w.stderr());
}

/// `gc --older-than 1w` echoes `1w` (it said `7days`).
#[test]
fn gc_echoes_its_limit_as_typed() {
    let t = TestRoot::new();
    let out = run_conductor(&t, &["gc", "--older-than", "1w"], 0).stdout;
    assert!(out.contains("older than 1w;"), "{out}");
    assert!(!out.contains("days"), "{out}");
}

/// `doctor --agent claud` suggests the preset `claude` (it said `install claud`), and
/// its counts agree with their nouns (`1 warning`, not `1 warnings`).
#[test]
fn doctor_suggests_the_nearest_preset_and_counts_in_words() {
    let t = TestRoot::new();
    let r = run_conductor(&t, &["doctor", "--agent", "claud"], 1);
    assert!(
        r.stdout.contains("did you mean the preset claude"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("install claud"), "{}", r.stdout);
    let summary = r.stdout.lines().last().unwrap_or_default().to_string();
    // `15 checks: 13 ok, 1 warning, 1 failed`
    let words: Vec<&str> = summary
        .split([' ', ',', ':'])
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if let (Ok(n), noun) = (pair[0].parse::<usize>(), pair[1]) {
            if noun.starts_with("warning") || noun.starts_with("check") {
                assert_eq!(n == 1, !noun.ends_with('s'), "{summary}");
            }
        }
    }
    assert!(
        !r.stdout.contains("(ies)") && !r.stdout.contains("(s)"),
        "{}",
        r.stdout
    );
}

/// A tmux server for one test under its own TMUX_TMPDIR (so `--list` without
/// `--socket` sees no other test's servers); killed on drop.
struct PrivateTmux {
    dir: std::path::PathBuf,
    socket: String,
}

impl PrivateTmux {
    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TMUX_TMPDIR", &self.dir)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    fn launcher(&self, t: &TestRoot, args: &[&str]) -> Ran {
        let out = Command::new(bin("conductor-launch"))
            .args(args)
            .env("CONDUCTOR_HOME", t.path())
            .env("TMUX_TMPDIR", &self.dir)
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Drop for PrivateTmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// `conductor-launch --list` and `--kill` without `--socket` find a session launched on
/// a private socket (they looked on the default server only, each pointing at the other).
#[test]
fn launch_list_and_kill_find_a_session_on_a_private_socket() {
    crate::prereq::require!(crate::prereq::tmux());
    let t = TestRoot::new();
    let dir = t.dir.path().join("tmux");
    fs::create_dir_all(&dir).unwrap();
    let srv = PrivateTmux {
        dir,
        socket: format!("rough-{}", std::process::id()),
    };
    let root = t.path().to_str().unwrap().to_string();
    let launched = srv.launcher(
        &t,
        &[
            "--socket",
            &srv.socket,
            "--root",
            &root,
            "--session",
            "sx",
            "--no-attach",
            "--workers",
            "1",
            "--agent",
            "cat",
            "--orchestrator",
            "cat",
        ],
    );
    assert_eq!(launched.code, Some(0), "{launched:?}");
    let listed = srv.launcher(&t, &["--list", "--json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let v: Value = serde_json::from_str(&listed.stdout).unwrap();
    let sx = v
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == "sx")
        .unwrap_or_else(|| panic!("sx not listed: {v}"));
    assert_eq!(sx["socket"], srv.socket.as_str(), "{v}");
    let human = srv.launcher(&t, &["--list"]);
    assert!(
        human.stdout.contains("SOCKET") && human.stdout.contains(&srv.socket),
        "{human:?}"
    );
    let killed = srv.launcher(&t, &["--kill", "--session", "sx"]);
    assert_eq!(killed.code, Some(0), "{killed:?}");
    assert!(
        killed.stdout.contains("killed tmux session sx"),
        "{killed:?}"
    );
    assert!(!srv.tmux(&["has-session", "-t", "=sx"]).status.success());
}
