//! Doctor checks of the programs workers need: tmux (to launch them) and the agent.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::agent::AgentCommand;

use super::check::Check;

pub(super) fn check_tmux() -> Check {
    match std::process::Command::new("tmux")
        .arg("-V")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Check::ok(
            "tmux",
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ),
        Ok(out) => Check::warn(
            "tmux",
            format!(
                "`tmux -V` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            "reinstall tmux; it is needed only to launch workers in tmux sessions",
        ),
        Err(e) => Check::warn(
            "tmux",
            format!("tmux not found ({e})"),
            "install tmux (e.g. `apt install tmux`); it is needed only to launch workers in tmux sessions",
        ),
    }
}

pub(super) fn check_agent(line: &str) -> Check {
    let cmd = match AgentCommand::parse(line) {
        Ok(c) => c,
        Err(e) => {
            return Check::fail(
                "agent",
                e.to_string(),
                "give workers an agent command line whose quotes pair up",
            )
        }
    };
    let found = cmd.resolve().filter(|p| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    match found {
        Some(p) => Check::ok(
            "agent",
            format!("`{cmd}`: {} found at {}", cmd.program, p.display()),
        ),
        None => match near_preset(line) {
            // `--agent claud`: a preset name mistyped, not a program to install.
            Some(p) => Check::fail(
                "agent",
                format!("`{cmd}` is neither a preset nor an executable on PATH"),
                format!("did you mean the preset {p}? (`--agent {p}`)"),
            ),
            None => Check::fail(
                "agent",
                format!("`{cmd}`: {} is not an executable on PATH", cmd.program),
                format!(
                    "install {} or give workers another agent command",
                    cmd.program
                ),
            ),
        },
    }
}

/// The preset a one-word agent line is a near miss of (two edits at most).
fn near_preset(line: &str) -> Option<&'static str> {
    let word = line.trim();
    if word.is_empty() || word.contains(char::is_whitespace) || word.contains('/') {
        return None;
    }
    ["claude", "codex", "gemini", "command"]
        .into_iter()
        .map(|p| (crate::text::edit_distance(word, p), p))
        .filter(|(d, _)| (1..=2).contains(d))
        .min()
        .map(|(_, p)| p)
}
