//! The MCP tools: their inputs (with JSON Schemas), descriptions for a model, and the library call each one is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::Value;

use super::handles::Handle;
use super::{schema, waits};
use crate::wait::Hub;
use crate::watch::WatchMode;
use crate::{Client, TaskId};

// `approve` and `deny`, in a file of their own (a child module: they use this server's helpers).
#[path = "approval.rs"]
mod approval;
// One module per family of tools, each with its arguments; and the server's handler.
mod control;
mod create;
mod handler;
mod read;

/// The longest a `wait` call blocks, in seconds: under the 60 s after which common MCP
/// clients give up on a request, so a wait always answers before its client gives up.
pub const WAIT_CAP_SECS: f64 = 50.0;

/// A `wait` call's timeout when none is given, in seconds.
const WAIT_DEFAULT_SECS: f64 = 30.0;

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
pub struct IdArgs {
    /// The task id.
    pub id: IdArg,
}

/// A task id as a client gives it: a string or a number (described with the task).
pub use crate::verbs::spec::IdArg;

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

fn ids(list: &[IdArg]) -> std::result::Result<Vec<TaskId>, String> {
    list.iter().map(IdArg::id).collect()
}

impl Conductor {
    pub fn new(client: Client) -> Conductor {
        let mut tool_router = Self::create_router()
            + Self::read_router()
            + Self::control_router()
            + Self::review_router()
            + Self::approval_router();
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
        let request = crate::verbs::wait::WaitRequest {
            targets: crate::verbs::wait::WaitTargets::Tasks(ids),
            timeout: Some(timeout),
            any: false,
            since: None,
        };
        let waited = waits::wait_all(
            self.client.clone(),
            self.hub.clone(),
            request,
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
