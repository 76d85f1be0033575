//! The worker daemon through its real binary, with fake agents from tests/agents/.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use conductor::{Outcome, Slot, Status, Task, TaskId, TaskResult, WorkerState};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);

fn result_of(t: &TestRoot, id: &str) -> TaskResult {
    t.client
        .wait_for_result(S0, &TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}"))
}

fn send(t: &TestRoot, id: &str, prompt: &str) {
    t.client
        .write_task(S0, &Task::new(prompt).with_id(id))
        .unwrap_or_else(|e| panic!("write_task {id}: {e}"));
}

fn wait_working(t: &TestRoot, id: &str) -> Status {
    let want = TaskId::from(id);
    let mut last = None;
    wait_until(BOUND, "status working", || {
        last = t.client.read_status(S0).ok().flatten();
        matches!(&last, Some(s) if s.status == WorkerState::Working && s.task_id.as_ref() == Some(&want))
    });
    last.unwrap()
}

fn sh(script: &str) -> String {
    agent(script).display().to_string()
}

#[test]
fn success_round_trip_and_environment() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, &sh("env.sh"), &[], &[]);
    let task = Task::new("hello")
        .with_id("env1")
        .with_context(serde_json::json!({"repo": "x", "n": 1}));
    t.client.write_task(S0, &task).unwrap();
    let r = result_of(&t, "env1");
    assert!(r.success, "{r:?}");
    assert_eq!(r.error, None);
    assert_eq!(r.outcome, Some(Outcome::Success));
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.contains("worker=0\n"), "{}", r.output);
    assert!(r.output.contains("task=env1\n"), "{}", r.output);
    assert!(
        r.output.contains(&format!("home={}\n", t.path().display())),
        "{}",
        r.output
    );
    assert!(
        r.output.contains(r#"context={"n":1,"repo":"x"}"#)
            || r.output.contains(r#"context={"repo":"x","n":1}"#),
        "{}",
        r.output
    );
    let cwd = t.dir.path().canonicalize().unwrap();
    assert!(
        r.output.contains(&format!("cwd={}\n", cwd.display())),
        "{}",
        r.output
    );
    // Status says done (published after result.json, which mirrors results/<id>.json).
    let st = t
        .client
        .wait_for_status(S0, &[WorkerState::Done], BOUND)
        .unwrap();
    assert_eq!(st.task_id, Some(TaskId::from("env1")));
    let newest = t.client.read_result(S0).unwrap().unwrap();
    assert_eq!(newest, r);
    // The run's stdout log is kept as tasks/<id>.log.
    assert_eq!(
        fs::read_to_string(t.client.worker(S0).task_log(&TaskId::from("env1"))).unwrap(),
        r.output
    );
    // running.json and the lock go right after the status is published.
    wait_until(BOUND, "running.json and .lock gone", || {
        !t.client.worker(S0).running().exists() && !t.client.worker(S0).lock_dir().exists()
    });
    // The task as it ran is kept beside its result.
    let kept: Task = serde_json::from_slice(
        &fs::read(t.client.worker(S0).task_record(&TaskId::from("env1"))).unwrap(),
    )
    .unwrap();
    assert_eq!(kept.prompt, "hello");
    w.signal(Signal::SIGTERM);
    assert!(w.wait_exit(BOUND).success());
    // A clean exit leaves no parked lock directory behind.
    let leftovers: Vec<_> = fs::read_dir(&t.client.worker(S0).dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".lock") && n != ".lock.guard")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_nothing_left(t.path());
}

#[test]
fn numeric_ids_from_original_clients_are_kept() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    // Written the way the original JS client does: a plain (non-atomic) write.
    fs::write(
        t.client.worker(S0).task(),
        br#"{"id": 1705234567890, "prompt": "hi there", "context": {"a": 1}, "timestamp": "2024-01-14T12:34:56.789Z"}"#,
    )
    .unwrap();
    let r = t
        .client
        .wait_for_result(S0, &TaskId::Number(1705234567890), BOUND)
        .unwrap();
    assert_eq!(r.output, "hi there");
    // What the original client polls: status done, then result.json.
    t.client
        .wait_for_status(S0, &[WorkerState::Done], BOUND)
        .unwrap();
    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(t.client.worker(S0).result()).unwrap()).unwrap();
    assert_eq!(raw["taskId"], serde_json::json!(1705234567890u64));
    assert_eq!(raw["success"], serde_json::json!(true));
    assert_eq!(raw["error"], serde_json::Value::Null);
}

