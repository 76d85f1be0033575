//! Every wait ends, and nothing is created by accident — through the real binaries:
//! `wait`, `send --wait` and `submit --wait` when nobody serves, when the worker dies
//! mid-task, one duration syntax for every flag, and no roots or slots made by a typo.

use std::fs;
use std::path::Path;
use std::time::Duration;

use conductor::{Outcome, Slot, Task, TaskId};

use crate::harness::Bg;
use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot, WorkerProc};

/// Generous: the machine has two cores and is busy.
const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);
const S1: Slot = Slot(1);

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `conductor args…` on `root` (never the user's), bounded: a wait that never ends
/// fails the test instead of hanging it.
fn run_on(root: &Path, args: &[&str]) -> Ran {
    let out = assert_cmd::Command::new(bin("conductor"))
        .args(args)
        .env("CONDUCTOR_HOME", root)
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .timeout(BOUND)
        .output()
        .expect("run conductor");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn run_ok(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    let r = run_on(t.path(), args);
    assert_eq!(
        r.code,
        Some(code),
        "conductor {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    r
}

fn slow_agent() -> String {
    agent("slow.sh").display().to_string()
}

#[track_caller]
fn wait_working(t: &TestRoot, slot: Slot, id: &str) {
    let want = TaskId::from(id);
    wait_until(BOUND, &format!("worker {slot} working on {id}"), || {
        matches!(t.client.read_status(slot), Ok(Some(s))
            if s.status == conductor::WorkerState::Working && s.task_id.as_ref() == Some(&want))
    });
}

#[test]
fn waits_on_a_slot_nobody_serves_end_with_exit_4_naming_the_worker_to_start() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    // send without --wait delivers, and warns that nobody will pick it up.
    let sent = run_ok(&t, &["send", "0", "hello", "--id", "n1"], 0);
    assert_eq!(sent.stdout.trim(), "n1");
    assert!(
        sent.stderr.contains("no live worker serves slot 0") && sent.stderr.contains("warning"),
        "{}",
        sent.stderr
    );
    assert!(
        t.client.worker(S0).task().exists(),
        "delivered all the same"
    );

    let waited = run_ok(&t, &["wait", "0", "n1"], 4);
    assert!(
        waited.stderr.contains("no live worker serves slot 0")
            && waited.stderr.contains("conductor-worker 0 DIR"),
        "{}",
        waited.stderr
    );
    let without_id = run_ok(&t, &["wait", "0"], 4);
    assert!(
        without_id.stderr.contains("task n1"),
        "{}",
        without_id.stderr
    );

    t.client.create_worker(S1).unwrap();
    let sent = run_ok(&t, &["send", "1", "hello", "--wait"], 4);
    assert!(
        sent.stderr.contains("no live worker serves slot 1")
            && sent.stderr.contains("conductor-worker 1 DIR"),
        "{}",
        sent.stderr
    );
}

#[test]
fn submit_wait_with_no_live_worker_on_the_root_ends_with_exit_4() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let queued = run_ok(&t, &["submit", "hello", "--id", "q1"], 0);
    assert!(
        queued.stderr.contains("no live worker serves the queue"),
        "{}",
        queued.stderr
    );
    let waited = run_ok(&t, &["submit", "again", "--wait"], 4);
    assert!(
        waited.stderr.contains("no live worker serves the queue")
            && waited.stderr.contains("conductor-worker N DIR"),
        "{}",
        waited.stderr
    );
    // With a worker up, the queued tasks run and the wait ends with the result.
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let served = run_ok(&t, &["submit", "echoed", "--wait"], 0);
    assert_eq!(served.stdout.trim(), "echoed");
}

#[test]
fn a_worker_killed_mid_task_is_reported_and_the_wait_ends_with_recovery_result() {
    let t = TestRoot::new();
    let mut victim = WorkerProc::start(&t, S0, &slow_agent(), &[], &[]);
    // A live worker elsewhere on the root could recover the slot: the wait waits on.
    let _other = WorkerProc::start(&t, S1, "cat", &[], &[]);
    let mut wait = Bg::spawn(&t, &["send", "0", "long job", "--id", "k1", "--wait"], true);
    wait_working(&t, S0, "k1");
    victim.crash();
    wait.wait_stderr("the wait to report the death", "died with task k1");
    let said = wait.stderr();
    assert!(
        said.contains(&format!("worker 0 (pid {})", victim.pid)),
        "{said}"
    );
    assert!(
        wait.child.try_wait().unwrap().is_none(),
        "the wait goes on for recovery's result: {said}"
    );
    // Started again, the worker recovers its slot and the task ends interrupted.
    let _again = WorkerProc::start(&t, S0, &slow_agent(), &[], &[]);
    assert_eq!(wait.wait_exit().code(), Some(1), "{}", wait.stderr());
    assert!(wait.stderr().contains("interrupted"), "{}", wait.stderr());
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("k1"))
        .unwrap()
        .unwrap();
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
}

