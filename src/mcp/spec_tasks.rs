//! The MCP spec's own Tasks utility (protocol 2025-11-25: `tools/call` with `params.task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`), served by translating on the server's stdio beside rmcp.
//!
//! rmcp implements the later Tasks *extension* (SEP-2663, see [`handles`]); the
//! 2025-11-25 form it cannot see (its `tools/call` parameters drop `task`, and it has no
//! `tasks/result` nor `tasks/list`). Every client line passes [`SpecTasks::inbound`]
//! before rmcp and every rmcp line [`SpecTasks::outbound`] before stdout, so the form
//! is served here as a thin layer; the tools' own code does the work:
//!
//! - The form is on for a session whose client declared `capabilities.tasks` in its
//!   `initialize` (and not the SEP-2663 extension, which rmcp serves): the answer to
//!   its `initialize` gets `capabilities.tasks` (`list`, `cancel`,
//!   `requests.tools.call`), `tools/list` marks `submit` and `wait` with
//!   `execution.taskSupport: "optional"`. For any other client nothing changes: it was
//!   declared no task support, so a `params.task` it sends is ignored and the call runs
//!   as usual (as the spec has a receiver without the capability do).
//! - A `tools/call` of `submit` or `wait` (one id) with `params.task` goes to rmcp
//!   without `task` — `submit` without `wait`, `wait` with `timeoutSecs: 0` — and
//!   rmcp's answer becomes a `CreateTaskResult` whose `taskId` is the conductor task's
//!   id: the conductor task *is* the MCP task. A call refused before there is a task is
//!   a JSON-RPC error (-32602) carrying the tool's message; another tool called as a
//!   task is -32601, as the spec says.
//! - `tasks/get`, `tasks/list` and `tasks/cancel` answer from the root's files (any
//!   conductor task, also after a restart of the server); `tasks/result` waits on the
//!   server's shared watcher until the task has finished, then returns what the tool
//!   call would have returned, with the related-task `_meta`. `tasks/cancel` cancels
//!   the conductor task as the `cancel` tool does and answers once it has ended.
//! - While a task made here runs, `notifications/tasks/status` tells each change.
//!
//! A finished conductor task is `completed` (a failed one too: the call succeeded and
//! its answer says the task failed), a cancelled one `cancelled`, one whose result is
//! gone `failed`. `ttl` is `null`: a task stays on the root until `conductor gc`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{DetailedTask, TASKS_EXTENSION_ID};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

use super::handles::{self, Handle, Origin};
use super::{reply, resources};
use crate::tasks::TaskState;
use crate::wait::Hub;
use crate::{Client, Error, TaskId};

// The answers of `tasks/*`, in a child module (they use this layer's state).
mod answers;

/// The `_meta` key that ties a message to its task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The `_meta` key of a `CreateTaskResult` whose text a host may give its model at once.
const IMMEDIATE: &str = "io.modelcontextprotocol/model-immediate-response";

/// The tools that may be called as tasks.
const TASK_TOOLS: [&str; 2] = ["submit", "wait"];

/// How long `tasks/cancel` waits for a running task's worker to stop it.
const CANCEL_BOUND: Duration = Duration::from_secs(30);

/// A look again this often if a finished wait found the task still unfinished.
const RELOOK: Duration = Duration::from_secs(1);

/// A request whose answer rmcp gives and this layer completes.
enum Pending {
    Initialize,
    ToolsList,
    Call {
        origin: Origin,
        chars: usize,
        /// The call's `progressToken`: valid for the task's lifetime.
        progress: Option<Value>,
    },
}

#[derive(Default)]
struct State {
    /// `initialize` has been seen.
    initialized: bool,
    /// This session speaks the 2025-11-25 form.
    on: bool,
    /// By request id (its JSON text).
    pending: HashMap<String, Pending>,
    /// `tasks/result` and `tasks/cancel` requests in progress, by request id: told
    /// when the client cancels them.
    waiting: HashMap<String, Arc<Notify>>,
    /// The tasks made here, by task id.
    handles: HashMap<String, Handle>,
}

