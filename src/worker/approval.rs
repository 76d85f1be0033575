//! A task's approvals on the worker's side: whether its claude agent asks a person instead of being refused, and the permission tool that asks.
//!
//! Claude Code in print mode asks its `--permission-prompt-tool` (an MCP tool) about a
//! tool call its permission rules neither allow nor deny. The worker gives it
//! `conductor approval-mcp` (served over stdio, one tool, `ask`) through `--mcp-config`;
//! that tool puts the question in the slot and waits for `conductor approve|deny` (see
//! [`crate::approval`]). Codex and Gemini CLI offer no such hook in their headless
//! modes: their tasks run as their sandbox or approval mode says (docs/ARCHITECTURE.md,
//! "Approvals").

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::json;

use super::slot_server::Shared;
use crate::agent::AgentCommand;
use crate::config::Config;
use crate::layout::WorkerPaths;
use crate::preset::{Preset, CLAUDE_ALLOWED_TOOLS};
use crate::protocol::TaskId;

/// The MCP server's name in the agent's `--mcp-config`.
pub const SERVER_NAME: &str = "conductor_approval";
/// Its one tool, as Claude Code names it (`mcp__<server>__<tool>`).
pub const PROMPT_TOOL: &str = "mcp__conductor_approval__ask";
/// The hidden `conductor` subcommand that serves it.
pub const SUBCOMMAND: &str = "approval-mcp";

/// Claude Code's longest per-call MCP timeout (ms): the question's own deadline
/// ([`Config::approval_timeout`]) decides, never the agent's patience.
const CALL_TIMEOUT_MS: u64 = 2_147_483_647;

/// Whether an agent run as `args` under `preset` asks a person: `approvals` in
/// config.json when set, else on exactly when the claude preset's worker pre-approves
/// fewer tools than the preset does by default ([`restricted`]).
pub fn wanted(config: &Config, preset: Preset, args: &[String]) -> bool {
    if preset != Preset::Claude || option_values(args, &["--permission-prompt-tool"]).is_some() {
        return false;
    }
    config.approvals.unwrap_or_else(|| restricted(args))
}

/// The command line pre-approves fewer tools than [`CLAUDE_ALLOWED_TOOLS`] in a mode
/// where Claude Code asks about the rest (not `dontAsk`, which refuses them, nor
/// `bypassPermissions`, which asks nothing).
pub fn restricted(args: &[String]) -> bool {
    let mode = option_values(args, &["--permission-mode"]).and_then(|v| v.first().cloned());
    if matches!(mode.as_deref(), Some("dontAsk" | "bypassPermissions")) {
        return false;
    }
    let allowed: Vec<String> = option_values(args, &["--allowedTools", "--allowed-tools"])
        .unwrap_or_default()
        .iter()
        .flat_map(|v| v.split([',', ' ']))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    CLAUDE_ALLOWED_TOOLS
        .split(',')
        .any(|t| !allowed.iter().any(|a| a == t))
}

/// The values of option `names` (`--opt a b`, `--opt=a`), the last given; `None` when
/// absent.
fn option_values(args: &[String], names: &[&str]) -> Option<Vec<String>> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some((name, value)) = a.split_once('=') {
            if names.contains(&name) {
                found = Some(vec![value.to_string()]);
            }
        } else if names.contains(&a.as_str()) {
            let values: Vec<String> = args[i + 1..]
                .iter()
                .take_while(|v| !v.starts_with('-'))
                .cloned()
                .collect();
            i += values.len();
            found = Some(values);
        }
        i += 1;
    }
    found
}

/// The `conductor` program that serves the permission tool: this process when it is
/// `conductor`, else the `conductor` beside it (`conductor-worker`'s sibling).
fn program() -> Option<PathBuf> {
    static PROGRAM: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            if exe.file_name().is_some_and(|n| n == "conductor") {
                return Some(exe);
            }
            let sibling = exe.with_file_name("conductor");
            sibling.is_file().then_some(sibling)
        })
        .clone()
}

/// `command` with the permission tool added when task `id`'s agent asks a person
/// ([`wanted`]); as it is otherwise.
pub(super) fn arm(
    shared: &Shared,
    paths: &WorkerPaths,
    id: &TaskId,
    preset: Preset,
    mut command: AgentCommand,
) -> AgentCommand {
    if !wanted(&shared.config, preset, &command.args) {
        return command;
    }
    // What an asker killed mid-question left is no question of this task's.
    clear(&paths.dir);
    let Some(program) = program() else {
        tracing::warn!(
            "task {id}: approvals are on, but no `conductor` program was found beside this \
             worker to ask them: its agent is refused what it is not allowed"
        );
        return command;
    };
    let timeout = shared.config.approval_timeout();
    let server = json!({
        "type": "stdio",
        "command": program,
        "args": [
            SUBCOMMAND,
            "--root", shared.opts.root.path(),
            "--slot", paths.slot.to_string(),
            "--task", id.to_string(),
            "--timeout-secs", timeout.as_secs().to_string(),
        ],
        "timeout": CALL_TIMEOUT_MS,
    });
    let config = json!({ "mcpServers": { SERVER_NAME: server } });
    command.args.extend([
        "--mcp-config".to_string(),
        config.to_string(),
        "--permission-prompt-tool".to_string(),
        PROMPT_TOOL.to_string(),
    ]);
    command
}

/// Remove what a task's questions left in slot directory `dir` (an asker killed with
/// its agent leaves its question behind).
pub(super) fn clear(dir: &std::path::Path) {
    let Ok(Some(entries)) = crate::fsio::read_dir_if_exists(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name
            .to_str()
            .is_some_and(crate::protocol::approval::is_approval_file)
        {
            if let Err(e) = crate::fsio::remove_file_if_exists(&e.path()) {
                tracing::warn!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        AgentCommand::parse(line).unwrap().args
    }

    #[test]
    fn approvals_are_on_by_default_only_for_a_narrowed_claude_worker() {
        let none = Config::default();
        let default = args(Preset::Claude.default_command());
        assert!(!wanted(&none, Preset::Claude, &default));
        let narrowed = args(
            &Preset::Claude
                .command_line(Some("Read,Edit"), None)
                .unwrap(),
        );
        assert!(wanted(&none, Preset::Claude, &narrowed));
        let refusing = args(
            &Preset::Claude
                .command_line(Some("Read"), Some("dontAsk"))
                .unwrap(),
        );
        assert!(!wanted(&none, Preset::Claude, &refusing));
        assert!(!wanted(&none, Preset::Codex, &narrowed));
        // config.json decides when it says.
        let on = Config {
            approvals: Some(true),
            ..Config::default()
        };
        assert!(wanted(&on, Preset::Claude, &default));
        let off = Config {
            approvals: Some(false),
            ..Config::default()
        };
        assert!(!wanted(&off, Preset::Claude, &narrowed));
        // A command line with a permission tool of its own keeps it.
        let own = args("claude -p --allowedTools Read --permission-prompt-tool mcp__x__y");
        assert!(!wanted(&on, Preset::Claude, &own));
    }

    #[test]
    fn option_values_read_lists_and_equals_forms() {
        let a = args("claude -p --allowedTools Read Edit --permission-mode=plan");
        assert_eq!(
            option_values(&a, &["--allowedTools"]),
            Some(vec!["Read".to_string(), "Edit".to_string()])
        );
        assert_eq!(
            option_values(&a, &["--permission-mode"]),
            Some(vec!["plan".to_string()])
        );
        assert_eq!(option_values(&a, &["--model"]), None);
    }
}
