//! `conductor approve ID` / `conductor deny ID [--reason TEXT]`: answer the question a task's agent waits on.

use crate::approval::{self, Decision};

use super::args::RootArg;
use crate::cli::common::exit;

const AFTER_HELP: &str = "\
A claude-preset agent asks instead of being refused when its worker does not pre-approve \
a tool it wants (approvals: config.json `approvals`; on by default when the worker's \
--allowed-tools leaves out some of the preset's default tools). The task then shows \
`needs approval` in `status`, `tasks` and the dashboard, with the tool and its input. \
`approve` lets the agent make that one call; `deny` refuses it, and the agent is told \
--reason. A question nobody answers within approvalTimeoutSecs (config.json, default \
600) is denied saying so. A task that asks nothing (not running, or running without a \
question, or already answered) is refused with exit 3.";

#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct ApproveArgs {
    /// The task whose agent asks (an id, or a unique prefix of at least 4 characters).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Print the question answered as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct DenyArgs {
    /// The task whose agent asks (an id, or a unique prefix of at least 4 characters).
    #[arg(value_name = "ID")]
    pub id: String,
    /// Why: what the agent is told (default: that a person denied it).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Print the question answered as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub use crate::approval::DEFAULT_DENIAL;

pub fn run_approve(args: ApproveArgs) -> anyhow::Result<i32> {
    answer(&args.root, &args.id, Decision::Allow, None, args.json)
}

pub fn run_deny(args: DenyArgs) -> anyhow::Result<i32> {
    let reason = args
        .reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_DENIAL.to_string());
    answer(
        &args.root,
        &args.id,
        Decision::Deny,
        Some(reason),
        args.json,
    )
}

fn answer(
    root: &RootArg,
    given: &str,
    decision: Decision,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<i32> {
    let client = root.client()?;
    let id = super::target::id_on(client.root(), given)?;
    let by = match decision {
        Decision::Allow => "conductor approve",
        Decision::Deny => "conductor deny",
    };
    let q = approval::answer(client.root(), &id, decision, reason.clone(), by)?;
    if json {
        super::output::emit_json(&serde_json::json!({
            "id": id,
            "decision": decision,
            "reason": reason,
            "question": q,
        }))?;
    } else {
        let verb = match decision {
            Decision::Allow => "approved",
            Decision::Deny => "denied",
        };
        super::output::emit(&format!("{verb} task {id}'s {}\n", q.summary()))?;
    }
    Ok(exit::OK)
}