#[test]
fn nonzero_exit_is_an_error_with_the_last_stderr_line() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("fail.sh"), &[], &[]);
    send(&t, "f1", "do it");
    let r = result_of(&t, "f1");
    assert!(!r.success);
    assert_eq!(r.outcome, Some(Outcome::Failure));
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.error.as_deref(), Some("exit status 3: something broke"));
    assert_eq!(r.output, "some progress\n");
    assert!(r.stderr.unwrap().contains("warming up"));
    let st = t
        .client
        .wait_for_status(S0, &[WorkerState::Error], BOUND)
        .unwrap();
    assert_eq!(st.task_id, Some(TaskId::from("f1")));
}

#[test]
fn a_worker_whose_agent_cannot_run_refuses_to_start_naming_it_and_the_path() {
    let t = TestRoot::new();
    // Not on PATH: exit 2 at once, naming the command and the PATH searched; the slot
    // was never served.
    let mut w = WorkerProc::spawn(
        &t,
        S0,
        "no-such-agent-xyz --flag",
        &[],
        &[("PATH", "/nowhere/bin:/usr/bin:/bin")],
    );
    let st = w.wait_exit(BOUND);
    assert_eq!(st.code(), Some(2), "{}", w.stderr());
    let err = w.stderr();
    assert!(
        err.contains(
            "the agent command `no-such-agent-xyz` is not found on PATH=/nowhere/bin:/usr/bin:/bin"
        ),
        "{err}"
    );
    assert!(err.contains("pass --agent"), "the hint: {err}");
    assert!(
        t.client.read_status(S0).unwrap().is_none(),
        "no status published"
    );
    assert!(t
        .client
        .read_result_for(S0, &TaskId::from("m0"))
        .unwrap()
        .is_none());

    // A path that is there but not executable, and one that is not there.
    let plain = t.dir.path().join("plain-agent");
    fs::write(&plain, "#!/bin/sh\ncat\n").unwrap();
    for (cmd, says) in [
        (plain.display().to_string(), "is not executable"),
        ("/nonexistent/agent-xyz".to_string(), "does not exist"),
    ] {
        let mut w = WorkerProc::spawn(&t, S0, &cmd, &[], &[]);
        assert_eq!(w.wait_exit(BOUND).code(), Some(2), "{}", w.stderr());
        let err = w.stderr();
        assert!(err.contains(&format!("`{cmd}` {says}")), "{err}");
    }
    // On PATH but not executable: named where it was found.
    let bin_dir = t.dir.path().join("bin");
    fs::create_dir_all(&bin_dir).unwrap();
    fs::write(bin_dir.join("lazy-agent"), "#!/bin/sh\ncat\n").unwrap();
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let mut w = WorkerProc::spawn(&t, S0, "lazy-agent", &[], &[("PATH", &path)]);
    assert_eq!(w.wait_exit(BOUND).code(), Some(2), "{}", w.stderr());
    assert!(
        w.stderr().contains("`lazy-agent` is not executable"),
        "{}",
        w.stderr()
    );
}

#[test]
fn an_agent_gone_after_start_gives_an_error_result_and_the_worker_keeps_serving() {
    let t = TestRoot::new();
    let program = t.dir.path().join("agent-xyz");
    fs::write(&program, "#!/bin/sh\ncat\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    let w = WorkerProc::start(&t, S0, &format!("{} --flag", program.display()), &[], &[]);
    fs::remove_file(&program).unwrap();
    send(&t, "m1", "one");
    let r = result_of(&t, "m1");
    assert!(!r.success);
    let err = r.error.unwrap();
    assert!(err.contains(&program.display().to_string()), "{err}");
    send(&t, "m2", "two");
    assert!(!result_of(&t, "m2").success);
    assert!(
        nix::sys::signal::kill(Pid::from_raw(w.pid as i32), None).is_ok(),
        "worker died"
    );
}

#[test]
fn huge_output_is_kept_whole_in_a_file() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("huge_output.sh"), &[], &[]);
    send(&t, "big", "go");
    let r = result_of(&t, "big");
    assert!(r.success, "{:?}", r.error);
    assert!(r.output_truncated);
    assert!(!r.output.is_empty() && r.output.len() < 10_000_000);
    assert!(r.output.bytes().all(|b| b == b'x'));
    let file = PathBuf::from(r.output_file.expect("outputFile"));
    // The log is stdout whole, with the agent's stderr line marked in it.
    let kept = fs::read_to_string(&file).unwrap();
    let stdout = kept.replace("stderr│ starting\n", "");
    assert_eq!(kept.len() - stdout.len(), "stderr│ starting\n".len());
    let stdout = stdout.trim_end_matches('\n');
    assert!(stdout.len() == 10_000_000 && stdout.bytes().all(|b| b == b'x'));
    assert_eq!(file, t.client.worker(S0).task_log(&TaskId::from("big")));
    // A later run starts a fresh output.log without touching the kept copy.
    send(&t, "big2", "go");
    assert!(result_of(&t, "big2").output_truncated);
    assert_eq!(fs::read_to_string(&file).unwrap(), kept);
}

