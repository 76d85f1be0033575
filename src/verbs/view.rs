//! How a task's whereabouts look as JSON, the same in every verb's answer that says where a task is (the MCP tools, `logs --json`).

use serde_json::{json, Value};

use crate::tasks::{TaskLocation, TaskState};

/// Where a task is, as JSON (`note`: why it is not moving, when known).
pub fn location_view(loc: &TaskLocation, note: Option<String>) -> Value {
    let mut v = json!({
        "id": loc.id,
        "state": loc.state,
        "finished": loc.state.is_finished(),
        "queued": loc.queued,
        "slot": loc.slot.map(|s| s.0),
    });
    if let Some(n) = note {
        v["note"] = json!(n);
    }
    asking(loc, &mut v);
    v
}

/// A running task whose agent waits for a person's answer: its state says so
/// (`needs approval`, as `tasks` has it) and `approval` is the question.
fn asking(loc: &TaskLocation, v: &mut Value) {
    let (TaskState::Running, Some(file)) = (loc.state, &loc.file) else {
        return;
    };
    let Some(q) = file
        .parent()
        .and_then(|dir| crate::protocol::approval::question_of(dir, &loc.id))
    else {
        return;
    };
    v["state"] = json!(TaskState::NeedsApproval);
    v["note"] = json!(format!(
        "its agent asks to use {}: answer with the `approve` or `deny` tool",
        q.summary()
    ));
    v["approval"] = json!(q);
}
