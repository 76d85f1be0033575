//! Live output of a real agent: the claude preset's event stream shown readable while it
//! runs, stderr marked in the same log, the result lifted from the final event, and a
//! finished task's log by slot and by id.

use std::fs;
use std::time::Duration;

use conductor::maintenance::{plan_gc, GcOptions};
use conductor::{Slot, Task, TaskId, TaskResult};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::{agent, run_conductor, Bg, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);

fn stream_worker(t: &TestRoot) -> WorkerProc {
    let fake = agent("fake-claude-stream").display().to_string();
    WorkerProc::start(t, S0, &fake, &["--preset", "claude"], &[])
}

fn send(t: &TestRoot, id: &str, prompt: &str) {
    t.client
        .write_task(S0, &Task::new(prompt).with_id(id))
        .unwrap_or_else(|e| panic!("write_task {id}: {e}"));
}

fn result_of(t: &TestRoot, id: &str) -> TaskResult {
    t.client
        .wait_for_result(S0, &TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}"))
}

/// The lines the fake agent's run shows, in order, however its stdout and stderr
/// interleave.
const READABLE: [&str; 4] = [
    "I will read the entry point first.",
    "› Read src/main.rs",
    "  ‹ fn main() { (+2 lines)",
    "stderr│ fake-claude: warning: rate limited, retrying in 0s",
];

fn assert_no_line_mixes_streams(log: &str) {
    for line in log.lines() {
        assert!(
            !line.contains("fake-claude:") || line.starts_with("stderr│ fake-claude:"),
            "a stderr line cut into another: {line:?}\n{log}"
        );
    }
}

#[test]
fn logs_follow_shows_a_streaming_claude_agent_as_readable_lines_while_it_runs() {
    let t = TestRoot::new();
    let _w = stream_worker(&t);
    let gate = t.dir.path().join("gate");
    let mut follow = Bg::spawn(&t, &["logs", "0", "-f"], true);
    send(&t, "s1", &format!("fix the bug gate={}", gate.display()));
    follow.wait_stdout("the agent's messages and tool uses", |o| {
        READABLE.iter().all(|l| o.lines().any(|x| x == *l))
    });
    // Still running: the agent waits for the gate before it answers.
    assert!(t
        .client
        .read_result_for(S0, &TaskId::from("s1"))
        .unwrap()
        .is_none());
    let seen = follow.stdout();
    assert!(
        seen.lines()
            .any(|l| l.starts_with("· session sess-stream-")),
        "{seen}"
    );
    assert!(
        !seen.contains("{\"type\""),
        "raw JSON in the live log:\n{seen}"
    );

    fs::write(&gate, "").unwrap();
    let r = result_of(&t, "s1");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(
        r.output,
        format!("answer to: fix the bug gate={}", gate.display())
    );
    let session = r.session_id.clone().expect("sessionId");
    assert!(session.starts_with("sess-stream-"), "{session}");
    assert_eq!(r.cost_usd, Some(0.0375));
    assert_eq!(r.num_turns, Some(3));
    assert_eq!(r.is_error, Some(false));
    assert!(!r.output_truncated);
    follow.wait_stdout("the final line", |o| {
        o.contains(&format!(
            "✓ done · 3 turns · $0.0375 · 1.2s · session {session}\n"
        ))
    });
    follow.signal(Signal::SIGINT);
    assert_eq!(follow.wait_exit().code(), Some(130), "{}", follow.stderr());

    // After the end: the same log by slot (nothing runs there now) and by id.
    let by_slot = run_conductor(&t, &["logs", "0"], 0);
    assert!(by_slot.stderr.contains("s1"), "{}", by_slot.stderr);
    let by_id = run_conductor(&t, &["logs", "s1"], 0);
    assert_eq!(by_slot.stdout, by_id.stdout);
    let log = by_id.stdout;
    assert_eq!(log, follow.stdout(), "the kept log is what was followed");
    for want in READABLE.iter().chain(&[
        "stderr│ fake-claude: loading project settings",
        "stderr│ fake-claude: done",
    ]) {
        assert!(log.lines().any(|l| l == *want), "{want:?} missing:\n{log}");
    }
    assert_no_line_mixes_streams(&log);

    // The raw stream is kept beside the log, every line an event.
    let raw = fs::read_to_string(t.client.worker(S0).task_stream(&TaskId::from("s1"))).unwrap();
    let events: Vec<Value> = raw
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(events.first().unwrap()["subtype"], "init");
    assert_eq!(events.last().unwrap()["type"], "result");
    assert_eq!(events.last().unwrap()["session_id"], session.as_str());
}

