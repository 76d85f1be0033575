//! The MCP tools that stop and hold: `cancel`, `pause` and `resume`, with their arguments.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router, ErrorData};
use serde::Deserialize;
use serde_json::json;

use super::super::reply;
use super::{echo_id, to_call, Conductor, IdArgs};
use crate::verbs::{self, pause::Selector};
use crate::Slot;

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
    fn what(&self) -> std::result::Result<Selector, String> {
        let given = [
            self.slot.is_some(),
            self.key.is_some(),
            self.group.is_some(),
            self.all,
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err("name exactly one of slot, key, group or all (true)".to_string());
        }
        Ok(if let Some(n) = self.slot {
            Selector::Slot(Slot::checked(n).map_err(|e| e.to_string())?)
        } else if let Some(k) = &self.key {
            Selector::Key(k.clone())
        } else if let Some(g) = &self.group {
            Selector::Group(g.clone())
        } else {
            Selector::All
        })
    }
}

#[tool_router(router = control_router, vis = "pub(super)")]
impl Conductor {
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
            let what = match args.what() {
                Ok(w) => w,
                Err(msg) => return Ok(Err(msg)),
            };
            let request = verbs::pause::PauseRequest {
                what,
                now: args.now,
            };
            Ok(Ok(json!(verbs::pause::pause(client, &request)?)))
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
            let what = match args.what() {
                Ok(w) => w,
                Err(msg) => return Ok(Err(msg)),
            };
            let request = verbs::pause::ResumeRequest { what };
            Ok(Ok(json!(verbs::pause::resume(client, &request)?)))
        })
        .await
    }
}
