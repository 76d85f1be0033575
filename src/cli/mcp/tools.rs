//! The MCP tools: their inputs (with JSON Schemas), descriptions for a model, and the library call each one is.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ServerCapabilities, ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use serde_json::{json, Value};

use super::handles::{self, Handle};

// `approve` and `deny`, in a file of their own (a child module: they use this server's helpers).
#[path = "approval.rs"]
mod approval;
use super::{checks, reply, resources, schema, waits};
use crate::queue::pause::{self, Target};
use crate::queue::Queue;
use crate::tasks::{Cursor, ListOptions, TaskState};
use crate::wait::Hub;
use crate::watch::WatchMode;
use crate::{Client, Error, Slot, Task, TaskId};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

/// The longest a `wait` call blocks, in seconds: under the 60 s after which common MCP
/// clients give up on a request, so a wait always answers before its client gives up.
pub const WAIT_CAP_SECS: f64 = 50.0;

/// A `wait` call's timeout when none is given, in seconds.
const WAIT_DEFAULT_SECS: f64 = 30.0;

/// The `logs` tool's tail when none is given, and its most, in bytes.
const LOGS_DEFAULT_BYTES: u64 = 16 * 1024;
const LOGS_MAX_BYTES: u64 = 1024 * 1024;

const INSTRUCTIONS: &str = "\
conductor delegates work to background AI coding agents (workers, each a Claude Code, \
Codex or other agent session) so that many tasks run in parallel: use it as you would \
spawn subagents or background tasks, to fan work out and gather the results. Hand work \
to them with `submit` (the shared queue: any idle worker) or `send` (one worker slot); \
both return a task id at once. Then `wait` for ids (it returns within its timeout, \
finished or not: call it again to keep waiting; with a progressToken it reports each \
task's progress) and read answers with `result`. `tasks` lists tasks (paged: pass \
`nextCursor` back as `cursor`), `status` shows the workers and the queue, `logs` shows \
what a task's agent has printed so far, `cancel` stops a task, `retry` runs a finished \
one again (resuming its agent's session), `totals` sums up counts and costs, `edit` changes a queued one. `submit` \
with `continueFrom` hands a finished task's output on to the next, with `wait: true` it \
waits for the answer itself. Submit independent tasks first, then wait for them \
together: they run in parallel. `pause` and `resume` stop and restart new pickups of a \
slot, a key, a group or all. Resources \
conductor://tasks/{id} and conductor://tasks/{id}/log can be read and subscribed to.";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitArgs {
    /// The whole prompt the agent is given: say what to do and what to report.
    #[schemars(length(min = 1))]
    pub prompt: String,
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
    /// Absolute path of an existing directory for the agent to work in (default: the
    /// worker's project directory).
    pub dir: Option<PathBuf>,
    /// The task's own time limit in seconds; its agent is stopped after it.
    pub timeout_secs: Option<u64>,
    /// A task id of your choosing (letters, digits, . _ -; unique on the root).
    /// Default: generated.
    pub id: Option<IdArg>,
    /// Any JSON, handed to the agent as the CONDUCTOR_CONTEXT environment variable.
    pub context: Option<Value>,
    /// Run again after a worker crash, up to this many attempts in all (default 1).
    pub max_attempts: Option<u32>,
    /// The agent preset that must run it (`claude`, `codex`, `command`): only a worker
    /// serving that preset takes it. Default: any worker's first preset.
    pub agent: Option<String>,
    /// Run in a fresh git worktree of the repository (`dir`, else the worker's project
    /// directory) on a new branch conductor/<id>; the result gives the branch and its
    /// diffstat. Default: the root's setting (off).
    pub worktree: Option<bool>,
    /// With worktree: the commit or ref to branch from (default HEAD).
    pub base: Option<String>,
    /// With worktree: copy the repository's uncommitted changes into the worktree.
    pub include_uncommitted: Option<bool>,
    /// The model the agent uses for this task (the claude, codex and gemini presets pass
    /// it on; a plain command ignores it).
    pub model: Option<String>,
    /// The group it runs in (made with `conductor group add NAME --parallel N`): at
    /// most that many tasks of the group run at once.
    pub group: Option<String>,
    /// Narrow the tools the worker lets its agent use unattended to these (claude
    /// preset; `[]`: none, e.g. `["Read"]` for a read-only task): each must be one the
    /// worker allows, and the worker's others are denied to this task's agent. Asking
    /// for a tool the worker does not allow gets the task rejected.
    pub allowed_tools: Option<Vec<String>>,
    /// Narrow the worker's permission mode (claude preset: `plan`, `dontAsk`,
    /// `acceptEdits`…) or approval mode (gemini: `plan`, `default`, `auto_edit`) for this
    /// task; one letting the agent do more than the worker's gets the task rejected.
    pub permission_mode: Option<String>,
    /// Extra environment variables for the agent, as {"NAME": "value"} (names of
    /// letters, digits and _; CONDUCTOR_* names are refused).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Labels to find the task by later (`tasks` with `labels`): 1-64 characters of
    /// A-Z a-z 0-9 . _ - : / each.
    #[serde(default)]
    pub labels: Vec<String>,
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
    /// The whole prompt the agent is given.
    #[schemars(length(min = 1))]
    pub prompt: String,
    /// A task id of your choosing (unique on the root). Default: generated.
    pub id: Option<IdArg>,
    /// The task's own time limit in seconds.
    pub timeout_secs: Option<u64>,
    /// Absolute path of an existing directory for the agent to work in.
    pub dir: Option<PathBuf>,
    /// Any JSON, handed to the agent as CONDUCTOR_CONTEXT.
    pub context: Option<Value>,
    /// The agent preset that must run it; the slot's worker refuses a preset it does
    /// not serve.
    pub agent: Option<String>,
    /// The model the agent uses for this task (claude, codex and gemini presets).
    pub model: Option<String>,
    /// Narrow the tools the worker lets its agent use unattended to these (claude
    /// preset; `[]`: none, e.g. `["Read"]` for a read-only task): each must be one the
    /// worker allows, and the worker's others are denied to this task's agent. Asking
    /// for a tool the worker does not allow gets the task rejected.
    pub allowed_tools: Option<Vec<String>>,
    /// Narrow the worker's permission mode (claude preset: `plan`, `dontAsk`,
    /// `acceptEdits`…) or approval mode (gemini: `plan`, `default`, `auto_edit`) for this
    /// task; one letting the agent do more than the worker's gets the task rejected.
    pub permission_mode: Option<String>,
    /// Extra environment variables for the agent, as {"NAME": "value"} (names of
    /// letters, digits and _; CONDUCTOR_* names are refused).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Labels to find the task by later (`tasks` with `labels`): 1-64 characters of
    /// A-Z a-z 0-9 . _ - : / each.
    #[serde(default)]
    pub labels: Vec<String>,
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
pub struct IdArgs {
    /// The task id.
    pub id: IdArg,
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
    /// Only tasks in these states: waiting, queued, running, done, failed, timeout,
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
pub struct PauseArgs {
    /// One worker slot: it takes no new task (a task sent to it waits in its inbox).
    pub slot: Option<u32>,
    /// Every task with this key.
    pub key: Option<String>,
    /// Every task of this group.
    pub group: Option<String>,
    /// Everything: no worker of the root starts a task.
    #[serde(default)]
    pub all: bool,
    /// pause only: also stop the running tasks it names and put them back, to run
    /// again once resumed.
    #[serde(default)]
    pub now: bool,
}

impl PauseArgs {
    /// The one thing named (exactly one of slot, key, group, all).
    fn target(&self, root: &crate::Root) -> crate::Result<std::result::Result<Target, String>> {
        let given = [
            self.slot.is_some(),
            self.key.is_some(),
            self.group.is_some(),
            self.all,
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Ok(Err(
                "name exactly one of slot, key, group or all (true)".to_string()
            ));
        }
        Ok(Ok(if let Some(n) = self.slot {
            let slot = match Slot::checked(n) {
                Ok(s) => s,
                Err(e) => return Ok(Err(e.to_string())),
            };
            root.existing_slot(slot)?;
            Target::Slot(n)
        } else if let Some(k) = &self.key {
            Target::Key(k.clone())
        } else if let Some(g) = &self.group {
            crate::queue::groups::require(root, g)?;
            Target::Group(g.clone())
        } else {
            Target::All
        }))
    }
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

/// A task id as a client gives it: a string, or a number (an all-digit id); answers
/// carry it back in the same form.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum IdArg {
    Number(u64),
    Text(String),
}

impl IdArg {
    pub(super) fn id(&self) -> std::result::Result<TaskId, String> {
        match self {
            IdArg::Number(n) => Ok(TaskId::Number(*n)),
            IdArg::Text(s) => task_id(s),
        }
    }

    /// The id as it was given.
    pub(super) fn echo(&self) -> Value {
        match self {
            IdArg::Number(n) => json!(n),
            IdArg::Text(s) => json!(s),
        }
    }
}

/// `reply` with its `id` as the client gave it.
pub(super) fn echo_id(reply: Reply, given: &IdArg) -> Reply {
    reply.map(|mut v| {
        if v.get("id").is_some() {
            v["id"] = given.echo();
        }
        v
    })
}

/// The server: one root, the tools over it, and the one watcher every wait shares.
#[derive(Clone)]
pub struct Conductor {
    pub(super) client: Client,
    pub(super) hub: Hub,
    /// How many `wait` calls are in progress.
    waiting: Arc<AtomicUsize>,
    /// Resource subscriptions by URI: each one a task following its task.
    subscriptions: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>>,
    /// The task handles given (Tasks extension), by task id.
    pub(super) handles: Arc<Mutex<HashMap<String, Handle>>>,
    pub(super) tool_router: ToolRouter<Conductor>,
}

/// Counts one `wait` call in progress while it lives.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(n: &Arc<AtomicUsize>) -> Waiting {
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A tool's answer: JSON, or a message for a tool error.
pub(super) type Reply = std::result::Result<Value, String>;

pub(super) fn to_call(reply: Reply) -> std::result::Result<CallToolResult, ErrorData> {
    Ok(match reply {
        Ok(v) => CallToolResult::structured(v),
        Err(msg) => CallToolResult::error(vec![ContentBlock::text(msg)]),
    })
}

fn task_id(s: &str) -> std::result::Result<TaskId, String> {
    TaskId::parse(s).map_err(|reason| format!("invalid task id {s:?}: {reason}"))
}

fn ids(list: &[IdArg]) -> std::result::Result<Vec<TaskId>, String> {
    list.iter().map(IdArg::id).collect()
}

impl Conductor {
    pub fn new(client: Client) -> Conductor {
        let mut tool_router = Self::tool_router() + Self::review_router() + Self::approval_router();
        for route in tool_router.map.values_mut() {
            let mut input = Value::Object((*route.attr.input_schema).clone());
            schema::plain_optionals(&mut input);
            // A tool without arguments (`status`, `queue`) takes none: `{"bogus": 1}` is
            // refused as a typo in any other tool's arguments is.
            if let Value::Object(m) = &mut input {
                m.entry("additionalProperties")
                    .or_insert(Value::Bool(false));
            }
            if let Value::Object(input) = input {
                route.attr.input_schema = Arc::new(input);
            }
            route.attr.output_schema = schema::output(&route.attr.name).map(Arc::new);
        }
        Conductor {
            client,
            hub: Hub::new(WatchMode::Auto),
            waiting: Arc::new(AtomicUsize::new(0)),
            subscriptions: Arc::default(),
            handles: Arc::default(),
            tool_router,
        }
    }

    /// The one watcher every wait of the server shares.
    pub fn hub(&self) -> Hub {
        self.hub.clone()
    }

    /// Run `f` on the client off the async thread (every library call blocks), with
    /// the root checked first; a library error becomes the tool error's message.
    pub(super) async fn blocking(
        &self,
        f: impl FnOnce(&Client) -> crate::Result<Reply> + Send + 'static,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        to_call(self.reply(f).await)
    }

    /// [`Conductor::blocking`]'s answer before it becomes a tool result.
    pub(super) async fn reply(
        &self,
        f: impl FnOnce(&Client) -> crate::Result<Reply> + Send + 'static,
    ) -> Reply {
        let client = self.client.clone();
        let joined = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            f(&client)
        })
        .await;
        match joined {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("internal error: the call failed: {e}")),
        }
    }
}

