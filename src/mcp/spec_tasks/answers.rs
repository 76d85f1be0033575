//! The answers of the spec's `tasks/*` requests (`tasks/get`, `tasks/result`, `tasks/cancel`, `tasks/list`), from the root's files.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{DetailedTask, TaskPayload};
use serde_json::{json, Value};

use super::super::handles::{self, Handle};
use super::super::{reply, resources};
use super::{
    internal, refusal, spec_task, status_of, task_id_param, Refusal, SpecTasks, CANCEL_BOUND,
    INTERNAL, INVALID_PARAMS, NO_METHOD, RELATED_TASK, RELOOK,
};
use crate::tasks::{Cursor, ListOptions, TaskSummary};
use crate::TaskId;

/// A listed task as the spec's `Task`.
fn listed(s: &TaskSummary, handle: Option<&Handle>) -> Value {
    let message = handles::where_message(s.state, s.slot);
    let updated = s
        .finished_at
        .as_ref()
        .or(s.started_at.as_ref())
        .unwrap_or(&s.submitted_at);
    let created = handle.map_or(&s.submitted_at, |h| &h.created_at);
    json!({
        "taskId": s.id.to_string(),
        "status": status_of(s.state),
        "statusMessage": message,
        "createdAt": created,
        "lastUpdatedAt": updated.max(created),
        "ttl": null,
        "pollInterval": handles::POLL_INTERVAL_MS,
    })
}

impl SpecTasks {
    /// The answer to a `tasks/*` request.
    pub(super) async fn answer(
        self: &Arc<Self>,
        method: &str,
        request: &Value,
    ) -> Result<Value, Refusal> {
        match method {
            "tasks/list" => self.list(request).await,
            "tasks/get" => {
                let id = task_id_param(request)?;
                Ok(spec_task(&self.detailed(&id).await?))
            }
            "tasks/result" => {
                let id = task_id_param(request)?;
                self.result(&id).await
            }
            "tasks/cancel" => {
                let id = task_id_param(request)?;
                self.cancel(&id).await
            }
            other => Err((NO_METHOD, format!("no method {other}"))),
        }
    }

    /// Task `id` as the extension's `tasks/get` sees it; unknown: -32602.
    async fn detailed(&self, id: &TaskId) -> Result<DetailedTask, Refusal> {
        let (client, id2, handle) = (self.client.clone(), id.clone(), self.handle(id));
        tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            handles::detailed(&client, &id2, handle.as_ref())
        })
        .await
        .map_err(internal)?
        .map_err(refusal)?
        .ok_or_else(|| {
            (
                INVALID_PARAMS,
                format!("Task not found: no task {id} on this root"),
            )
        })
    }

    /// Wait on the shared watcher until task `id` has finished (or `bound` has passed).
    async fn until_finished(
        &self,
        id: &TaskId,
        bound: Option<Duration>,
    ) -> Result<DetailedTask, Refusal> {
        let deadline = bound.map(|b| tokio::time::Instant::now() + b);
        loop {
            let d = self.detailed(id).await?;
            if d.status().is_terminal() {
                return Ok(d);
            }
            let named = resources::Named {
                id: id.clone(),
                log: false,
            };
            let finished =
                resources::watch(self.client.clone(), self.hub.clone(), named, || async {
                    true
                })
                .await
                .map_err(refusal)?;
            let waited = async {
                finished.await;
                // The watch ends early only when its look failed: look again a moment later.
                if !self
                    .detailed(id)
                    .await
                    .is_ok_and(|d| d.status().is_terminal())
                {
                    tokio::time::sleep(RELOOK).await;
                }
            };
            match deadline {
                Some(at) => {
                    if tokio::time::timeout_at(at, waited).await.is_err() {
                        return self.detailed(id).await;
                    }
                }
                None => waited.await,
            }
        }
    }

    /// `tasks/result`: once the task has finished, what the tool call would have
    /// returned, tied to the task.
    async fn result(&self, id: &TaskId) -> Result<Value, Refusal> {
        let d = self.until_finished(id, None).await?;
        let mut result = match d.payload {
            TaskPayload::Completed { result } => result,
            TaskPayload::Failed { error } => {
                let code = error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(INTERNAL);
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("failed");
                return Err((code, message.to_string()));
            }
            // Cancelled: the call's answer says so, as a `wait` would.
            _ => {
                let (client, id2, handle) = (self.client.clone(), id.clone(), self.handle(id));
                let r = tokio::task::spawn_blocking(move || client.result_of(&id2))
                    .await
                    .map_err(internal)?
                    .map_err(refusal)?
                    .ok_or_else(|| {
                        internal(format!(
                            "task {id} was cancelled and its result is no longer on the root"
                        ))
                    })?;
                handles::call_result(id, &r, handle.as_ref())
            }
        };
        result.insert(
            "_meta".into(),
            json!({ RELATED_TASK: { "taskId": id.to_string() } }),
        );
        Ok(Value::Object(result))
    }

    /// `tasks/cancel`: the conductor task cancelled as the `cancel` tool does; the
    /// answer once it has ended (a running task's worker stops it first).
    async fn cancel(&self, id: &TaskId) -> Result<Value, Refusal> {
        let d = self.detailed(id).await?;
        if d.status().is_terminal() {
            return Err((
                INVALID_PARAMS,
                format!(
                    "Cannot cancel task: already in terminal status '{}'",
                    spec_task(&d)["status"].as_str().unwrap_or("")
                ),
            ));
        }
        let (client, id2) = (self.client.clone(), id.clone());
        let done = tokio::task::spawn_blocking(move || reply::cancel(&client, &id2))
            .await
            .map_err(internal)?
            .map_err(refusal)?;
        if let Err(msg) = done {
            // Finished meanwhile, or nobody can stop it: say so.
            let d = self.detailed(id).await?;
            let code = if d.status().is_terminal() {
                INVALID_PARAMS
            } else {
                INTERNAL
            };
            return Err((code, format!("Cannot cancel task: {msg}")));
        }
        Ok(spec_task(
            &self.until_finished(id, Some(CANCEL_BOUND)).await?,
        ))
    }

    /// `tasks/list`: every task on the root, newest first, a page at a time.
    async fn list(&self, request: &Value) -> Result<Value, Refusal> {
        let after = match &request["params"]["cursor"] {
            Value::Null => None,
            Value::String(c) => Some(Cursor::decode(c).ok_or_else(|| {
                (
                    INVALID_PARAMS,
                    format!("Invalid cursor {c:?}: not one this server gave (pass a nextCursor unchanged)"),
                )
            })?),
            other => return Err((INVALID_PARAMS, format!("params.cursor must be a string, not {other}"))),
        };
        let limit = crate::tasks::list::DEFAULT_LIMIT;
        let client = self.client.clone();
        let page = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            client.list_tasks(&ListOptions {
                limit: Some(limit),
                after,
                ..ListOptions::default()
            })
        })
        .await
        .map_err(internal)?
        .map_err(refusal)?;
        let tasks: Vec<Value> = {
            let st = self.state();
            page.iter()
                .map(|s| listed(s, st.handles.get(&s.id.to_string())))
                .collect()
        };
        let mut v = json!({ "tasks": tasks });
        if page.len() >= limit {
            if let Some(last) = page.last() {
                v["nextCursor"] = json!(Cursor::after(last).encode());
            }
        }
        Ok(v)
    }
}