#[test]
fn prompt_larger_than_a_pipe_buffer_arrives_whole() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "wc -c", &[], &[]);
    let prompt = "p".repeat(1024 * 1024 + 17);
    send(&t, "bigprompt", &prompt);
    let r = result_of(&t, "bigprompt");
    assert_eq!(r.output.trim(), (1024 * 1024 + 17).to_string());
}

#[test]
fn timeout_stops_the_agent_group() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    t.client
        .write_task(S0, &Task::new("x").with_id("slow1").with_timeout_secs(1))
        .unwrap();
    let st = wait_working(&t, "slow1");
    let agent_pid = st.agent_pid.unwrap();
    let r = result_of(&t, "slow1");
    assert_eq!(r.outcome, Some(Outcome::Timeout));
    assert_eq!(r.error.as_deref(), Some("timed out after 1s"));
    assert_eq!(r.output, "working\n");
    wait_until(BOUND, "agent gone", || {
        !conductor::host::pid_alive(agent_pid)
    });
}

#[test]
fn an_agent_ignoring_sigterm_is_killed_after_the_grace_period() {
    let t = TestRoot::new();
    let pidfile = t.dir.path().join("agent.pid");
    let _w = WorkerProc::start(
        &t,
        S0,
        &sh("stubborn.sh"),
        &["--timeout", "1", "--kill-grace", "1"],
        &[("AGENT_PIDFILE", pidfile.to_str().unwrap())],
    );
    send(&t, "stub", "x");
    let r = result_of(&t, "stub");
    assert_eq!(r.outcome, Some(Outcome::Timeout));
    assert_eq!(r.signal, Some(libc_sigkill()));
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(BOUND, "stubborn agent gone", || {
        !conductor::host::pid_alive(pid)
    });
}

fn libc_sigkill() -> i32 {
    Signal::SIGKILL as i32
}

#[test]
fn background_children_of_an_agent_do_not_outlive_the_task() {
    let t = TestRoot::new();
    let pidfile = t.dir.path().join("bg.pid");
    let _w = WorkerProc::start(
        &t,
        S0,
        &sh("background.sh"),
        &[],
        &[("AGENT_PIDFILE", pidfile.to_str().unwrap())],
    );
    send(&t, "bg", "x");
    let r = result_of(&t, "bg");
    assert!(r.success);
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(BOUND, "background child gone", || {
        !conductor::host::pid_alive(pid)
    });
}

#[test]
fn cancel_file_stops_the_running_task() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, "c1", "x");
    let st = wait_working(&t, "c1");
    // While it runs, its stdout streams into output.log.
    wait_until(BOUND, "output.log to show the agent's output", || {
        fs::read_to_string(t.client.worker(S0).output_log()).is_ok_and(|s| s == "working\n")
    });
    fs::write(t.client.worker(S0).cancel(), "c1\n").unwrap();
    let r = result_of(&t, "c1");
    assert_eq!(r.outcome, Some(Outcome::Cancelled));
    assert_eq!(r.error.as_deref(), Some("cancelled"));
    wait_until(BOUND, "agent gone", || {
        !conductor::host::pid_alive(st.agent_pid.unwrap())
    });
    assert!(
        !t.client.worker(S0).cancel().exists(),
        "cancel file consumed"
    );
}

#[test]
fn an_empty_cancel_file_left_while_idle_does_not_cancel_the_next_task() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    fs::write(t.client.worker(S0).cancel(), "").unwrap();
    send(&t, "after-touch", "still runs");
    let r = result_of(&t, "after-touch");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "still runs");
}