impl Conductor {
    /// Wait for `ids` on the shared watcher, ended at once by the client's cancel,
    /// telling progress when the client sent a token.
    async fn wait_for(
        &self,
        ids: Vec<TaskId>,
        given: &[IdArg],
        timeout: Duration,
        chars: usize,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        match self.waited(ids, given, timeout, chars, ctx).await {
            Some(reply) => to_call(reply),
            // Cancelled: the client no longer wants an answer; this one is dropped.
            None => Err(ErrorData::internal_error("the request was cancelled", None)),
        }
    }

    /// [`Conductor::wait_for`]'s answer: `None` when the client cancelled the request.
    async fn waited(
        &self,
        ids: Vec<TaskId>,
        given: &[IdArg],
        timeout: Duration,
        chars: usize,
        ctx: RequestContext<RoleServer>,
    ) -> Option<Reply> {
        if let Err(e) = self.client.root().require_existing() {
            return Some(Err(e.to_string()));
        }
        let progress = ctx.meta.get_progress_token().map(|token| waits::Progress {
            peer: ctx.peer.clone(),
            token,
        });
        let ct = ctx.ct.clone();
        let _counted = Waiting::new(&self.waiting);
        let waited = waits::wait_all(
            self.client.clone(),
            self.hub.clone(),
            ids,
            timeout,
            chars,
            ct.cancelled_owned(),
            progress,
        )
        .await;
        match waited {
            Ok(Some(mut v)) => {
                if let Some(Value::Array(tasks)) = v.get_mut("tasks") {
                    for (t, g) in tasks.iter_mut().zip(given) {
                        t["id"] = g.echo();
                    }
                }
                Some(Ok(v))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }
}

/// A `wait`'s timeout in seconds as given (default 30), within 0..=50.
fn wait_secs(given: Option<f64>) -> Duration {
    let secs = given.unwrap_or(WAIT_DEFAULT_SECS);
    let secs = if secs.is_finite() {
        secs.clamp(0.0, WAIT_CAP_SECS)
    } else {
        WAIT_CAP_SECS
    };
    Duration::from_secs_f64(secs)
}

#[tool_router]
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
        let given = args.id.clone();
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
        let given = args.id.clone();
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
        description = "Wait until the given tasks have finished, for at most timeoutSecs \
        (default 30, capped at 50 so a call always returns). Returns each task's state and, \
        for a finished one, its result (output, success, error, exit code, duration, \
        cost). A timeout is not an error: unfinished tasks are listed with their state \
        (queued, running…); call `wait` again to keep waiting.",
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
        duration, cost. If it has not finished yet, says where it is (queued, running…) \
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
            let mut v = reply::status(client)?;
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
            let pending = Queue::new(client.root().clone()).pending()?;
            let items: Vec<Value> = pending
                .iter()
                .enumerate()
                .map(|(i, p)| crate::cli::queue::pending_json(i + 1, p))
                .collect();
            Ok(Ok(
                json!({ "root": client.root().path(), "pending": items }),
            ))
        })
        .await
    }

    #[tool(
        description = "Run a finished task again under a new id (ID-r1, -r2 …): back to \
        the shared queue if it came through it, else to the slot it was sent to. With \
        resume, the agent continues its session (claude and codex presets) — give a new \
        prompt saying what to do next; without, it starts afresh with the old prompt or \
        the new one. Returns the new id at once; `wait` for it.",
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
        let how = crate::cli::retry::Again {
            resume: args.resume.unwrap_or(false),
            id: new_id,
            prompt: args.prompt,
        };
        let (given, given_new) = (args.id, args.new_id);
        self.blocking(move |client| {
            let id = match crate::cli::retry::again(client, old, how) {
                Ok(id) => id,
                // The library's error, or the refusal `conductor retry` prints.
                Err(e) => return Ok(Err(format!("{e:#}"))),
            };
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
            let mut v =
                serde_json::to_value(crate::cli::tasks::summary::of_root(client.root(), &all))
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
        description = "Cancel a task: withdrawn if it still waits (queue or inbox), \
        stopped by its worker if it runs. Its result then says cancelled. An error if it \
        had already finished.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn cancel(
        &self,
        Parameters(args): Parameters<IdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let given = args.id;
        self.blocking(move |client| Ok(echo_id(reply::cancel(client, &id)?, &given)))
            .await
    }

    #[tool(
        description = "Pause new pickups of one worker slot, a key, a group or all: no \
        task it names starts until `resume` (running ones go on; with now: true they are \
        stopped and put back, to run again once resumed). `queue` and `tasks` then say \
        `paused`; `status` lists the pauses.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn pause(
        &self,
        Parameters(args): Parameters<PauseArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.blocking(move |client| {
            let target = match args.target(client.root())? {
                Ok(t) => t,
                Err(msg) => return Ok(Err(msg)),
            };
            let fresh = pause::pause(client.root(), &target, args.now)?;
            Ok(Ok(json!({
                "paused": target,
                "already": !fresh,
                "now": args.now,
                "file": client.root().paused_dir().join(target.file_name()),
            })))
        })
        .await
    }

    #[tool(
        description = "Resume what `pause` paused (the same slot, key or group; all: \
        every pause in force): its tasks start again.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn resume(
        &self,
        Parameters(args): Parameters<PauseArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.blocking(move |client| {
            if args.now {
                return Ok(Err("now applies to pause only".to_string()));
            }
            let target = match args.target(client.root())? {
                Ok(t) => t,
                Err(msg) => return Ok(Err(msg)),
            };
            if target == Target::All {
                let lifted = pause::resume_all(client.root())?;
                return Ok(Ok(
                    json!({ "resumed": lifted, "wasPaused": !lifted.is_empty() }),
                ));
            }
            let was = pause::resume(client.root(), &target)?;
            Ok(Ok(json!({ "resumed": target, "wasPaused": was })))
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Conductor {
    /// Arguments that do not fit the tool's input schema are refused here, as a tool
    /// error naming the field (rmcp's own refusal is a JSON-RPC error clients hide).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(tool) = self.tool_router.get(&request.name) {
            let schema = Value::Object((*tool.input_schema).clone());
            let args = Value::Object(request.arguments.clone().unwrap_or_default());
            if let Err(msg) = schema::check(&schema, &args) {
                let msg = format!("{}: {msg}", request.name);
                return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into());
            }
        }
        if handles::negotiated(&context) {
            if let Some(origin) = Self::handle_origin(&request) {
                return self.call_as_task(origin, request, context).await;
            }
        }
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// `tasks/get`: the conductor task of that id, wherever it is.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = TaskId::parse(&request.task_id)
            .map_err(|reason| ErrorData::invalid_params(format!("taskId: {reason}"), None))?;
        let handle = self.handle(&id);
        let client = self.client.clone();
        let found = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            handles::detailed(&client, &id, handle.as_ref())
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match found {
            Some(task) => Ok(GetTaskResult::new(task)),
            None => Err(ErrorData::invalid_params(
                format!("no task {} on this root", request.task_id),
                None,
            )),
        }
    }

    /// `tasks/cancel`: cancel the conductor task (withdrawn if it waits, stopped if it
    /// runs); `tasks/get` then says cancelled. A task already finished stays as it is.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = TaskId::parse(&request.task_id)
            .map_err(|reason| ErrorData::invalid_params(format!("taskId: {reason}"), None))?;
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            if client.find_task(&id)?.is_none() {
                return Ok(Err(format!("no task {id} on this root")));
            }
            reply::cancel(&client, &id).map(|_| Ok(()))
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|msg| ErrorData::invalid_params(msg, None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    /// The newest tasks (one page of `tasks`), each as its resource.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let client = self.client.clone();
        let listed = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            client.list_tasks(&ListOptions {
                limit: Some(crate::tasks::list::DEFAULT_LIMIT),
                ..ListOptions::default()
            })
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(
            listed
                .iter()
                .map(|t| {
                    Resource::new(
                        format!("conductor://tasks/{}", t.id),
                        format!("task {}", t.id),
                    )
                    .with_description(format!(
                        "{}: {}",
                        t.state,
                        t.prompt_preview.as_deref().unwrap_or("")
                    ))
                    .with_mime_type("application/json")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = self.client.clone();
        let uri = request.uri;
        let read = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            resources::read(&client, &uri)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match read {
            Ok(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            Err(e @ (Error::NoSuchTask { .. } | Error::BadArgument { .. })) => {
                Err(ErrorData::resource_not_found(e.to_string(), None))
            }
            Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
        }
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        let follow = resources::follow(
            self.client.clone(),
            self.hub.clone(),
            uri.clone(),
            context.peer.clone(),
        )
        .await
        .map_err(|e| match e {
            Error::NoSuchTask { .. } | Error::BadArgument { .. } => {
                ErrorData::resource_not_found(e.to_string(), None)
            }
            e => ErrorData::internal_error(e.to_string(), None),
        })?;
        let handle = tokio::spawn(follow).abort_handle();
        let old = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uri, handle);
        if let Some(old) = old {
            old.abort();
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let gone = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        if let Some(h) = gone {
            h.abort();
        }
        Ok(())
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("conductor", env!("CARGO_PKG_VERSION"))
                .with_title("conductor: AI coding-agent workers"),
        )
        .with_instructions(INSTRUCTIONS)
    }
}

/// A task as the CLI's `submit` builds it, marked with this process's depth.
fn submit_task(a: SubmitArgs) -> std::result::Result<Task, String> {
    checks::prompt("prompt", &a.prompt)?;
    if let Some(m) = &a.permission_mode {
        checks::permission_mode(a.agent.as_deref(), m)?;
    }
    let mut task = Task::new(a.prompt);
    task.id = a.id.as_ref().map(IdArg::id).transpose()?;
    task.key = a.key;
    task.priority = a.priority;
    task.max_attempts = a.max_attempts;
    task.after = ids(&a.after)?;
    task.timeout_secs = a.timeout_secs;
    task.context = a.context;
    task.dir = a.dir.map(absolute).transpose()?;
    task.agent = a.agent.map(preset_name).transpose()?;
    task.worktree = a.worktree;
    task.base = a.base;
    task.include_uncommitted = a.include_uncommitted;
    task.model = a.model;
    task.group = a.group;
    task.allowed_tools = a.allowed_tools;
    task.permission_mode = a.permission_mode;
    task.env = a.env;
    task.labels = a.labels;
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
            Ok(crate::cli::run::chained_prompt(&prompt, Some(&r)))
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
    checks::prompt("prompt", &a.prompt)?;
    if let Some(m) = &a.permission_mode {
        checks::permission_mode(a.agent.as_deref(), m)?;
    }
    let mut task = Task::new(a.prompt);
    task.id = a.id.as_ref().map(IdArg::id).transpose()?;
    task.timeout_secs = a.timeout_secs;
    task.context = a.context;
    task.dir = a.dir.map(absolute).transpose()?;
    task.agent = a.agent.map(preset_name).transpose()?;
    task.model = a.model;
    task.allowed_tools = a.allowed_tools;
    task.permission_mode = a.permission_mode;
    task.env = a.env;
    task.labels = a.labels;
    Ok((slot, finish_task(task)?))
}

/// A preset name, checked (`claude`, `codex`, `command`).
fn preset_name(name: String) -> std::result::Result<String, String> {
    name.parse::<crate::preset::Preset>()
        .map(|p| p.to_string())
        .map_err(|e| e.to_string())
}

fn finish_task(mut task: Task) -> std::result::Result<Task, String> {
    task.validate()
        .map_err(|reason| Error::InvalidTask { reason }.to_string())?;
    crate::env::stamp_depth(&mut task).map_err(|e| e.to_string())?;
    Ok(task)
}

/// A `dir` made absolute against the server's directory, as the CLI does.
fn absolute(dir: PathBuf) -> std::result::Result<PathBuf, String> {
    std::path::absolute(&dir).map_err(|e| {
        Error::BadTaskDir {
            path: dir,
            reason: e.to_string(),
        }
        .to_string()
    })
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
    if let Some(t) = crate::protocol::parse_rfc3339(s) {
        return Ok(t);
    }
    let d = crate::cli::parse_duration_arg(s).map_err(|_| {
        format!("since {s:?} is neither a duration (90s, 2h, 1d) nor an RFC 3339 time")
    })?;
    Ok(SystemTime::now()
        .checked_sub(d)
        .unwrap_or(SystemTime::UNIX_EPOCH))
}
