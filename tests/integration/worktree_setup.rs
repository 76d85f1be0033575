//! Readying task worktrees (issue 37, item 4) with real git and real workers:
//! config.json's `worktreeSetup` (files copied and linked in, a setup command) and
//! `portRange` (`CONDUCTOR_PORT`, one per running task), and `--no-worktree` against a
//! root whose default is on. The agent is `tests/agents/setup_probe.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use conductor::{Slot, TaskId};
use serde_json::Value;

use crate::harness::{agent, run_conductor, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);

#[track_caller]
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit, and beside the commit what a checkout has but git
/// does not: an `.env` (not ignored: conductor must still not commit its copy) and a
/// `deps/` directory (ignored, as `node_modules` is).
fn repo(t: &TestRoot) -> PathBuf {
    let dir = t.dir.path().join("repo");
    std::fs::create_dir(&dir).unwrap();
    git(&dir, &["init", "--quiet", "--initial-branch=main"]);
    git(&dir, &["config", "user.name", "Test Person"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    std::fs::write(dir.join("a.txt"), "base\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "deps\n").unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "--quiet", "-m", "start"]);
    std::fs::write(dir.join(".env"), "SECRET=1\n").unwrap();
    std::fs::create_dir(dir.join("deps")).unwrap();
    std::fs::write(dir.join("deps/lib.txt"), "lib\n").unwrap();
    dir.canonicalize().unwrap()
}

fn config(t: &TestRoot, json: &str) {
    std::fs::create_dir_all(t.path()).unwrap();
    std::fs::write(t.path().join("config.json"), json).unwrap();
}

fn probe() -> String {
    agent("setup_probe.sh").display().to_string()
}

fn submit(t: &TestRoot, repo: &Path, id: &str, prompt: &str, extra: &[&str]) {
    let mut args = vec!["submit", "--dir", repo.to_str().unwrap(), "--id", id];
    args.extend(extra);
    args.push(prompt);
    run_conductor(t, &args, 0);
}

fn result(t: &TestRoot, id: &str) -> Value {
    let r = t
        .client
        .wait_for_task(&TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("task {id}: {e}"));
    serde_json::to_value(r).unwrap()
}

#[test]
fn setup_copies_and_links_runs_its_command_and_each_running_task_has_its_own_port() {
    let t = TestRoot::new();
    let repo = repo(&t);
    config(
        &t,
        r#"{"worktree": true, "portRange": [41000, 41009], "worktreeSetup": {
            "copy": [".env", "missing.txt"], "link": ["deps"],
            "command": "echo preparing on port $CONDUCTOR_PORT; echo ran > setup-mark"}}"#,
    );
    let _w0 = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    let _w1 = WorkerProc::start(&t, Slot(1), &probe(), &[], &[]);
    let (m1, m2) = (t.dir.path().join("m1"), t.dir.path().join("m2"));
    submit(&t, &repo, "h1", &format!("HANG {}", m1.display()), &[]);
    submit(&t, &repo, "h2", &format!("HANG {}", m2.display()), &[]);
    wait_until(BOUND, "both tasks running with their ports", || {
        m1.exists() && m2.exists()
    });
    let port = |m: &Path| std::fs::read_to_string(m).unwrap().trim().to_string();
    let (p1, p2) = (port(&m1), port(&m2));
    let mut both = [p1.clone(), p2.clone()];
    both.sort();
    assert_eq!(both, ["41000", "41001"], "two running tasks, two ports");
    let locks = run_conductor(&t, &["locks"], 0).stdout;
    assert!(
        locks.contains("port 41000") && locks.contains("port 41001"),
        "{locks}"
    );

    // Ended, a task gives its port back: the next one gets the first free again.
    run_conductor(&t, &["cancel", "h1"], 0);
    assert_eq!(result(&t, "h1")["outcome"], "cancelled");
    submit(&t, &repo, "t3", "hello", &[]);
    let r = result(&t, "t3");
    assert_eq!(r["success"], true, "{r}");
    let out = r["output"].as_str().unwrap();
    assert!(out.contains(&format!("port={p1}")), "{out}");
    assert!(out.contains("env=SECRET=1"), "{out}");
    assert!(out.contains("deps=link:lib"), "{out}");
    assert!(out.contains("setup=ran"), "{out}");
    let note = r["worktree"]["note"].as_str().unwrap_or("");
    assert!(note.contains("worktree setup done"), "{r}");
    let log = t.path().join("workers/0/tasks/t3.setup.log");
    let log = if log.exists() {
        log
    } else {
        t.path().join("workers/1/tasks/t3.setup.log")
    };
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains(&format!("preparing on port {p1}")), "{log}");
    assert!(
        log.contains("missing.txt is not in the main checkout; skipped"),
        "{log}"
    );
    // What the agent made is on the branch; the copied and linked paths are not.
    let files = git(&repo, &["show", "--name-only", "--format=", "conductor/t3"]);
    assert!(
        files.contains("out.txt") && files.contains("setup-mark"),
        "{files}"
    );
    assert!(
        !files.contains(".env") && !files.contains("deps"),
        "{files}"
    );
    run_conductor(&t, &["cancel", "h2"], 0);
    result(&t, "h2");
}

