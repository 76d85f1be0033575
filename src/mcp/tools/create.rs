//! The MCP tools that make tasks: `submit`, `send`, `edit` and `retry`, with their arguments.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::json;

use super::super::{checks, reply};
use super::{echo_id, to_call, wait_secs, Conductor, IdArg};
use crate::verbs::edit::EditSpec;
use crate::verbs::spec::{QueueSpec, TaskSpec};
use crate::verbs::{send, submit};
use crate::{Error, Slot, TaskId};

// The schema is closed (unknown arguments refused: `schema::check` runs before serde);
// serde's own `deny_unknown_fields` cannot see through a flattened struct that flattens
// another (`TaskSpec`'s `TaskOptions`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct SubmitArgs {
    /// What the task asks for, as `send` (and `conductor submit`) takes it too.
    #[serde(flatten)]
    pub task: TaskSpec,
    /// What the shared queue takes: key, priority, after, group, attempts.
    #[serde(flatten)]
    pub queue: QueueSpec,
    /// A finished task whose output this task continues from: it is added after the
    /// prompt, as `conductor run --chain` passes one step's output to the next. A task
    /// that has not finished yet is refused (wait for it first).
    pub continue_from: Option<IdArg>,
    /// Wait for the task to finish before answering, as `wait` does (with progress
    /// notifications when a progressToken is sent); the answer then carries `wait`.
    pub wait: Option<bool>,
    /// With wait: how long to wait at most, in seconds (default 30, at most 50); the
    /// task runs on after it.
    #[schemars(range(min = 0.0))]
    pub wait_secs: Option<f64>,
    /// With wait: how much of the output to return, in characters, from its end
    /// (default 20000).
    pub max_output_chars: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct SendArgs {
    /// The worker slot number to deliver to (see `status` for the slots).
    pub slot: u32,
    /// What the task asks for, as `submit` takes it too.
    #[serde(flatten)]
    pub task: TaskSpec,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct EditArgs {
    /// The id of a task still waiting in the shared queue.
    pub id: IdArg,
    /// What to change, as `conductor edit` takes it.
    #[serde(flatten)]
    pub edit: EditSpec,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryArgs {
    /// The finished task to run again.
    pub id: IdArg,
    /// Continue the agent's session instead of starting afresh (claude and codex
    /// presets; the session id is taken from the task's result or log).
    pub resume: Option<bool>,
    /// A new prompt in place of the old one (with resume: what to do next, e.g.
    /// "continue, and fix the failing test").
    #[schemars(length(min = 1))]
    pub prompt: Option<String>,
    /// The new task's id (default: ID-r1, -r2 …).
    pub new_id: Option<IdArg>,
    /// Redo an unmerged or conflicting worktree task on top of the current branch: a
    /// new task in a new worktree from HEAD whose prompt carries the original prompt,
    /// the conflict and the old diff (not with resume or prompt).
    pub rebase: Option<bool>,
}

#[tool_router(router = create_router, vis = "pub(super)")]
impl Conductor {
    #[tool(
        description = "Delegate a task to a background coding agent (a subagent \
        worker): put it into the shared queue, where any idle worker runs it. Returns its \
        id at once (it does not wait): use `wait` and `result` for the answer. Submit \
        several independent tasks one after another and they run in parallel, as \
        background tasks. Prefer it over `send` unless one particular worker must run \
        the task.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn submit(
        &self,
        Parameters(args): Parameters<SubmitArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let given = args.task.id.clone();
        let wait = args.wait.unwrap_or(false);
        let timeout = wait_secs(args.wait_secs);
        let chars = args.max_output_chars.unwrap_or(reply::DEFAULT_OUTPUT_CHARS);
        let continue_from = match args.continue_from.as_ref().map(IdArg::id).transpose() {
            Ok(f) => f,
            Err(msg) => return to_call(Err(format!("`continueFrom`: {msg}"))),
        };
        let request = submit::Submit {
            task: args.task,
            queue: args.queue,
            continue_from,
        };
        // Checked before the root is touched: a bad argument is a tool error at once.
        if let Err(e) = submit::task_of(&request) {
            return to_call(Err(refusal(e)));
        }
        let submitted = self
            .reply(move |client| {
                let s = match submit::submit(client, &request) {
                    Ok(s) => s,
                    Err(e) => return Ok(Err(refusal(e))),
                };
                let mut v = json!({ "id": s.id, "state": "queued" });
                if let Some(d) = s.task.depth {
                    v["depth"] = json!(d);
                }
                if let Some(from) = &request.continue_from {
                    v["continuedFrom"] = json!(from);
                }
                if s.unserved {
                    v["warning"] = json!(submit::UNSERVED);
                }
                Ok(Ok(v))
            })
            .await;
        let mut v = match submitted {
            Ok(v) => v,
            Err(msg) => return to_call(Err(msg)),
        };
        if wait {
            let Ok(id) = serde_json::from_value::<TaskId>(v["id"].clone()) else {
                return to_call(Err(format!("internal error: submit answered no id: {v}")));
            };
            let echo: Vec<IdArg> = given.iter().cloned().collect();
            match self.waited(vec![id], &echo, timeout, chars, ctx).await {
                // Cancelled: the task stays submitted; the client no longer wants an answer.
                None => return Err(ErrorData::internal_error("the request was cancelled", None)),
                Some(Err(msg)) => return to_call(Err(msg)),
                Some(Ok(w)) => {
                    if let Some(state) = w["tasks"][0].get("state") {
                        v["state"] = state.clone();
                    }
                    v["wait"] = w;
                }
            }
        }
        if let Some(given) = &given {
            v["id"] = given.echo();
        }
        to_call(Ok(v))
    }

    #[tool(
        description = "Deliver a task to one worker slot's inbox (the slot must exist \
        and its inbox be free). Returns the task id at once. Use `submit` instead unless \
        the task must run on that particular worker.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn send(
        &self,
        Parameters(args): Parameters<SendArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let given = args.task.id.clone();
        let slot = match Slot::checked(args.slot) {
            Ok(s) => s,
            Err(e) => return to_call(Err(e.to_string())),
        };
        let request = send::Send {
            slot,
            task: args.task,
        };
        if let Err(e) = send::task_of(&request) {
            return to_call(Err(refusal(e)));
        }
        self.blocking(move |client| {
            let s = match send::send(client, &request) {
                Ok(s) => s,
                Err(e) => return Ok(Err(refusal(e))),
            };
            let mut v = json!({ "id": s.id, "slot": slot.0, "state": "waiting" });
            if let Some((why, _)) = &s.held {
                v["held"] = json!(why);
            }
            if s.unserved {
                v["warning"] = json!(format!("no live worker serves slot {slot}: the task waits in its inbox until one starts"));
            }
            if let Some(given) = &given {
                v["id"] = given.echo();
            }
            Ok(Ok(v))
        })
        .await
    }

    #[tool(
        description = "Change a task that still waits in the shared queue: its prompt, \
        priority, key, dependencies (after), env or labels; each field given replaces \
        that field. Refused once a worker has taken the task (or it finished or was \
        cancelled), and for a task waiting in one slot's inbox. The edit is applied \
        whole before the task starts, or not at all.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn edit(
        &self,
        Parameters(args): Parameters<EditArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let given = args.id.clone();
        self.blocking(move |client| {
            let task = match crate::verbs::edit::edit(client, &id, args.edit) {
                Ok(t) => t,
                Err(e) => return Ok(Err(refusal(e))),
            };
            let v = json!({ "id": id, "state": "queued", "task": task });
            Ok(echo_id(Ok(v), &given))
        })
        .await
    }

    #[tool(
        description = "Run a finished task again under a new id (ID-r1, -r2 …): back to \
        the shared queue if it came through it, else to the slot it was sent to. With \
        resume, the agent continues its session (claude and codex presets) — give a new \
        prompt saying what to do next; without, it starts afresh with the old prompt or \
        the new one. With rebase, a conflicting or unmerged worktree task is redone on \
        top of the current branch (its prompt, the conflict and the old diff). Returns \
        the new id at once; `wait` for it.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn retry(
        &self,
        Parameters(args): Parameters<RetryArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let old = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let new_id = match args.new_id.as_ref().map(IdArg::id).transpose() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(format!("`newId`: {msg}"))),
        };
        if let Some(Err(msg)) = args.prompt.as_deref().map(|p| checks::prompt("prompt", p)) {
            return to_call(Err(msg));
        }
        let rebase = args.rebase.unwrap_or(false);
        if rebase && (args.prompt.is_some() || args.resume == Some(true)) {
            return to_call(Err(
                "`rebase` writes the new prompt itself: give it without `prompt` or `resume`"
                    .into(),
            ));
        }
        let how = crate::verbs::retry::Again {
            resume: args.resume.unwrap_or(false),
            id: new_id,
            prompt: args.prompt,
        };
        let (given, given_new) = (args.id, args.new_id);
        self.blocking(move |client| {
            let retried = if rebase {
                crate::verbs::redo::again_on_top(client, old, how)
            } else {
                crate::verbs::retry::again(client, old, how)
            };
            let retried = match retried {
                Ok(r) => r,
                // The refusal `conductor retry` prints.
                Err(e) => return Ok(Err(e.to_string())),
            };
            if let Some(warning) = &retried.warning {
                tracing::warn!("{warning}");
            }
            let id = retried.id;
            let loc = client.find_task(&id)?;
            let mut v = json!({
                "id": id,
                "retried": given.echo(),
                "state": loc.as_ref().map(|l| l.state),
                "slot": loc.as_ref().and_then(|l| l.slot).map(|s| s.0),
            });
            if let Some(g) = &given_new {
                v["id"] = g.echo();
            }
            Ok(Ok(v))
        })
        .await
    }
}

/// A refused submit or send as the tool error it is: an invalid task's reason alone (it
/// names the field), a worktree outside git naming `dir`.
fn refusal(e: Error) -> String {
    match e {
        Error::InvalidTask { reason } => reason,
        e @ (Error::NotARepository { .. } | Error::BareRepository { .. }) => format!(
            "`dir`: `worktree: true` needs a directory in a git repository with a working tree: {e}"
        ),
        e => e.to_string(),
    }
}

#[cfg(test)]
#[path = "create_tests.rs"]
mod tests;