#[test]
fn sigterm_to_the_worker_interrupts_the_task_and_exits_cleanly() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, "int1", "x");
    wait_working(&t, "int1");
    w.signal(Signal::SIGTERM);
    let st = w.wait_exit(BOUND);
    assert_eq!(st.code(), Some(0), "stderr:\n{}", w.stderr());
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("int1"))
        .unwrap()
        .expect("interrupted result");
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    assert!(r.error.unwrap().starts_with("interrupted"));
    assert!(!t.client.worker(S0).running().exists());
    assert!(!t.client.worker(S0).lock_dir().exists());
    assert_nothing_left(t.path());
}

#[test]
fn sigkilled_worker_restarts_with_an_interrupted_result_and_no_rerun() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let env = [("AGENT_LOG", log.to_str().unwrap())];
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &env);
    send(&t, "k1", "x");
    let st = wait_working(&t, "k1");
    let agent_pid = st.agent_pid.unwrap();
    wait_until(BOUND, "agent logged its start", || {
        fs::read_to_string(&log).is_ok_and(|s| s.contains("start k1"))
    });
    w.signal(Signal::SIGKILL);
    w.wait_exit(BOUND);
    // The parent-death signal takes the agent down with its worker.
    wait_until(BOUND, "agent died with its worker", || {
        !conductor::host::pid_alive(agent_pid)
    });
    assert!(
        t.client.worker(S0).running().exists(),
        "running.json survives the crash"
    );

    let w2 = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &env);
    let r = result_of(&t, "k1");
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    assert_eq!(
        r.error,
        Some(format!("interrupted: worker pid {} died", w.pid))
    );
    assert!(!t.client.worker(S0).running().exists());
    let runs = fs::read_to_string(&log).unwrap();
    assert_eq!(runs.matches("start k1").count(), 1, "ran twice: {runs}");
    drop(w2);
    assert_nothing_left(t.path());
}

#[test]
fn max_attempts_allows_a_rerun_after_a_crash() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let env = [("AGENT_LOG", log.to_str().unwrap())];
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &env);
    let mut task = Task::new("x").with_id("again").with_timeout_secs(2);
    task.max_attempts = Some(2);
    t.client.write_task(S0, &task).unwrap();
    wait_working(&t, "again");
    wait_until(BOUND, "first attempt logged its start", || {
        fs::read_to_string(&log).is_ok_and(|s| s.contains("start again"))
    });
    w.signal(Signal::SIGKILL);
    w.wait_exit(BOUND);
    let _w2 = WorkerProc::spawn(&t, S0, &sh("slow.sh"), &[], &env);
    let r = result_of(&t, "again");
    // The second attempt ran (and hit its timeout).
    assert_eq!(r.attempt, Some(2));
    assert_eq!(r.outcome, Some(Outcome::Timeout));
    assert_eq!(
        fs::read_to_string(&log)
            .unwrap()
            .matches("start again")
            .count(),
        2
    );
}

#[test]
fn a_second_worker_on_the_same_slot_is_refused() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let out = Command::new(bin("conductor-worker"))
        .args(["0", t.dir.path().to_str().unwrap(), "--agent", "cat"])
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to start worker 0"), "{err}");
    assert!(err.contains(&format!("pid {}", w.pid)), "{err}");
}

#[test]
fn nested_start_is_refused_unless_allowed() {
    let t = TestRoot::new();
    let out = Command::new(bin("conductor-worker"))
        .args(["1", t.dir.path().to_str().unwrap(), "--agent", "cat"])
        .env("CONDUCTOR_HOME", t.path())
        .env("CONDUCTOR_WORKER", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-nested"));
}

#[test]
fn a_task_written_in_two_halves_runs() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let body = br#"{"id": "halves", "prompt": "written slowly", "timestamp": 1705234567.89}"#;
    let (a, b) = body.split_at(body.len() / 2);
    let path = t.client.worker(S0).task();
    let mut f = fs::File::create(&path).unwrap();
    use std::io::Write;
    f.write_all(a).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(100)); // the slow writer under test, not synchronization
    f.write_all(b).unwrap();
    drop(f);
    let r = result_of(&t, "halves");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "written slowly");
    assert_eq!(
        fs::read_dir(t.client.worker(S0).rejected_dir())
            .unwrap()
            .count(),
        0
    );
}

/// (name, how to write it into the inbox, readable id, what the reason must say)
type BadInput = (
    &'static str,
    Box<dyn Fn(&Path)>,
    Option<&'static str>,
    &'static str,
);

