//! The MCP tools that read: `wait`, `result`, `tasks`, `status`, `queue`, `totals` and `logs`, with their arguments.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::json;

use super::super::reply;
use super::{echo_id, ids, to_call, wait_secs, Conductor, IdArg};
use crate::tasks::{Cursor, ListOptions, TaskState};
use crate::{Error, Slot};

/// The `logs` tool's tail when none is given, and its most, in bytes.
const LOGS_DEFAULT_BYTES: u64 = 16 * 1024;
const LOGS_MAX_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitArgs {
    /// The task ids to wait for (all of them).
    #[schemars(length(min = 1))]
    pub ids: Vec<IdArg>,
    /// How long to wait at most, in seconds (default 30, at most 50). The call then
    /// returns whatever is finished; call it again to keep waiting.
    #[schemars(range(min = 0.0))]
    pub timeout_secs: Option<f64>,
    /// How much of each output to return, in characters, from its end (default 20000).
    pub max_output_chars: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultArgs {
    /// The task id.
    pub id: IdArg,
    /// How much of the output to return, in characters, from its end (default 20000).
    pub max_output_chars: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogsArgs {
    /// The task id.
    pub id: IdArg,
    /// How many bytes from the end of its output (default 16384, at most 1048576).
    pub tail_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TasksArgs {
    /// Only tasks in these states: waiting, queued, working (or running), done, failed, timeout,
    /// cancelled, interrupted, rejected, gone.
    #[serde(default)]
    pub states: Vec<String>,
    /// Only tasks with this key.
    pub key: Option<String>,
    /// Only tasks of this group.
    pub group: Option<String>,
    /// Only tasks that carry every one of these labels.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Only tasks sent to, running on, or run by this worker slot.
    pub slot: Option<u32>,
    /// Only tasks submitted within this long (`90s`, `2h`, `1d`) or since this time
    /// (RFC 3339).
    pub since: Option<String>,
    /// At most this many, newest first (default 50, at most 500).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// Where to go on from: the `nextCursor` of the previous page (same filters).
    pub cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TotalsArgs {
    /// Only tasks in these states (as `tasks` takes them).
    #[serde(default)]
    pub states: Vec<String>,
    /// Only tasks with this key.
    pub key: Option<String>,
    /// Only tasks sent to, running on, or run by this worker slot.
    pub slot: Option<u32>,
    /// Only tasks submitted within this long (`90s`, `2h`, `1d`) or since this time
    /// (RFC 3339).
    pub since: Option<String>,
}

#[tool_router(router = read_router, vis = "pub(super)")]
impl Conductor {
    #[tool(
        description = "Wait until the given tasks have finished, for at most timeoutSecs \
        (default 30, capped at 50 so a call always returns). Returns each task's state and, \
        for a finished one, its result (output, success, error, exit code, duration, \
        cost). A timeout is not an error: unfinished tasks are listed with their state \
        (queued, working…); call `wait` again to keep waiting.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn wait(
        &self,
        Parameters(args): Parameters<WaitArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let ids = match ids(&args.ids) {
            Ok(ids) if !ids.is_empty() => ids,
            Ok(_) => return to_call(Err("give at least one task id in `ids`".into())),
            Err(msg) => return to_call(Err(msg)),
        };
        let chars = args.max_output_chars.unwrap_or(reply::DEFAULT_OUTPUT_CHARS);
        self.wait_for(ids, &args.ids, wait_secs(args.timeout_secs), chars, ctx)
            .await
    }

    #[tool(
        description = "A task's result: output, success, error, outcome, exit code, \
        duration, cost. If it has not finished yet, says where it is (queued, working…) \
        without waiting; `wait` waits for it.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn result(
        &self,
        Parameters(args): Parameters<ResultArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let chars = args.max_output_chars.unwrap_or(reply::DEFAULT_OUTPUT_CHARS);
        let given = args.id;
        self.blocking(move |client| {
            Ok(echo_id(Ok(reply::task_result(client, &id, chars)?), &given))
        })
        .await
    }

    #[tool(
        description = "List tasks on the root, newest first: id, state, where it runs, \
        key, priority, labels, times, cost, the start of its prompt. Filter by states, key, \
        labels, slot, or since (a duration such as 2h, or an RFC 3339 time). Use it to find task ids or \
        see what is pending or failed.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn tasks(
        &self,
        Parameters(args): Parameters<TasksArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let opts = match list_options(args) {
            Ok(o) => o,
            Err(msg) => return to_call(Err(msg)),
        };
        self.blocking(move |client| {
            let tasks = crate::review::annotated(client.list_tasks(&opts)?);
            let mut v = json!({ "root": client.root().path() });
            if opts.limit.is_some_and(|l| tasks.len() >= l) {
                if let Some(last) = tasks.last() {
                    v["nextCursor"] = json!(Cursor::after(last).encode());
                }
            }
            v["tasks"] = json!(tasks);
            Ok(Ok(v))
        })
        .await
    }

    #[tool(
        description = "The workers and the queue at a glance: each slot's state, task, \
        heartbeat and agent; running agents against the cap, pending tasks by priority, \
        running and waiting tasks per key; whether any live worker serves the root. Use it \
        to see whether work will be picked up.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn status(&self) -> Result<CallToolResult, ErrorData> {
        let server = json!({
            "pendingWaits": self.waiting.load(Ordering::Relaxed),
            "watcherSubscriptions": self.hub.waiters(),
            "watcherPolls": self.hub.is_polling(),
        });
        self.blocking(move |client| {
            let request = crate::verbs::status::StatusRequest::default();
            let mut v = crate::verbs::status::status(client, &request)?.to_json();
            v["server"] = server;
            Ok(Ok(v))
        })
        .await
    }

    #[tool(
        description = "The shared queue's pending tasks in the order they will run, each \
        with why it waits (a busy key, no free slot, no idle worker, the tasks it runs \
        after), its priority (raised by waiting) and age. Use it to see why delegated \
        background work has not started.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn queue(&self) -> Result<CallToolResult, ErrorData> {
        self.blocking(|client| {
            let view = crate::verbs::queue::queue(client.root())?;
            Ok(Ok(json!(view)))
        })
        .await
    }

    #[tool(
        description = "Totals over the tasks on the root — how many, done, failed, \
        unfinished, cost in USD, agent turns and run time — overall, per key, per agent \
        and per day (as `conductor tasks --summary`). Filter as `tasks` does (states, key, \
        slot, since). Use it to see what delegated background work has cost.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn totals(
        &self,
        Parameters(args): Parameters<TotalsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let opts = match list_options(TasksArgs {
            states: args.states,
            key: args.key,
            slot: args.slot,
            since: args.since,
            ..TasksArgs::default()
        }) {
            Ok(o) => ListOptions { limit: None, ..o },
            Err(msg) => return to_call(Err(msg)),
        };
        self.blocking(move |client| {
            let all = client.list_tasks(&opts)?;
            let mut v = serde_json::to_value(crate::verbs::totals::of_root(client.root(), &all))
                .map_err(|e| Error::CallFailed {
                    what: "totals".into(),
                    reason: e.to_string(),
                })?;
            v["root"] = json!(client.root().path());
            Ok(Ok(v))
        })
        .await
    }

    #[tool(
        description = "What a task's agent has printed: the end of its live output \
        while it runs, of its kept log once it has finished. Use it to check on a long \
        task's progress, or to read more of an output than `result` returned.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn logs(
        &self,
        Parameters(args): Parameters<LogsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let given = args.id;
        let tail = args
            .tail_bytes
            .unwrap_or(LOGS_DEFAULT_BYTES)
            .min(LOGS_MAX_BYTES);
        self.blocking(move |client| Ok(echo_id(Ok(reply::logs(client, &id, tail)?), &given)))
            .await
    }
}

fn list_options(a: TasksArgs) -> std::result::Result<ListOptions, String> {
    let states = a
        .states
        .iter()
        .map(|s| s.trim().parse::<TaskState>())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let slot = a
        .slot
        .map(Slot::checked)
        .transpose()
        .map_err(|e| e.to_string())?;
    let since = a.since.as_deref().map(since).transpose()?;
    let after = a
        .cursor
        .as_deref()
        .map(|c| {
            Cursor::decode(c).ok_or_else(|| {
                Error::BadArgument {
                    field: "cursor".into(),
                    reason: format!(
                        "{c:?} is not a cursor this server gave (pass a `nextCursor` unchanged)"
                    ),
                }
                .to_string()
            })
        })
        .transpose()?;
    Ok(ListOptions {
        states,
        key: a.key,
        group: a.group,
        labels: a.labels,
        slot,
        since,
        limit: Some(a.limit.unwrap_or(crate::tasks::list::DEFAULT_LIMIT)),
        after,
    })
}

/// `since` as `conductor tasks --since` takes it: an RFC 3339 time, or a duration ago.
fn since(s: &str) -> std::result::Result<SystemTime, String> {
    crate::verbs::tasks::since(s).map_err(|reason| format!("since {reason}"))
}