#[test]
fn a_worker_killed_mid_task_with_nobody_left_ends_the_wait_naming_who_must_recover() {
    let t = TestRoot::new();
    let mut victim = WorkerProc::start(&t, S0, &slow_agent(), &[], &[]);
    let mut wait = Bg::spawn(&t, &["send", "0", "long job", "--id", "k2", "--wait"], true);
    wait_working(&t, S0, "k2");
    victim.crash();
    assert_eq!(wait.wait_exit().code(), Some(4), "{}", wait.stderr());
    let said = wait.stderr();
    assert!(said.contains("died with task k2"), "{said}");
    assert!(
        said.contains("conductor recover 0") && said.contains("conductor-worker 0 DIR"),
        "names who must act: {said}"
    );
    // Doing what it says ends the task (and its orphaned agent).
    run_ok(&t, &["recover", "0"], 0);
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("k2"))
        .unwrap()
        .unwrap();
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    assert_nothing_left(t.path());
}

#[test]
fn a_queued_task_whose_worker_dies_is_reported_by_submit_wait() {
    let t = TestRoot::new();
    let mut victim = WorkerProc::start(&t, S0, &slow_agent(), &[], &[]);
    let mut wait = Bg::spawn(&t, &["submit", "long job", "--id", "k3", "--wait"], true);
    wait_working(&t, S0, "k3");
    victim.crash();
    assert_eq!(wait.wait_exit().code(), Some(4), "{}", wait.stderr());
    let said = wait.stderr();
    assert!(
        said.contains("worker 0") && said.contains("died with task k3"),
        "{said}"
    );
    run_ok(&t, &["recover", "0"], 0);
    assert_nothing_left(t.path());
}

