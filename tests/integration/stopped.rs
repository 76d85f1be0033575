//! A stopped streaming task's result reads as text (issue 35, item 6): a claude task
//! cancelled or timed out mid-run gets the log `conductor logs` shows as its output, not
//! the raw events, with the session id and turns its events had.

use std::time::Duration;

use conductor::{Outcome, Slot, Task, TaskResult};
use serde_json::Value;

use crate::harness::{agent, run_conductor, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);

#[track_caller]
fn assert_readable(r: &TaskResult) {
    assert!(!r.output.contains("{\"type\""), "raw events: {}", r.output);
    assert!(
        r.output.contains("I will read the entry point first."),
        "{}",
        r.output
    );
    assert!(r.output.contains("› Read "), "{}", r.output);
    let session = r.session_id.as_deref().unwrap_or_default();
    assert!(session.starts_with("sess-stream-"), "{r:?}");
    assert_eq!(r.num_turns, Some(1), "{r:?}");
}

#[test]
fn a_cancelled_claude_task_reads_as_its_log_with_its_session() {
    let t = TestRoot::new();
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, S0, &fake, &["--preset", "claude"], &[]);
    // The gate never opens: the agent waits mid-task, after its first tool use.
    let gate = t.dir.path().join("gate");
    let prompt = format!("fix the bug gate={}", gate.display());
    let id = t
        .client
        .write_task(S0, &Task::new(prompt).with_id("stop1"))
        .unwrap();
    let log = t.client.worker(S0).output_log();
    wait_until(BOUND, "the agent's tool use in the live log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("› Read "))
    });
    run_conductor(&t, &["cancel", "stop1"], 0);
    let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
    assert_eq!(r.outcome, Some(Outcome::Cancelled), "{r:?}");
    assert_readable(&r);
    // `result` shows the same text.
    let shown = run_conductor(&t, &["result", "stop1"], 1).stdout;
    assert!(
        shown.contains("I will read the entry point first."),
        "{shown}"
    );
    assert!(!shown.contains("{\"type\""), "{shown}");
}

#[test]
fn a_timed_out_claude_task_in_a_run_summary_reads_as_text() {
    let t = TestRoot::new();
    let fake = agent("fake-claude-stream").display().to_string();
    let gate = t.dir.path().join("gate");
    let prompt = format!("fix the bug gate={}", gate.display());
    let ran = run_conductor(
        &t,
        &[
            "run",
            "--json",
            "--preset",
            "claude",
            "--agent",
            &fake,
            "--timeout",
            "3s",
            &prompt,
        ],
        1,
    );
    let doc: Value = serde_json::from_str(&ran.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", ran.stdout, ran.stderr);
    });
    let r: TaskResult = serde_json::from_value(doc["results"][0].clone()).unwrap();
    assert_eq!(r.outcome, Some(Outcome::Timeout), "{r:?}");
    assert_readable(&r);
    assert!(!ran.stderr.contains("{\"type\""), "{}", ran.stderr);
}
