//! When `conductor mcp` answers a task handle (the SEP-2663 Tasks extension) and when a plain answer: only on a session whose `initialize` declared the extension, and never for a task that has already finished (the MCP Inspector 2.12 in its default mode takes no handle).

use conductor::Slot;
use serde_json::{json, Value};

use crate::harness::{agent, assert_nothing_left, TestRoot, WorkerProc};
use crate::mcp_push::Raw;

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

/// A `tools/call` whose `_meta` carries per-request client capabilities declaring the
/// extension (SEP-2575's envelope), as a client of the later protocol sends it.
fn call_with_meta(raw: &mut Raw, id: Value, tool: &str, args: Value) -> Value {
    raw.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": tool, "arguments": args,
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXT: {}}}},
    }}));
    raw.answer(&id)["result"].clone()
}

#[track_caller]
fn plain(r: &Value) -> &Value {
    assert_ne!(r["resultType"], "task", "a plain answer, not a handle: {r}");
    assert_eq!(r["isError"], false, "{r}");
    &r["structuredContent"]
}

#[test]
fn a_session_that_did_not_declare_the_extension_at_initialize_gets_plain_answers() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let mut raw = Raw::start(&t);
    // No codex worker: the task stays queued (unfinished).
    let r = raw.call(
        json!(1),
        "submit",
        json!({"prompt": "p", "id": "q1", "agent": "codex"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let r = call_with_meta(
        &mut raw,
        json!(2),
        "wait",
        json!({"ids": ["q1"], "timeoutSecs": 0}),
    );
    let v = plain(&r);
    assert_eq!(v["allFinished"], false, "{r}");
    assert_eq!(v["tasks"][0]["state"], "queued", "{r}");
    let r = call_with_meta(
        &mut raw,
        json!(3),
        "submit",
        json!({"prompt": "p", "id": "q2", "agent": "codex", "wait": true, "waitSecs": 0}),
    );
    let v = plain(&r);
    assert_eq!(v["id"], "q2", "{r}");
    assert_eq!(v["wait"]["allFinished"], false, "{r}");
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn a_finished_task_gets_the_plain_answer_even_on_a_session_of_the_extension() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let w = WorkerProc::start(
        &t,
        Slot(0),
        &agent("record.sh").display().to_string(),
        &[],
        &[],
    );
    let mut raw = Raw::start_with(&t, json!({"extensions": {TASKS_EXT: {}}}));
    let r = raw.call(
        json!(1),
        "submit",
        json!({"prompt": "done soon", "id": "f1"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    // Waited for in the plain form (several ids: never a handle) until it has finished.
    let r = raw.call(
        json!(2),
        "wait",
        json!({"ids": ["f1", "f1"], "timeoutSecs": 50}),
    );
    assert_eq!(r["structuredContent"]["allFinished"], true, "{r}");
    let r = raw.call(json!(3), "wait", json!({"ids": ["f1"]}));
    let v = plain(&r);
    assert_eq!(v["allFinished"], true, "{r}");
    assert_eq!(v["tasks"][0]["result"]["output"], "done soon", "{r}");
    // An unfinished one still gets its handle on this session.
    let r = raw.call(
        json!(4),
        "submit",
        json!({"prompt": "p", "id": "f2", "agent": "codex", "wait": true}),
    );
    assert_eq!(r["resultType"], "task", "{r}");
    assert_eq!(r["taskId"], "f2", "{r}");
    raw.call(json!(5), "cancel", json!({"id": "f2"}));
    drop(raw);
    drop(w);
    assert_nothing_left(t.path());
}