#[test]
fn every_duration_flag_takes_90s_5m_and_bare_seconds() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    // The task's own limit, on send and submit.
    run_ok(&t, &["send", "0", "a", "--id", "d1", "--timeout", "90s"], 0);
    let task = t.client.read_task(S0).unwrap().unwrap();
    assert_eq!(task.timeout_secs, Some(90));
    fs::remove_file(t.client.worker(S0).task()).unwrap();
    run_ok(&t, &["send", "0", "a", "--id", "d2", "--timeout", "120"], 0);
    assert_eq!(
        t.client.read_task(S0).unwrap().unwrap().timeout_secs,
        Some(120)
    );
    fs::remove_file(t.client.worker(S0).task()).unwrap();
    run_ok(&t, &["submit", "b", "--timeout", "5m"], 0);
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let pending = queue.pending().unwrap();
    let bytes = fs::read(&pending[0].path).unwrap();
    let queued: Task = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(queued.timeout_secs, Some(300));
    run_ok(&t, &["gc", "--older-than", "1"], 0);
    run_ok(&t, &["gc", "--older-than", "1h"], 0);

    // The worker's own flags, and the waits'.
    let _w = WorkerProc::start(
        &t,
        S0,
        "cat",
        &["--timeout", "5m", "--kill-grace", "2s"],
        &[],
    );
    let sent = run_ok(
        &t,
        &[
            "send",
            "0",
            "hi",
            "--id",
            "d3",
            "--wait",
            "--wait-timeout",
            "5m",
        ],
        0,
    );
    assert_eq!(sent.stdout.trim(), "hi");
    run_ok(&t, &["wait", "0", "d3", "--timeout", "90s"], 0);
    run_ok(&t, &["wait", "0", "d3", "--timeout", "90"], 0);
    let done = run_ok(
        &t,
        &[
            "submit",
            "q",
            "--wait",
            "--wait-timeout",
            "1m",
            "--timeout",
            "2m",
        ],
        0,
    );
    assert_eq!(done.stdout.trim(), "q");
    // An expired wait: exit 1, and the task carries on.
    run_ok(&t, &["wait", "0", "never", "--timeout", "0.5"], 1);
    for bad in [
        vec!["wait", "0", "d3", "--timeout", "soon"],
        vec!["send", "0", "x", "--timeout", "soon"],
        vec!["gc", "--older-than", "-1"],
    ] {
        let r = run_ok(&t, &bad, 2);
        assert!(
            r.stderr.contains("soon") || r.stderr.contains("-1"),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn commands_on_a_missing_root_fail_naming_init_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("nonexistent");
    let root_s = root.to_str().unwrap();
    for args in [
        vec!["send", "0", "hi", "--root", root_s],
        vec!["submit", "hi", "--root", root_s],
        vec!["status", "--root", root_s],
        vec!["wait", "0", "x", "--root", root_s],
    ] {
        let r = run_on(dir.path(), &args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("no conductor root at") && r.stderr.contains("conductor init"),
            "{args:?}: {}",
            r.stderr
        );
        assert!(!root.exists(), "{args:?} created the root");
    }
    // The library refuses too.
    let q = conductor::queue::Queue::new(conductor::Root::new(&root));
    assert!(matches!(
        q.submit(&Task::new("hi")),
        Err(conductor::Error::NoRoot { .. })
    ));
    assert!(!root.exists());
}

#[test]
fn send_to_a_slot_that_does_not_exist_is_refused() {
    let t = TestRoot::new();
    let r = run_ok(&t, &["send", "5", "hi"], 2);
    assert!(
        r.stderr.contains("no worker slot 5") && r.stderr.contains("conductor create-worker 5"),
        "{}",
        r.stderr
    );
    assert!(!t.client.worker(Slot(5)).dir.exists(), "no slot was made");
    let err = t
        .client
        .write_task(Slot(5), &Task::new("hi").with_id("s5"))
        .unwrap_err();
    assert!(
        matches!(err, conductor::Error::NoSuchSlot { slot: 5, .. }),
        "{err:?}"
    );
    // The id was not used up by the refusal.
    t.client.create_worker(Slot(5)).unwrap();
    t.client
        .write_task(Slot(5), &Task::new("hi").with_id("s5"))
        .expect("delivered once the slot exists");
}

#[test]
fn a_prompt_file_that_does_not_exist_is_bad_input() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let missing = t.dir.path().join("no-such-prompt.txt");
    for cmd in ["send", "submit"] {
        let mut args = vec![cmd];
        if cmd == "send" {
            args.push("0");
        }
        args.extend(["-f", missing.to_str().unwrap()]);
        let r = run_ok(&t, &args, 2);
        assert!(
            r.stderr.contains(&missing.display().to_string()),
            "names the file: {}",
            r.stderr
        );
    }
    assert!(!t.client.worker(S0).task().exists());
}