#[test]
fn a_failing_setup_fails_the_task_with_its_output_before_the_agent_starts() {
    let t = TestRoot::new();
    let repo = repo(&t);
    config(
        &t,
        r#"{"worktreeSetup": {"command": "echo installing; echo broken-dependency >&2; exit 3"}}"#,
    );
    let _w = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    submit(&t, &repo, "f1", "hello", &["--worktree"]);
    let r = result(&t, "f1");
    assert_eq!(r["success"], false, "{r}");
    let error = r["error"].as_str().unwrap();
    for want in [
        "worktree setup failed",
        "exited with code 3",
        "broken-dependency",
    ] {
        assert!(error.contains(want), "{want}: {error}");
    }
    assert_eq!(r["output"], "", "the agent never ran: {r}");
    // Its log is the setup's output; the branch, with nothing on it, is gone.
    let logs = run_conductor(&t, &["logs", "f1"], 0).stdout;
    assert!(
        logs.contains("installing") && logs.contains("broken-dependency"),
        "{logs}"
    );
    assert_eq!(r["worktree"]["kept"], false, "{r}");
    assert!(git(&repo, &["branch", "--list", "conductor/*"])
        .trim()
        .is_empty());
}

#[test]
fn no_worktree_runs_a_task_in_place_when_the_roots_default_is_a_worktree() {
    let t = TestRoot::new();
    let repo = repo(&t);
    config(&t, r#"{"worktree": true}"#);
    let _w = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    submit(&t, &repo, "n1", "in place", &["--no-worktree"]);
    let r = result(&t, "n1");
    assert_eq!(r["success"], true, "{r}");
    assert!(r.get("worktree").is_none_or(Value::is_null), "{r}");
    assert_eq!(
        std::fs::read_to_string(repo.join("out.txt")).unwrap(),
        "in place\n"
    );
    submit(&t, &repo, "n2", "in a worktree", &[]);
    let r = result(&t, "n2");
    assert_eq!(r["worktree"]["branch"], "conductor/n2", "{r}");
    let both = run_conductor(&t, &["submit", "--worktree", "--no-worktree", "x"], 2);
    assert!(both.stderr.contains("--no-worktree"), "{}", both.stderr);
}

#[test]
fn a_killed_workers_port_stays_taken_while_its_agent_runs_and_recovery_frees_it() {
    let t = TestRoot::new();
    let repo = repo(&t);
    config(&t, r#"{"worktree": true, "portRange": [41000, 41001]}"#);
    let mut first = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    let m1 = t.dir.path().join("m1");
    submit(&t, &repo, "k1", &format!("HANG {}", m1.display()), &[]);
    wait_until(BOUND, "k1 to run with its port", || m1.exists());
    assert_eq!(std::fs::read_to_string(&m1).unwrap().trim(), "41000");
    first.crash();
    let crashed = std::time::Instant::now();

    // k1's agent dies with its worker, but the child it started (a server on its port)
    // does not: the port stays k1's.
    let second = WorkerProc::start(&t, Slot(1), &probe(), &[], &[]);
    submit(&t, &repo, "k2", "next", &[]);
    let r = result(&t, "k2");
    // A sweep may recover slot 0 once its status has been silent 10 s; before that
    // the port must still be k1's.
    if crashed.elapsed() < Duration::from_secs(8) {
        assert!(r["output"].as_str().unwrap().contains("port=41001"), "{r}");
    }

    // Recovery (the slot's worker back) stops k1's agent and frees its port.
    let again = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    assert_eq!(result(&t, "k1")["outcome"], "interrupted");
    let lock = t.path().join("ports/41000.lock");
    wait_until(BOUND, "port 41000 freed", || !lock.exists());
    drop(second);
    submit(&t, &repo, "k3", "after", &[]);
    let r = result(&t, "k3");
    assert!(r["output"].as_str().unwrap().contains("port=41000"), "{r}");
    drop(again);
    crate::harness::assert_nothing_left(t.path());
}

#[test]
fn a_cancel_stops_a_long_setup_at_once() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let started = t.dir.path().join("setup-started");
    config(
        &t,
        &format!(
            r#"{{"worktreeSetup": {{"command": "touch {}; exec sleep 120"}}}}"#,
            started.display()
        ),
    );
    let w = WorkerProc::start(&t, Slot(0), &probe(), &[], &[]);
    submit(&t, &repo, "c1", "hello", &["--worktree"]);
    wait_until(BOUND, "the setup to start", || started.exists());
    run_conductor(&t, &["cancel", "c1"], 0);
    let r = result(&t, "c1");
    assert_eq!(r["outcome"], "cancelled", "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("worktree setup") && error.contains("cancelled"),
        "{error}"
    );
    assert_eq!(r["output"], "", "the agent never ran: {r}");
    drop(w);
    crate::harness::assert_nothing_left(t.path());
}