/// Each bad input is moved to rejected/ with a reason, answered with an error result
/// when its id is readable, and the worker keeps serving.
#[test]
fn bad_inputs_are_rejected_with_reasons_and_the_worker_keeps_serving() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let w = t.client.worker(S0);
    let cases: Vec<BadInput> = vec![
        (
            "wrong type",
            Box::new(|p: &Path| fs::write(p, br#"{"id": "bad1", "prompt": 5}"#).unwrap()),
            Some("bad1"),
            "invalid type",
        ),
        (
            "missing prompt",
            Box::new(|p: &Path| fs::write(p, br#"{"id": "bad2"}"#).unwrap()),
            Some("bad2"),
            "missing field `prompt`",
        ),
        (
            "bad id",
            Box::new(|p: &Path| fs::write(p, br#"{"id": "a/b", "prompt": "p"}"#).unwrap()),
            None,
            "only A-Z",
        ),
        (
            "newer schema",
            Box::new(|p: &Path| {
                fs::write(p, br#"{"schema": 9, "id": "bad4", "prompt": "p"}"#).unwrap()
            }),
            Some("bad4"),
            "schema 9",
        ),
        (
            "truncated",
            Box::new(|p: &Path| fs::write(p, br#"{"id": "bad5", "prompt": "hel"#).unwrap()),
            None,
            "EOF",
        ),
        (
            "not utf-8",
            Box::new(|p: &Path| {
                fs::write(p, b"{\"id\": \"bad6\", \"prompt\": \"\xff\xfe\"}").unwrap()
            }),
            None,
            "UTF-8",
        ),
        (
            "oversize",
            Box::new(|p: &Path| {
                let big = format!(
                    r#"{{"id": "bad7", "prompt": "{}"}}"#,
                    "a".repeat(5 * 1024 * 1024)
                );
                fs::write(p, big).unwrap()
            }),
            None,
            "over the limit",
        ),
        (
            "symlink",
            Box::new(|p: &Path| {
                let target = p.with_file_name("elsewhere.json");
                fs::write(&target, br#"{"id": "bad8", "prompt": "p"}"#).unwrap();
                symlink(&target, p).unwrap()
            }),
            None,
            "symbolic link",
        ),
    ];
    for (i, (name, write, id, reason_has)) in cases.iter().enumerate() {
        write(&w.task());
        wait_until(BOUND, &format!("{name}: inbox emptied"), || {
            fs::symlink_metadata(w.task()).is_err()
        });
        let reasons: Vec<String> = fs::read_dir(w.rejected_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".reason"))
            .map(|e| fs::read_to_string(e.path()).unwrap())
            .collect();
        assert_eq!(
            reasons.len(),
            i + 1,
            "{name}: one reason per rejection: {reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.contains(reason_has) && r.contains("task.json")),
            "{name}: no reason containing {reason_has:?}: {reasons:?}"
        );
        if let Some(id) = id {
            let r = result_of(&t, id);
            assert_eq!(r.outcome, Some(Outcome::Rejected), "{name}");
            assert!(r.error.unwrap().contains(reason_has), "{name}");
        }
        // Still serving.
        let ok = format!("ok{i}");
        send(&t, &ok, "fine");
        assert_eq!(result_of(&t, &ok).output, "fine", "{name}");
    }
    assert!(
        w.dir.join("elsewhere.json").exists(),
        "a symlink's target is never touched"
    );
}

#[test]
fn a_reused_task_id_is_rejected_without_touching_the_first_result() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    send(&t, "dup", "first");
    assert_eq!(result_of(&t, "dup").output, "first");
    // Our client refuses a used id…
    let err = t
        .client
        .write_task(S0, &Task::new("second").with_id("dup"))
        .unwrap_err();
    assert!(err.to_string().contains("already used"), "{err}");
    // …and a client that writes the file itself is answered by the worker.
    fs::write(
        t.client.worker(S0).task(),
        br#"{"id": "dup", "prompt": "second"}"#,
    )
    .unwrap();
    wait_until(BOUND, "second rejected", || {
        t.client
            .read_result(S0)
            .ok()
            .flatten()
            .is_some_and(|r| r.outcome == Some(Outcome::Rejected))
    });
    assert_eq!(result_of(&t, "dup").output, "first");
}

#[test]
fn two_hundred_tasks_back_to_back_each_run_exactly_once() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let _w = WorkerProc::start(
        &t,
        S0,
        &sh("record.sh"),
        &[],
        &[("AGENT_LOG", log.to_str().unwrap())],
    );
    for i in 0..200 {
        let id = TaskId::from(format!("seq-{i}").as_str());
        t.client
            .write_task(S0, &Task::new(format!("prompt {i}")).with_id(id.clone()))
            .unwrap_or_else(|e| panic!("task {i}: {e}"));
        // The instant the worker reports done for it, deliver the next one.
        loop {
            let st = t
                .client
                .wait_for_status(S0, &[WorkerState::Done, WorkerState::Error], BOUND)
                .unwrap();
            if st.task_id.as_ref() == Some(&id) {
                assert_eq!(st.status, WorkerState::Done);
                break;
            }
            t.client.wait_for_result(S0, &id, BOUND).unwrap();
        }
    }
    let results = fs::read_dir(t.client.worker(S0).results_dir())
        .unwrap()
        .count();
    assert_eq!(results, 200);
    for i in 0..200 {
        let r = t
            .client
            .read_result_for(S0, &TaskId::from(format!("seq-{i}").as_str()))
            .unwrap()
            .unwrap();
        assert_eq!(r.output, format!("prompt {i}"));
    }
    let runs = fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 200);
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), 200, "a task ran twice");
}

#[test]
fn recover_command_finishes_an_abandoned_slot() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, "orphan", "x");
    wait_working(&t, "orphan");
    w.signal(Signal::SIGKILL);
    w.wait_exit(BOUND);
    let out = Command::new(bin("conductor"))
        .args(["recover", "0"])
        .env("CONDUCTOR_HOME", t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("orphan"))
        .unwrap()
        .expect("result");
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    assert!(!t.client.worker(S0).lock_dir().exists());
    // Idempotent: a second recovery finds nothing and writes nothing new.
    let again = Command::new(bin("conductor"))
        .args(["recover", "0"])
        .env("CONDUCTOR_HOME", t.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to recover"));
    assert_nothing_left(t.path());
}

#[test]
fn a_cancel_for_a_task_still_in_the_inbox_waits_for_it() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &["--kill-grace", "1"], &[]);
    t.client
        .write_task(S0, &Task::new("x").with_id("first").with_timeout_secs(1))
        .unwrap();
    wait_working(&t, "first");
    // Queue the second and cancel it before it starts.
    send(&t, "second", "y");
    fs::write(t.client.worker(S0).cancel(), "second\n").unwrap();
    // The first runs on, untouched, until its own timeout.
    let first = result_of(&t, "first");
    assert_eq!(first.outcome, Some(Outcome::Timeout), "{first:?}");
    let second = result_of(&t, "second");
    assert_eq!(second.outcome, Some(Outcome::Cancelled), "{second:?}");
    assert_eq!(second.exit_code, None, "the second never started");
    assert!(
        !t.client.worker(S0).cancel().exists(),
        "the cancel was consumed"
    );
}

