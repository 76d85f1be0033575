//! The MCP tools that make tasks: `submit`, `send`, `edit` and `retry`, with their arguments.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::json;

use super::super::{checks, reply};
use super::task_args::TaskArgs;
use super::{echo_id, ids, to_call, wait_secs, Conductor, IdArg};
use crate::queue::Queue;
use crate::{Client, Error, Slot, Task, TaskId};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitArgs {
    /// What the task asks for, as `send` takes it too.
    #[serde(flatten)]
    pub task: TaskArgs,
    /// Serialization key (a user, a repository): tasks with the same key never run at
    /// the same time.
    pub key: Option<String>,
    /// 0-9, higher runs first (default 5).
    #[schemars(range(max = 9))]
    pub priority: Option<u8>,
    /// Ids of tasks that must all succeed before this one starts; if one fails, this
    /// one ends cancelled.
    #[serde(default)]
    pub after: Vec<IdArg>,
    /// Run again after a worker crash, up to this many attempts in all (default 1).
    pub max_attempts: Option<u32>,
    /// Run in a fresh git worktree of the repository (`dir`, else the worker's project
    /// directory) on a new branch conductor/<id>; the result gives the branch and its
    /// diffstat. Default: the root's setting (off).
    pub worktree: Option<bool>,
    /// With worktree: the commit or ref to branch from (default HEAD).
    pub base: Option<String>,
    /// With worktree: copy the repository's uncommitted changes into the worktree.
    pub include_uncommitted: Option<bool>,
    /// The group it runs in (made with `conductor group add NAME --parallel N`): at
    /// most that many tasks of the group run at once.
    pub group: Option<String>,
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendArgs {
    /// The worker slot number to deliver to (see `status` for the slots).
    pub slot: u32,
    /// What the task asks for, as `submit` takes it too.
    #[serde(flatten)]
    pub task: TaskArgs,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditArgs {
    /// The id of a task still waiting in the shared queue.
    pub id: IdArg,
    /// The new prompt.
    pub prompt: Option<String>,
    /// The new priority, 0-9.
    #[schemars(range(max = 9))]
    pub priority: Option<u8>,
    /// The new serialization key ("" removes it).
    pub key: Option<String>,
    /// The tasks it must run after (replaces the list; [] clears it).
    pub after: Option<Vec<IdArg>>,
    /// The agent's extra environment (replaces it; {} clears it).
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Its labels (replaces them; [] clears them).
    pub labels: Option<Vec<String>>,
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
        let from = match args.continue_from.as_ref().map(IdArg::id).transpose() {
            Ok(f) => f,
            Err(msg) => return to_call(Err(format!("`continueFrom`: {msg}"))),
        };
        let task = match submit_task(args) {
            Ok(t) => t,
            Err(msg) => return to_call(Err(msg)),
        };
        let submitted = self
            .reply(move |client| {
                let mut task = task;
                if let (Some(true), Some(dir)) = (task.worktree, &task.dir) {
                    if let Err(msg) = checks::worktree_dir(dir) {
                        return Ok(Err(msg));
                    }
                }
                if let Some(from) = &from {
                    match continued(client, task.prompt, from)? {
                        Ok(p) => task.prompt = p,
                        Err(msg) => return Ok(Err(msg)),
                    }
                    // The composed prompt must still make a valid task (its size).
                    if let Err(reason) = task.validate() {
                        return Ok(Err(Error::InvalidTask { reason }.to_string()));
                    }
                }
                let id = Queue::new(client.root().clone()).submit(&task)?;
                let mut v = json!({ "id": id, "state": "queued" });
                if let Some(d) = task.depth {
                    v["depth"] = json!(d);
                }
                if let Some(from) = &from {
                    v["continuedFrom"] = json!(from);
                }
                if matches!(crate::wait::root_served(client.root()), Ok(false)) {
                    v["warning"] = json!("no live worker serves this root yet: the task stays queued until one starts (`conductor run` or `conductor-worker N DIR`)");
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
        let (slot, task) = match send_task(args) {
            Ok(t) => t,
            Err(msg) => return to_call(Err(msg)),
        };
        self.blocking(move |client| {
            let id = client.write_task(slot, &task)?;
            let mut v = json!({ "id": id, "slot": slot.0, "state": "waiting" });
            if matches!(crate::wait::slot_served(client.root(), slot), Ok(false)) {
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
        let after = match args.after.as_deref().map(ids).transpose() {
            Ok(a) => a,
            Err(msg) => return to_call(Err(msg)),
        };
        if let Some(Err(msg)) = args.prompt.as_deref().map(|p| checks::prompt("prompt", p)) {
            return to_call(Err(msg));
        }
        let edit = crate::tasks::edit::TaskEdit {
            prompt: args.prompt,
            priority: args.priority,
            key: args.key.map(|k| (!k.is_empty()).then_some(k)),
            after,
            env: args.env,
            labels: args.labels,
        };
        if let Some(why) = edit.refusal(&id) {
            return to_call(Err(why));
        }
        let given = args.id.clone();
        self.blocking(move |client| {
            let task = client.edit_task(&id, None, |t| edit.apply(t))?;
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

/// A task as the CLI's `submit` builds it, marked with this process's depth.
fn submit_task(a: SubmitArgs) -> std::result::Result<Task, String> {
    let mut task = a.task.into_task()?;
    task.key = a.key;
    task.priority = a.priority;
    task.max_attempts = a.max_attempts;
    task.after = ids(&a.after)?;
    task.worktree = a.worktree;
    task.base = a.base;
    task.include_uncommitted = a.include_uncommitted;
    task.group = a.group;
    finish_task(task)
}

/// `prompt` followed by finished task `from`'s output, composed as `run --chain`
/// composes a step's prompt; a tool error when `from` has not finished.
fn continued(
    client: &Client,
    prompt: String,
    from: &TaskId,
) -> crate::Result<std::result::Result<String, String>> {
    let loc = client
        .find_task(from)?
        .ok_or_else(|| reply::no_such_task(client, from))?;
    let result = client.result_of(from)?;
    Ok(match result {
        Some(r) if loc.state.is_finished() => {
            Ok(crate::verbs::chain::chained_prompt(&prompt, Some(&r)))
        }
        _ => Err(format!(
            "`continueFrom`: task {from} is {}; only a finished task's output can be passed on \
             (wait for it first, or give it in `after` to run after it without its output)",
            loc.state
        )),
    })
}

/// The slot and task of a `send`, marked with this process's depth.
fn send_task(a: SendArgs) -> std::result::Result<(Slot, Task), String> {
    let slot = Slot::checked(a.slot).map_err(|e| e.to_string())?;
    Ok((slot, finish_task(a.task.into_task()?)?))
}

fn finish_task(mut task: Task) -> std::result::Result<Task, String> {
    task.validate()
        .map_err(|reason| Error::InvalidTask { reason }.to_string())?;
    crate::env::stamp_depth(&mut task).map_err(|e| e.to_string())?;
    Ok(task)
}
