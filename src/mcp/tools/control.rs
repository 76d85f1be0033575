//! The MCP tools that stop and hold: `cancel`, `pause` and `resume`, with their arguments.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router, ErrorData};
use serde::Deserialize;
use serde_json::json;

use super::super::reply;
use super::{echo_id, to_call, Conductor, IdArgs};
use crate::queue::pause::{self, Target};
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
}