/// The translation layer of one session.
pub struct SpecTasks {
    client: Client,
    hub: Hub,
    /// Lines for the client (the single writer writes them whole).
    out: UnboundedSender<String>,
    state: Mutex<State>,
}

/// What to do with one of the client's lines.
pub enum Inbound {
    /// Hand it to rmcp as it is.
    Pass,
    /// Hand rmcp this instead.
    Rewritten(Vec<u8>),
    /// Answered here (or to be): rmcp does not see it.
    Taken,
}

/// What to do with one of rmcp's lines.
pub enum Outbound {
    Pass,
    Rewritten(Vec<u8>),
    /// Its answer will be written by this layer.
    Taken,
}

/// The parts of a message looked at before deciding to read it whole.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<ParamsHead>,
}

#[derive(Deserialize)]
struct ParamsHead {
    #[serde(default)]
    task: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
}

/// A JSON-RPC error: its code and message.
type Refusal = (i64, String);

const INVALID_PARAMS: i64 = -32602;
const INTERNAL: i64 = -32603;
const NO_METHOD: i64 = -32601;

fn key(id: &Value) -> String {
    id.to_string()
}

fn result_line(id: &Value, result: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string()
}

fn error_line(id: &Value, (code, message): Refusal) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

fn internal(e: impl std::fmt::Display) -> Refusal {
    (INTERNAL, e.to_string())
}

/// A library error as a JSON-RPC error: an unknown task is the caller's.
fn refusal(e: Error) -> Refusal {
    match e {
        Error::NoSuchTask { .. } => (INVALID_PARAMS, format!("Task not found: {e}")),
        e => internal(e),
    }
}

/// What the server declares when the form is on.
pub fn capability() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

/// A conductor task as the spec's `Task`, from what `tasks/get` of the extension sees.
fn spec_task(d: &DetailedTask) -> Value {
    let t = &d.task;
    // A change before the MCP task was made (the task's file written just before its
    // answer) counts as at its making. (Both are RFC 3339 UTC of one format: their
    // text orders as their times.)
    let updated = t.last_updated_at.as_str().max(t.created_at.as_str());
    let mut v = json!({
        "taskId": t.task_id,
        "status": t.status,
        "createdAt": t.created_at,
        "lastUpdatedAt": updated,
        "ttl": null,
        "pollInterval": t.poll_interval_ms,
    });
    if let Some(m) = &t.status_message {
        v["statusMessage"] = json!(m);
    }
    v
}

/// The spec's status of a conductor task in `state` (as [`handles::detailed`] has it).
fn status_of(state: TaskState) -> &'static str {
    match state {
        TaskState::Cancelled => "cancelled",
        TaskState::Gone | TaskState::Damaged => "failed",
        s if s.is_finished() => "completed",
        _ => "working",
    }
}

fn task_id_param(request: &Value) -> Result<TaskId, Refusal> {
    let given = &request["params"]["taskId"];
    let text = match given {
        Value::String(s) => s.clone(),
        Value::Null => return Err((INVALID_PARAMS, "params.taskId is missing".into())),
        other => {
            return Err((
                INVALID_PARAMS,
                format!("params.taskId must be a string, not {other}"),
            ))
        }
    };
    TaskId::parse(&text).map_err(|reason| {
        (
            INVALID_PARAMS,
            format!("Task not found: taskId {text:?}: {reason}"),
        )
    })
}

