//! conductor tasks as the MCP Tasks extension's tasks ("call now, fetch the result later"; SEP-2663, `io.modelcontextprotocol/tasks`, as rmcp 3.11 implements it).
//!
//! A client that declared the extension (see [`negotiated`]) and calls `submit` with
//! `wait: true`, or `wait` for one id of a task that has not finished, gets a task handle
//! at once instead of an answer after up to 50 s (a finished task's answer is plain): the
//! MCP task *is* the conductor task, its `taskId` the conductor id. `tasks/get` answers
//! from the root's files (so it also works after a restart of the server, and for any
//! conductor task id): `working` while the task waits or runs (the message says where),
//! `completed` once it has finished, with the tool's answer as `wait` or `submit` would
//! have given it (a failed conductor task is a completed call whose answer says so),
//! `cancelled` when it was cancelled. `tasks/cancel` cancels the conductor task.
//! While a handle's task runs the server sends `notifications/tasks` at each change,
//! following it on the shared [`Hub`](crate::wait::Hub) as a resource subscription does.

use std::time::SystemTime;

use rmcp::model::{
    CallToolResult, DetailedTask, JsonObject, ServerNotification, Task as McpTask, TaskPayload,
    TaskStatusNotification, TaskStatusNotificationParams,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::{json, Value};

use super::reply;
use crate::protocol::rfc3339;
use crate::tasks::{TaskLocation, TaskState};
use crate::{Client, TaskId, TaskResult};

/// Whether this request's client negotiated the extension, so that a handle may answer
/// it. A session opened with `initialize` negotiated it there or not at all: capabilities
/// a request of such a session carries in its `_meta` (as a client of a later protocol
/// adds to every call, the MCP Inspector 2.12 among them) do not make a session that
/// never declared the extension take handles it cannot read. A session without
/// `initialize` (the inline lifecycle) declares it per request.
pub fn negotiated(context: &RequestContext<RoleServer>) -> bool {
    let per_request = context.meta.client_capabilities();
    match context.peer.peer_info() {
        // rmcp refuses a handle to a request whose own capabilities lack the extension.
        Some(info) => {
            info.capabilities.supports_tasks() && per_request.is_none_or(|c| c.supports_tasks())
        }
        None => per_request.is_some_and(|c| c.supports_tasks()),
    }
}

/// How often a client is asked to poll `tasks/get`, in milliseconds (it is also told of
/// each change when it listens to `notifications/tasks`).
pub const POLL_INTERVAL_MS: u64 = 2_000;

/// Which tool made a handle: its finished task's result takes that tool's answer's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Origin {
    Submit,
    Wait,
}

/// What the server remembers of a handle it gave.
#[derive(Debug, Clone)]
pub struct Handle {
    pub origin: Origin,
    /// The id as the client gave it (a number stays a number), if it gave one.
    pub given: Option<Value>,
    pub created_at: String,
    /// How much of the output the answer carries, in characters.
    pub output_chars: usize,
}

impl Handle {
    pub fn new(origin: Origin, given: Option<Value>, output_chars: usize) -> Handle {
        Handle {
            origin,
            given,
            created_at: crate::protocol::now_rfc3339(),
            output_chars,
        }
    }
}

/// Task `id` as an MCP task; `None` when the root has no such task. `handle` is what the
/// server remembers of it (nothing for a task it gave no handle for: a `wait`'s answer).
pub fn detailed(
    client: &Client,
    id: &TaskId,
    handle: Option<&Handle>,
) -> crate::Result<Option<DetailedTask>> {
    let Some(loc) = client.find_task(id)? else {
        return Ok(None);
    };
    let changed = changed_at(&loc);
    let created = handle.map_or_else(|| changed.clone(), |h| h.created_at.clone());
    let base = |message: String| {
        McpTask::new(
            id.to_string(),
            rmcp::model::TaskStatus::Working,
            created.clone(),
            changed.clone(),
        )
        .with_status_message(message)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
    };
    if !loc.state.is_finished() {
        let message = where_message(loc.state, loc.slot);
        return Ok(Some(DetailedTask::new(base(message), TaskPayload::Working)));
    }
    let result = client.result_of(id)?;
    Ok(Some(match (loc.state, result) {
        (TaskState::Cancelled, r) => DetailedTask::new(
            base(
                r.and_then(|r| r.error)
                    .unwrap_or_else(|| "cancelled".into()),
            ),
            TaskPayload::Cancelled,
        ),
        (state, Some(r)) => DetailedTask::new(
            base(state.to_string()),
            TaskPayload::Completed {
                result: call_result(id, &r, handle),
            },
        ),
        // Finished, but its result is gone (gc removed it): nothing to hand back.
        (state, None) => DetailedTask::new(
            base(state.to_string()),
            TaskPayload::Failed {
                error: json!({
                    "code": -32603,
                    "message": format!("task {id} is {state}: its result is no longer on the root"),
                })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            },
        ),
    }))
}

/// The tool call's result for finished task `id` (result `r`): what `wait` or `submit`
/// with wait (as the handle says) would have answered once it had finished.
pub fn call_result(id: &TaskId, r: &TaskResult, handle: Option<&Handle>) -> JsonObject {
    let chars = handle.map_or(reply::DEFAULT_OUTPUT_CHARS, |h| h.output_chars);
    let mut view = reply::finished(id, r, chars);
    if let Some(g) = handle.and_then(|h| h.given.clone()) {
        view["id"] = g;
    }
    let answer = answer(handle.map_or(Origin::Wait, |h| h.origin), view);
    serde_json::to_value(CallToolResult::structured(answer))
        .ok()
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default()
}

/// A finished task's `view` as the answer of the tool that made the handle.
fn answer(origin: Origin, view: Value) -> Value {
    let waited = json!({ "allFinished": true, "tasks": [view] });
    match origin {
        Origin::Wait => waited,
        Origin::Submit => json!({
            "id": view["id"],
            "state": view["state"],
            "wait": waited,
        }),
    }
}

/// When the task last changed, as well as the files tell: its file's modification time.
fn changed_at(loc: &TaskLocation) -> String {
    let t = loc
        .file
        .as_ref()
        .and_then(|f| std::fs::metadata(f).ok())
        .and_then(|m| m.modified().ok())
        .unwrap_or_else(SystemTime::now);
    rfc3339(t)
}

/// Send `task` to the client as `notifications/tasks`; false when it has gone.
pub async fn tell(peer: &Peer<RoleServer>, task: DetailedTask) -> bool {
    let note = TaskStatusNotification::new(TaskStatusNotificationParams::new(task));
    peer.send_notification(ServerNotification::TaskStatusNotification(note))
        .await
        .is_ok()
}

/// What an unfinished task's status message says: where it runs or waits.
pub(super) fn where_message(state: TaskState, slot: Option<impl std::fmt::Display>) -> String {
    match (state, slot) {
        (TaskState::Running, Some(s)) => format!("working on worker slot {s}"),
        (TaskState::Waiting, Some(s)) => format!("waiting in worker slot {s}'s inbox"),
        (state, _) => state.to_string(),
    }
}