/// Issue 25, item 2: `logs ID -f` on a task nobody serves ends as `wait` does (exit 4,
/// saying what to start), for a task in an inbox and one in the queue; Ctrl-C ends a
/// follow with 130, like every other command.
#[test]
fn following_the_log_of_a_task_nobody_serves_ends_saying_who_must_act() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let sent = t
        .client
        .write_task(S0, &Task::new("nobody runs this").with_id("unserved-inbox"))
        .unwrap();
    let queued = run_on(
        t.path(),
        &["submit", "nobody either", "--id", "unserved-queue"],
    );
    assert_eq!(queued.code, Some(0), "{}", queued.stderr);
    for (id, names) in [
        (sent.to_string(), "conductor-worker 0"),
        ("unserved-queue".to_string(), "conductor-worker"),
    ] {
        let started = std::time::Instant::now();
        let ran = run_on(t.path(), &["logs", &id, "-f"]);
        assert_eq!(ran.code, Some(4), "logs {id} -f: {}", ran.stderr);
        assert!(ran.stderr.contains(names), "{id}: {}", ran.stderr);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    // Served, but busy: the follow waits; Ctrl-C ends it with 130.
    let _w = WorkerProc::start(&t, S1, "sleep 60", &[], &[]);
    let busy = run_on(t.path(), &["send", "1", "hold the slot", "--id", "busy"]);
    assert_eq!(busy.code, Some(0), "{}", busy.stderr);
    t.client
        .wait_for_status(S1, &[conductor::WorkerState::Working], BOUND)
        .unwrap();
    let q = run_on(
        t.path(),
        &["submit", "wait your turn", "--id", "turn", "--key", "k"],
    );
    assert_eq!(q.code, Some(0), "{}", q.stderr);
    let mut follow = Bg::spawn(&t, &["logs", "turn", "-f"], true);
    // Still following after the grace in which an unserved wait would end.
    let since = std::time::Instant::now();
    wait_until(BOUND, "the grace to pass", || {
        since.elapsed() > Duration::from_secs(3)
    });
    assert!(
        follow.child.try_wait().unwrap().is_none(),
        "{}",
        follow.stderr()
    );
    follow.signal(nix::sys::signal::Signal::SIGINT);
    let status = follow.wait_exit();
    assert_eq!(status.code(), Some(130), "{}", follow.stderr());
}

