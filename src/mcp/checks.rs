//! Checks of a tool call's arguments that its input schema cannot express, made before anything is written: each failure a tool error naming the field, rather than a task rejected later by its worker.

use std::path::Path;

use crate::preset::{self, Preset, GEMINI_APPROVAL_MODES};
use crate::worktree::Repo;

/// The Claude Code permission modes, as a message lists them.
const CLAUDE_MODES: &str = "plan, default, manual, dontAsk, acceptEdits, auto, bypassPermissions";

/// A prompt (the argument `field`) must say something: not empty, not only whitespace.
pub fn prompt(field: &str, text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(format!(
            "`{field}` is blank (only whitespace): say what the agent should do"
        ));
    }
    Ok(())
}

/// `permissionMode` must be a mode the task's preset knows (`agent`; without one, a
/// Claude Code permission mode or a Gemini CLI approval mode).
pub fn permission_mode(agent: Option<&str>, mode: &str) -> Result<(), String> {
    let claude = preset::claude_mode_rank(mode).is_some();
    let gemini = preset::gemini_mode_rank(mode).is_some();
    let gemini_modes = GEMINI_APPROVAL_MODES.join(", ");
    let (known, modes) = match agent.and_then(|a| a.parse::<Preset>().ok()) {
        Some(Preset::Claude) => (claude, format!("the claude preset's: {CLAUDE_MODES}")),
        Some(Preset::Gemini) => (gemini, format!("the gemini preset's: {gemini_modes}")),
        _ => (
            claude || gemini,
            format!("Claude Code's {CLAUDE_MODES}; Gemini CLI's {gemini_modes}"),
        ),
    };
    if known {
        Ok(())
    } else {
        Err(format!(
            "`permissionMode`: {mode:?} is not a permission mode ({modes})"
        ))
    }
}

/// With `worktree: true`, `dir` must be in a git repository (the worktree is made
/// from it). Runs git: call it off the async thread.
pub fn worktree_dir(dir: &Path) -> Result<(), String> {
    Repo::of(dir).map(|_| ()).map_err(|e| {
        format!("`dir`: `worktree: true` needs a directory in a git repository with a working tree: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_prompts_and_unknown_modes_are_named() {
        assert!(prompt("prompt", "do it").is_ok());
        assert!(prompt("prompt", " \n\t")
            .unwrap_err()
            .contains("`prompt` is blank"));
        assert!(permission_mode(None, "plan").is_ok());
        assert!(permission_mode(None, "auto_edit").is_ok());
        assert!(permission_mode(Some("claude"), "auto_edit").is_err());
        let e = permission_mode(None, "godmode").unwrap_err();
        assert!(
            e.contains("`permissionMode`") && e.contains("godmode"),
            "{e}"
        );
    }
}