/// A worker killed after its durable result but before result.json and the status
/// were updated: the next start finishes telling original clients.
#[test]
fn restart_repairs_result_json_for_a_task_whose_result_was_already_durable() {
    let t = TestRoot::new();
    let w = t.client.create_worker(S0).unwrap();
    let id = TaskId::from("W");
    let mut done = TaskResult::failed(id.clone(), Outcome::Success, "");
    done.success = true;
    done.error = None;
    done.output = "finished before the crash".into();
    fs::write(w.result_for(&id), serde_json::to_vec(&done).unwrap()).unwrap();
    fs::write(w.running(), br#"{"id": "W", "prompt": "p"}"#).unwrap();
    fs::write(
        w.result(),
        br#"{"taskId": "older", "output": "", "success": true, "error": null}"#,
    )
    .unwrap();
    let _worker = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let newest = t.client.read_result(S0).unwrap().unwrap();
    assert_eq!(newest.task_id, id);
    assert_eq!(newest.output, "finished before the crash");
    assert!(!w.running().exists());
    assert!(w.task_record(&id).exists());
}

/// A descendant that leaves the agent's process group (setsid) keeps its pipes open;
/// the task must still finish with what the agent printed.
#[test]
fn an_escaped_descendant_holding_the_pipes_does_not_hang_the_task() {
    let t = TestRoot::new();
    let pidfile = t.dir.path().join("escaped.pid");
    let _w = WorkerProc::start(
        &t,
        S0,
        &sh("escape.sh"),
        &[],
        &[("AGENT_PIDFILE", pidfile.to_str().unwrap())],
    );
    let started = Instant::now();
    send(&t, "esc", "x");
    let r = result_of(&t, "esc");
    // Bounded by the reader grace (2 s), not by the escapee's 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let escaped: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The worker, its subreaper, found it by its task marker and stopped it with the
    // task (it would otherwise sleep on for a minute).
    let gone = wait_until_or(BOUND, || !conductor::host::pid_alive(escaped));
    if !gone {
        let _ = kill(Pid::from_raw(escaped as i32), Signal::SIGKILL);
    }
    assert!(gone, "escaped descendant {escaped} outlived its task");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "done\n");
}

