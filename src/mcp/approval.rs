//! The MCP tools `approve` and `deny`: answer the question a task's agent waits on (a child of `tools`, whose server they extend).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router, ErrorData};
use serde::Deserialize;
use serde_json::json;

use crate::approval::{self, Decision};
use crate::mcp::tools::{echo_id, to_call, Conductor, IdArg};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApproveArgs {
    /// The task whose agent asks (state `needs approval`).
    pub id: IdArg,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DenyArgs {
    /// The task whose agent asks (state `needs approval`).
    pub id: IdArg,
    /// Why: what the agent is told (default: that a person denied it).
    pub reason: Option<String>,
}

#[tool_router(router = approval_router, vis = "pub(super)")]
impl Conductor {
    #[tool(
        description = "Allow the tool call a task's agent asks about: a task in state \
        `needs approval` (see `tasks` or `status`, whose `approval` says the tool and its \
        input) runs it. Refused when the task asks nothing.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn approve(
        &self,
        Parameters(args): Parameters<ApproveArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.answer_question(args.id, Decision::Allow, None).await
    }

    #[tool(
        description = "Refuse the tool call a task's agent asks about (a task in state \
        `needs approval`); the agent is told `reason` and goes on without it. Refused \
        when the task asks nothing.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn deny(
        &self,
        Parameters(args): Parameters<DenyArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let reason = args
            .reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| approval::DEFAULT_DENIAL.to_string());
        self.answer_question(args.id, Decision::Deny, Some(reason))
            .await
    }
}

impl Conductor {
    async fn answer_question(
        &self,
        given: IdArg,
        decision: Decision,
        reason: Option<String>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match given.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        self.blocking(move |client| {
            let id = crate::ids::resolve(client.root(), &id)?;
            let q = approval::answer(client.root(), &id, decision, reason.clone(), "mcp")?;
            let v = json!({ "id": id, "decision": decision, "reason": reason, "question": q });
            Ok(echo_id(Ok(v), &given))
        })
        .await
    }
}