/// Issue 25, item 4: which output is which. `wait A B` heads each output with its task;
/// `wait --json` with several tasks prints JSON Lines (one compact result a line);
/// `submit --wait` says the id of the task it waits for on stderr at once, so an
/// interrupted wait leaves the handle of the task that carries on.
#[test]
fn several_waits_say_which_output_is_which_and_submit_wait_names_its_task() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    for (id, prompt) in [("wa", "first answer"), ("wb", "second answer")] {
        let r = run_on(t.path(), &["submit", prompt, "--id", id]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
    let both = run_on(t.path(), &["wait", "wa", "wb"]);
    assert_eq!(both.code, Some(0), "{}", both.stderr);
    let lines: Vec<&str> = both.stdout.lines().collect();
    let head_a = lines
        .iter()
        .position(|l| l.starts_with("── task wa"))
        .expect(&both.stdout);
    let head_b = lines
        .iter()
        .position(|l| l.starts_with("── task wb"))
        .expect(&both.stdout);
    assert_eq!(lines[head_a + 1], "first answer", "{}", both.stdout);
    assert_eq!(lines[head_b + 1], "second answer", "{}", both.stdout);
    assert!(head_a < head_b);
    // One task: its output alone, as before.
    let one = run_on(t.path(), &["wait", "wa"]);
    assert_eq!(one.stdout, "first answer\n");

    let json = run_on(t.path(), &["wait", "wa", "wb", "--json"]);
    let docs: Vec<serde_json::Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{}", json.stdout)))
        .collect();
    assert_eq!(docs.len(), 2, "{}", json.stdout);
    assert_eq!(docs[0]["taskId"], "wa");
    assert_eq!(docs[1]["taskId"], "wb");

    // Nobody free to run it: submit --wait waits, having named the task.
    drop(_w);
    let _slow = WorkerProc::start(&t, S1, "sleep 60", &[], &[]);
    let hold = run_on(t.path(), &["submit", "hold", "--id", "hold"]);
    assert_eq!(hold.code, Some(0));
    t.client
        .wait_for_status(S1, &[conductor::WorkerState::Working], BOUND)
        .unwrap();
    let mut waiting = Bg::spawn(&t, &["submit", "behind the hold", "--wait"], true);
    // The whole line: stderr is unbuffered, so the id may come in a write of its own.
    wait_until(BOUND, "the id on stderr", || {
        waiting
            .stderr()
            .lines()
            .any(|l| l.starts_with("submitted task ") && l.contains(';'))
    });
    let said = waiting.stderr();
    let id = said
        .split("submitted task ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .unwrap_or_else(|| panic!("no id in {said:?}"))
        .to_string();
    waiting.signal(nix::sys::signal::Signal::SIGINT);
    waiting.wait_exit();
    let found = run_on(t.path(), &["tasks", "--json"]);
    assert!(
        found.stdout.contains(&format!("\"{id}\"")),
        "{id}: {}",
        found.stdout
    );
}

#[test]
fn a_queued_task_naming_a_preset_nobody_serves_ends_its_wait_with_exit_4_naming_it() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &["--preset", "command"], &[]);
    run_ok(
        &t,
        &[
            "submit",
            "for codex",
            "--id",
            "cx1",
            "--agent-preset",
            "codex",
        ],
        0,
    );
    let started = std::time::Instant::now();
    let waited = run_ok(&t, &["wait", "cx1"], 4);
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
    assert!(
        waited.stderr.contains("task cx1 needs agent preset codex")
            && waited.stderr.contains("they serve command")
            && waited
                .stderr
                .contains("conductor-worker N DIR --preset codex"),
        "{}",
        waited.stderr
    );
    // Still queued, untouched; a task for the preset served runs beside it.
    let queue = run_ok(&t, &["queue"], 0);
    assert!(queue.stdout.contains("cx1"), "{}", queue.stdout);
    let served = run_ok(
        &t,
        &["submit", "echoed", "--agent-preset", "command", "--wait"],
        0,
    );
    assert_eq!(served.stdout.trim(), "echoed");
    // Once a worker serves codex, the task runs and the wait ends with its result.
    let _codex = WorkerProc::start(&t, S1, "cat", &["--preset", "codex"], &[]);
    let waited = run_ok(&t, &["wait", "cx1"], 0);
    assert_eq!(waited.stdout.trim(), "for codex", "{}", waited.stderr);
}

/// A wait whose reader is gone ends: `wait A B` printing A's output into a full disk
/// (`/dev/full`: every write fails) stops there instead of waiting on for B, which a
/// pause holds. Before, the failed print was dropped and the wait went on until its
/// timeout.
#[test]
fn a_wait_whose_output_cannot_be_written_ends_instead_of_waiting_on() {
    let t = TestRoot::new();
    let root = t.path();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let a = run_on(root, &["submit", "first", "--wait"]);
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    let listed = run_on(root, &["tasks", "--json", "--all"]);
    let v: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let first = v["tasks"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(run_on(root, &["pause", "--key", "held"]).code, Some(0));
    let b = run_on(root, &["submit", "second", "--key", "held"]);
    assert_eq!(b.code, Some(0), "{}", b.stderr);
    let second = b.stdout.trim().to_string();

    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = std::process::Command::new(bin("conductor"))
        .args(["wait", &first, &second, "--wait-timeout", "10m"])
        .env("CONDUCTOR_HOME", root)
        .env_remove("CONDUCTOR_WORKER")
        .stdout(full)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run conductor");
    let mut status = None;
    let ended = std::time::Instant::now() + BOUND;
    while status.is_none() && std::time::Instant::now() < ended {
        status = child.try_wait().unwrap();
        if status.is_none() {
            // Polling a child's exit: the bound, not this pause, is what the test asserts.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Reaped whatever happened (killed first if it was still waiting).
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        status.is_some(),
        "`wait` went on waiting for {second} after its output could not be written"
    );
    assert_ne!(
        status.unwrap().code(),
        Some(0),
        "a failed print is no success"
    );
}