fn wait_until_or(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// An agent never runs before status.json names it: a worker killed in the spawn
/// window would otherwise leave it where recovery cannot find it.
#[test]
fn the_agent_runs_only_once_its_record_names_its_pid() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("recorded.sh"), &[], &[]);
    for i in 0..20 {
        let id = format!("rec{i}");
        send(&t, &id, "x");
        assert_eq!(result_of(&t, &id).output, "recorded\n", "task {id}");
    }
}

/// Recovery kills a recorded agent group only if its processes carry the task's
/// marker: a live process of ours at the recorded pid, with the recorded start time
/// but no marker, is someone else's.
#[test]
fn recovery_spares_a_live_process_without_the_task_marker() {
    use std::os::unix::process::CommandExt;
    let t = TestRoot::new();
    let mut stranger = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = stranger.id();
    let w = t.client.create_worker(S0).unwrap();
    fs::write(w.running(), br#"{"id": "planted", "prompt": "p"}"#).unwrap();
    let mut st = Status::new(WorkerState::Working);
    st.task_id = Some(TaskId::from("planted"));
    st.agent_pid = Some(pid);
    st.agent_start_time = conductor::host::process_start_time(pid);
    st.worker_pid = Some(u32::MAX - 1);
    assert!(st.agent_start_time.is_some());
    fs::write(w.status(), serde_json::to_vec(&st).unwrap()).unwrap();
    let _worker = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = result_of(&t, "planted");
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    let alive = stranger.try_wait().unwrap().is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(alive, "recovery killed an unrelated process");
}

/// The task log keeps the head and the tail of a huge output under its cap, with a
/// marker line where the middle was cut, and the result says so.
#[test]
fn the_task_log_is_capped_with_a_marker_and_a_note() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(
        &t,
        S0,
        &sh("huge_output.sh"),
        &["--log-cap", "1000000"],
        &[],
    );
    send(&t, "capped", "go");
    let r = result_of(&t, "capped");
    assert!(r.success, "{:?}", r.error);
    assert!(r.output_truncated);
    let note = r.output_note.expect("outputNote");
    assert!(note.contains("cut"), "{note}");
    let log = fs::read(t.client.worker(S0).task_log(&TaskId::from("capped"))).unwrap();
    assert!(log.len() <= 1_000_000, "{}", log.len());
    // Without the agent's stderr line (marked, in the head or, held while stdout's one
    // long line went on, after a line break at the end).
    let text = String::from_utf8_lossy(&log).replace("stderr│ starting\n", "");
    let marker = text.find("[conductor: ").expect("marker line");
    assert!(text[..marker].trim_end().bytes().all(|b| b == b'x'));
    let after = &text[marker..];
    let tail = after[after.find('\n').unwrap() + 1..].trim_end_matches('\n');
    assert!(tail.len() > 400_000 && tail.bytes().all(|b| b == b'x'));
    assert_eq!(
        marker - 1 + tail.len() + note_cut(&text[marker..]),
        10_000_000
    );
}