impl SpecTasks {
    pub fn new(client: Client, hub: Hub, out: UnboundedSender<String>) -> Arc<SpecTasks> {
        Arc::new(SpecTasks {
            client,
            hub,
            out,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, line: String) -> bool {
        self.out.send(line).is_ok()
    }

    fn handle(&self, id: &TaskId) -> Option<Handle> {
        self.state().handles.get(&id.to_string()).cloned()
    }

    /// Judge a client's line (JSON, its newline included).
    pub fn inbound(self: &Arc<Self>, line: &[u8]) -> Inbound {
        let (initialized, on) = {
            let st = self.state();
            (st.initialized, st.on)
        };
        if initialized && !on {
            return Inbound::Pass;
        }
        let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        let Ok(head) = serde_json::from_slice::<Head>(body) else {
            return Inbound::Pass;
        };
        let Some(method) = head.method.as_deref() else {
            return Inbound::Pass;
        };
        match (method, head.id) {
            ("initialize", id) => {
                self.initialize(id, body);
                Inbound::Pass
            }
            _ if !on => Inbound::Pass,
            ("tools/list", Some(id)) => {
                self.state().pending.insert(key(&id), Pending::ToolsList);
                Inbound::Pass
            }
            ("tools/call", Some(id)) if head.params.as_ref().is_some_and(|p| p.task.is_some()) => {
                self.task_call(id, body)
            }
            ("tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel", Some(id)) => {
                let request: Value = serde_json::from_slice(body).unwrap_or_default();
                let method = method.to_string();
                let cancelled = Arc::new(Notify::new());
                if matches!(method.as_str(), "tasks/result" | "tasks/cancel") {
                    self.state().waiting.insert(key(&id), cancelled.clone());
                }
                let me = self.clone();
                tokio::spawn(async move {
                    let answered = tokio::select! {
                        a = me.answer(&method, &request) => Some(a),
                        _ = cancelled.notified() => None,
                    };
                    me.state().waiting.remove(&key(&id));
                    if let Some(a) = answered {
                        me.send(match a {
                            Ok(result) => result_line(&id, result),
                            Err(refusal) => error_line(&id, refusal),
                        });
                    }
                });
                Inbound::Taken
            }
            ("notifications/cancelled", _) => {
                let rid = head.params.and_then(|p| p.request_id);
                if let Some(rid) = rid {
                    if let Some(n) = self.state().waiting.remove(&key(&rid)) {
                        n.notify_one();
                    }
                }
                Inbound::Pass
            }
            _ => Inbound::Pass,
        }
    }

    /// Note whether the client declared the form; its answer gets the capability.
    fn initialize(&self, id: Option<Value>, body: &[u8]) {
        let request: Value = serde_json::from_slice(body).unwrap_or_default();
        let caps = &request["params"]["capabilities"];
        let on = caps["tasks"].is_object() && caps["extensions"].get(TASKS_EXTENSION_ID).is_none();
        let mut st = self.state();
        st.initialized = true;
        st.on = on;
        if let (true, Some(id)) = (on, id) {
            st.pending.insert(key(&id), Pending::Initialize);
        }
    }

    /// A `tools/call` with `params.task`: to rmcp as the plain call that makes (or
    /// finds) the task, or refused.
    fn task_call(&self, id: Value, body: &[u8]) -> Inbound {
        let Ok(mut request) = serde_json::from_slice::<Value>(body) else {
            return Inbound::Pass;
        };
        let name = request["params"]["name"].as_str().unwrap_or("").to_string();
        let progress = Some(request["params"]["_meta"]["progressToken"].clone())
            .filter(|t| t.is_string() || t.is_number());
        if let Some(p) = request["params"].as_object_mut() {
            p.remove("task");
        }
        // The task's progress is told here, from one counter: not by the plain call.
        let meta = request
            .get_mut("params")
            .and_then(|p| p.get_mut("_meta"))
            .and_then(Value::as_object_mut);
        if let Some(m) = meta {
            m.remove("progressToken");
        }
        let args = &mut request["params"]["arguments"];
        let chars = args["maxOutputChars"]
            .as_u64()
            .map_or(reply::DEFAULT_OUTPUT_CHARS, |n| n as usize);
        let refuse = |refusal: Refusal| {
            self.send(error_line(&id, refusal));
            Inbound::Taken
        };
        let origin = match name.as_str() {
            "submit" => {
                // The task is the wait: submit only.
                if let Some(a) = args.as_object_mut() {
                    a.remove("wait");
                    a.remove("waitSecs");
                }
                Origin::Submit
            }
            "wait" => {
                if let Some(ids) = args["ids"].as_array().filter(|a| a.len() != 1) {
                    return refuse((
                        INVALID_PARAMS,
                        format!(
                            "wait: called as a task it names one conductor task (the MCP task is that task); `ids` has {}",
                            ids.len()
                        ),
                    ));
                }
                // Where the task is now, at once: the task is the wait.
                if let Some(a) = args.as_object_mut() {
                    a.insert("timeoutSecs".into(), json!(0));
                }
                Origin::Wait
            }
            other => {
                return refuse((
                    NO_METHOD,
                    format!(
                        "tool {other:?} cannot be called as a task (its execution.taskSupport is \"forbidden\"); only {} can: call it without `task`",
                        TASK_TOOLS.join(" and ")
                    ),
                ))
            }
        };
        self.state().pending.insert(
            key(&id),
            Pending::Call {
                origin,
                chars,
                progress,
            },
        );
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        Inbound::Rewritten(line)
    }

    /// Judge one of rmcp's lines (its newline included).
    pub fn outbound(self: &Arc<Self>, line: &[u8]) -> Outbound {
        if self.state().pending.is_empty() {
            return Outbound::Pass;
        }
        let Ok(head) = serde_json::from_slice::<Head>(line) else {
            return Outbound::Pass;
        };
        let (None, Some(id)) = (head.method, head.id) else {
            return Outbound::Pass;
        };
        let Some(pending) = self.state().pending.remove(&key(&id)) else {
            return Outbound::Pass;
        };
        let Ok(mut answer) = serde_json::from_slice::<Value>(line) else {
            return Outbound::Pass;
        };
        if answer.get("result").is_none() {
            return Outbound::Pass; // a JSON-RPC error goes as it is
        }
        match pending {
            Pending::Initialize => {
                answer["result"]["capabilities"]["tasks"] = capability();
            }
            Pending::ToolsList => {
                if let Some(tools) = answer["result"]["tools"].as_array_mut() {
                    for t in tools {
                        if TASK_TOOLS.contains(&t["name"].as_str().unwrap_or("")) {
                            t["execution"] = json!({ "taskSupport": "optional" });
                        }
                    }
                }
            }
            Pending::Call {
                origin,
                chars,
                progress,
            } => {
                let me = self.clone();
                tokio::spawn(async move {
                    let result = answer["result"].take();
                    let made = me.created(origin, chars, result).await;
                    let task = match made {
                        Ok((task, handle)) => {
                            me.send(result_line(&id, task.clone()));
                            Some((task, handle))
                        }
                        Err(refusal) => {
                            me.send(error_line(&id, refusal));
                            None
                        }
                    };
                    if let Some((task, handle)) = task {
                        me.follow(task["task"].clone(), handle, progress).await;
                    }
                });
                return Outbound::Taken;
            }
        }
        let mut line = answer.to_string().into_bytes();
        line.push(b'\n');
        Outbound::Rewritten(line)
    }

    /// The `CreateTaskResult` for the tool's answer `result` (and the handle kept for
    /// its task), or why there is no task.
    async fn created(
        &self,
        origin: Origin,
        chars: usize,
        result: Value,
    ) -> Result<(Value, Handle), Refusal> {
        let structured = &result["structuredContent"];
        if result["isError"] == json!(true) || structured.is_null() {
            let text: Vec<&str> = result["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["text"].as_str())
                .collect();
            return Err((INVALID_PARAMS, text.join("\n")));
        }
        let given = match origin {
            Origin::Submit => structured["id"].clone(),
            Origin::Wait => structured["tasks"][0]["id"].clone(),
        };
        let text = match &given {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(internal(format!("the tool answered no task id ({other})"))),
        };
        let id = TaskId::parse(&text).map_err(internal)?;
        let handle = Handle::new(origin, Some(given), chars);
        let (client, id2, h2) = (self.client.clone(), id.clone(), handle.clone());
        let found =
            tokio::task::spawn_blocking(move || handles::detailed(&client, &id2, Some(&h2)))
                .await
                .map_err(internal)?
                .map_err(refusal)?
                .ok_or_else(|| (INVALID_PARAMS, format!("Task not found: {id}")))?;
        self.state().handles.insert(id.to_string(), handle.clone());
        let task = spec_task(&found);
        let mut told = format!("conductor task {id}");
        if let Some(m) = task["statusMessage"].as_str() {
            told.push_str(&format!(" is {m}"));
        }
        if let Some(w) = structured["warning"].as_str() {
            told.push_str(&format!(" ({w})"));
        }
        told.push_str("; its result comes with tasks/result");
        Ok((
            json!({ "task": task, "_meta": { IMMEDIATE: told } }),
            handle,
        ))
    }

    /// Tell the client of each change of `task` as `notifications/tasks/status` (and as
    /// `notifications/progress` when the call carried a `progressToken`), until it has
    /// finished (or the client has gone).
    async fn follow(self: &Arc<Self>, task: Value, handle: Handle, progress: Option<Value>) {
        let Some(id) = task["taskId"].as_str().and_then(|s| TaskId::parse(s).ok()) else {
            return;
        };
        // What was told last, and how many progress notifications.
        let last = Arc::new(Mutex::new((
            (task["status"].clone(), task["statusMessage"].clone()),
            0u64,
        )));
        let tell = {
            let me = self.clone();
            let id = id.clone();
            move || {
                let (me, id, h, last) = (me.clone(), id.clone(), handle.clone(), last.clone());
                let progress = progress.clone();
                async move {
                    let c = me.client.clone();
                    let now =
                        tokio::task::spawn_blocking(move || handles::detailed(&c, &id, Some(&h)))
                            .await;
                    let Ok(Ok(Some(d))) = now else {
                        return false;
                    };
                    let t = spec_task(&d);
                    let seen = (t["status"].clone(), t["statusMessage"].clone());
                    let count = {
                        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                        if last.0 == seen {
                            return true;
                        }
                        last.0 = seen;
                        last.1 += 1;
                        last.1
                    };
                    if let Some(token) = progress {
                        let message = format!(
                            "task {}: {}",
                            t["taskId"].as_str().unwrap_or(""),
                            t["statusMessage"]
                                .as_str()
                                .or(t["status"].as_str())
                                .unwrap_or("")
                        );
                        me.send(
                            json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": {
                                "progressToken": token, "progress": count, "message": message,
                            }})
                            .to_string(),
                        );
                    }
                    me.send(
                        json!({ "jsonrpc": "2.0", "method": "notifications/tasks/status", "params": t })
                            .to_string(),
                    )
                }
            }
        };
        let named = resources::Named { id, log: false };
        let on_change = tell.clone();
        let follow =
            resources::watch(self.client.clone(), self.hub.clone(), named, on_change).await;
        // A change between the CreateTaskResult and the arming of the watch is told here.
        if tell().await {
            if let Ok(follow) = follow {
                follow.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conductor_states_map_onto_the_specs_statuses() {
        assert_eq!(status_of(TaskState::Queued), "working");
        assert_eq!(status_of(TaskState::Running), "working");
        assert_eq!(status_of(TaskState::Waiting), "working");
        assert_eq!(status_of(TaskState::Done), "completed");
        assert_eq!(status_of(TaskState::Failed), "completed");
        assert_eq!(status_of(TaskState::Cancelled), "cancelled");
        assert_eq!(status_of(TaskState::Gone), "failed");
    }

    #[test]
    fn a_task_id_param_must_be_a_string_naming_a_valid_id() {
        assert!(task_id_param(&json!({"params": {"taskId": "a-1"}})).is_ok());
        for bad in [json!({"params": {}}), json!({"params": {"taskId": 7}})] {
            assert_eq!(task_id_param(&bad).unwrap_err().0, INVALID_PARAMS);
        }
    }
}