#[test]
fn a_malformed_stream_line_is_shown_as_it_is_and_breaks_nothing() {
    let t = TestRoot::new();
    let _w = stream_worker(&t);
    send(&t, "m1", "malformed on purpose");
    let r = result_of(&t, "m1");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "answer to: malformed on purpose");
    assert_eq!(r.cost_usd, Some(0.0375));
    assert_eq!(r.num_turns, Some(3));
    assert!(r.session_id.is_some());
    let log = run_conductor(&t, &["logs", "m1"], 0).stdout;
    // stdout's lines (stderr's come between them wherever they happened to).
    let lines: Vec<&str> = log.lines().filter(|l| !l.starts_with("stderr│ ")).collect();
    let broken = lines
        .iter()
        .position(|l| *l == r#"{"type":"assistant","message":{"content":["#)
        .unwrap_or_else(|| panic!("the broken line as is:\n{log}"));
    assert_eq!(lines[broken + 1], "plain words that are not JSON");
    // What came after it is rendered as usual.
    assert!(
        lines[broken..].contains(&"  ‹ fn main() { (+2 lines)"),
        "{log}"
    );
    assert!(
        lines[broken..].contains(&"answer to: malformed on purpose"),
        "{log}"
    );
    assert!(log.contains("✓ done · 3 turns"), "{log}");
    assert_no_line_mixes_streams(&log);

    // The raw stream goes with its result when gc collects it.
    let raw = t.client.worker(S0).task_stream(&TaskId::from("m1"));
    assert!(raw.exists());
    // Once the worker has finished with the task (its result can show a moment before
    // its slot lets the task go, and gc leaves a task in flight alone).
    crate::harness::wait_until(Duration::from_secs(30), "gc to plan the raw stream", || {
        let plan = plan_gc(t.client.root(), &GcOptions::new(Duration::ZERO)).unwrap();
        plan.items.iter().any(|i| i.path == raw)
    });
}

#[test]
fn an_error_result_fails_the_task_and_says_so_in_the_log() {
    let t = TestRoot::new();
    let _w = stream_worker(&t);
    send(&t, "f1", "fail at the end");
    let r = result_of(&t, "f1");
    assert!(!r.success);
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.cost_usd, Some(0.0375));
    let err = r.error.unwrap();
    assert!(err.contains("error_during_execution"), "{err}");
    let log = run_conductor(&t, &["logs", "0"], 0).stdout;
    assert!(
        log.contains("✗ error_during_execution: could not finish: fail at the end"),
        "{log}"
    );
}

/// `--output-format json` prints the result event alone: lifted exactly as before, and
/// the log shows it readable too.
#[test]
fn the_single_json_document_of_output_format_json_still_works() {
    let t = TestRoot::new();
    let fake = agent("fake_claude.sh").display().to_string();
    let _w = WorkerProc::start(&t, S0, &fake, &["--preset", "claude"], &[]);
    send(&t, "j1", "review the diff");
    let r = result_of(&t, "j1");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "answer to: review the diff");
    assert_eq!(r.cost_usd, Some(0.0042));
    assert_eq!(r.num_turns, Some(2));
    let log = run_conductor(&t, &["logs", "j1"], 0).stdout;
    assert!(log.starts_with("✓ done · 2 turns · $0.0042"), "{log}");
}

/// Any agent's stderr is followed in the live log, marked; a plain agent's stdout stays
/// as it printed it.
#[test]
fn a_plain_agents_stderr_is_marked_in_its_log() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(
        &t,
        S0,
        "sh -c 'cat >/dev/null; echo out one; echo err one >&2; printf no-newline; echo err two >&2; echo; echo out two'",
        &[],
        &[],
    );
    send(&t, "p1", "go");
    let r = result_of(&t, "p1");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "out one\nno-newline\nout two\n");
    let log = run_conductor(&t, &["logs", "p1"], 0).stdout;
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "no-newline",
            "out one",
            "out two",
            "stderr│ err one",
            "stderr│ err two"
        ],
        "{log}"
    );
    // `logs N` after the end shows the slot's last task (even before the worker has
    // quite let go of it).
    assert_eq!(run_conductor(&t, &["logs", "0"], 0).stdout, log);
}