/// The byte count the marker line names.
fn note_cut(marker: &str) -> usize {
    marker["[conductor: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// output.log is created fresh per task: a hard link planted under its name is never
/// written through, and a symlink there does not make tasks fail.
#[test]
fn a_planted_output_log_is_replaced_not_written_through() {
    let t = TestRoot::new();
    let w = t.client.create_worker(S0).unwrap();
    let outside = t.dir.path().join("precious.txt");
    fs::write(&outside, "precious\n").unwrap();
    let _ = fs::remove_file(w.output_log());
    fs::hard_link(&outside, w.output_log()).unwrap();
    let _worker = WorkerProc::start(&t, S0, "cat", &[], &[]);
    send(&t, "h1", "agent output");
    assert_eq!(result_of(&t, "h1").output, "agent output");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "precious\n");
    // Planted between tasks, over the file readied for the next one.
    for (i, plant) in ["link", "symlink", "dangling"].iter().enumerate() {
        let _ = fs::remove_file(w.output_log());
        match *plant {
            "link" => fs::hard_link(&outside, w.output_log()).unwrap(),
            "symlink" => symlink(&outside, w.output_log()).unwrap(),
            _ => symlink(t.dir.path().join("nowhere"), w.output_log()).unwrap(),
        }
        let id = format!("p{i}");
        send(&t, &id, "more output");
        let r = result_of(&t, &id);
        assert!(r.success, "{plant}: {:?}", r.error);
        assert_eq!(r.output, "more output");
        assert_eq!(
            fs::read_to_string(&outside).unwrap(),
            "precious\n",
            "{plant}"
        );
        assert!(!t.dir.path().join("nowhere").exists(), "{plant}");
    }
}

/// A cancel asked for while the worker was dying is honoured by recovery: the task
/// ends cancelled instead of being tried again.
#[test]
fn recovery_honours_a_cancel_instead_of_another_attempt() {
    let t = TestRoot::new();
    let w = t.client.create_worker(S0).unwrap();
    fs::write(
        w.running(),
        br#"{"id": "doomed", "prompt": "p", "maxAttempts": 3, "origin": "queue"}"#,
    )
    .unwrap();
    fs::write(w.cancel(), "doomed\n").unwrap();
    let _worker = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("doomed"))
        .unwrap()
        .expect("result");
    assert_eq!(r.outcome, Some(Outcome::Cancelled));
    let queued = conductor::queue::Queue::new(t.client.root().clone());
    assert!(queued.pending().unwrap().is_empty(), "not requeued");
    assert_eq!(
        queued
            .read_result(&TaskId::from("doomed"))
            .unwrap()
            .unwrap()
            .outcome,
        Some(Outcome::Cancelled)
    );
}

/// One running task per key holds for tasks delivered straight to an inbox too.
#[test]
fn a_direct_task_waits_while_its_key_is_busy() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let key_lock = match conductor::dirlock::DirLock::try_acquire(
        &t.client.root().key_lock("alice"),
        &conductor::dirlock::LockOptions::default(),
    )
    .unwrap()
    {
        conductor::dirlock::Acquire::Acquired(l) => l,
        conductor::dirlock::Acquire::Held(h) => panic!("held by {h}"),
    };
    let mut task = Task::new("keyed").with_id("k1");
    task.key = Some("alice".into());
    t.client.write_task(S0, &task).unwrap();
    // It stays in the inbox while the key is busy…
    let err = t
        .client
        .wait_for_result(S0, &TaskId::from("k1"), Duration::from_millis(500))
        .unwrap_err();
    assert!(matches!(err, conductor::Error::Timeout { .. }), "{err}");
    assert!(t.client.worker(S0).task().exists());
    // …and runs once it is free.
    key_lock.release().unwrap();
    assert_eq!(result_of(&t, "k1").output, "keyed");
}

/// An original client polls status.json for its task: after a crash and restart the
/// status must say `error` for that task, not just `idle`.
#[test]
fn after_a_crash_the_restarted_worker_leaves_the_error_status_for_the_task() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, "crash1", "x");
    wait_working(&t, "crash1");
    w.signal(Signal::SIGKILL);
    w.wait_exit(BOUND);
    let w2 = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let st = t.client.read_status(S0).unwrap().unwrap();
    assert_eq!(st.status, WorkerState::Error);
    assert_eq!(st.task_id, Some(TaskId::from("crash1")));
    assert_eq!(st.worker_pid, Some(w2.pid));
    // And it serves the next task as usual.
    send(&t, "after", "fine");
    assert_eq!(result_of(&t, "after").output, "fine");
}

/// A worker killed after the agent's record was written but before status.json named
/// the agent: recovery finds the agent through the record and stops it.
#[test]
fn recovery_kills_an_agent_known_only_from_its_record() {
    use std::os::unix::process::CommandExt;
    let t = TestRoot::new();
    let mut agent = crate::harness::Reaped(
        Command::new("sleep")
            .arg("300")
            .env("CONDUCTOR_TASK_ID", "spawned")
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let pid = agent.0.id();
    let w = t.client.create_worker(S0).unwrap();
    fs::write(w.running(), br#"{"id": "spawned", "prompt": "p"}"#).unwrap();
    conductor::protocol::AgentRecord::new(
        TaskId::from("spawned"),
        pid,
        conductor::host::process_start_time(pid),
    )
    .write(&w.agent_record())
    .unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = result_of(&t, "spawned");
    assert_eq!(r.outcome, Some(Outcome::Interrupted));
    wait_until(BOUND, "the recorded agent to be killed", || {
        agent.0.try_wait().unwrap().is_some()
    });
}
