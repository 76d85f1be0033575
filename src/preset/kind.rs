//! `Preset`: which kind of agent a worker runs, and its name (parsed and shown).

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Which kind of agent a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// Claude Code in print mode streaming its events (`stream-json`): the live log
    /// shows its messages and tool uses as they come; the answer, session id, cost and
    /// turns are lifted into the result from the final event; tasks with `resume`
    /// continue a session.
    Claude,
    /// OpenAI Codex, non-interactive (`codex exec --json`), prompt on stdin: its event
    /// stream shown readable in the live log; the last agent message is the answer, the
    /// thread id, and tokens are lifted into the result.
    Codex,
    /// Gemini CLI, non-interactive (prompt on stdin) streaming its events
    /// (`--output-format stream-json`): text, tool calls and results shown in the live
    /// log; the answer (its text after its last tool call), the session id and tokens
    /// lifted into the result.
    Gemini,
    /// Any command; its stdout is the output as is.
    #[default]
    Command,
}

impl FromStr for Preset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Preset, Error> {
        match s {
            "claude" => Ok(Preset::Claude),
            "codex" => Ok(Preset::Codex),
            "gemini" => Ok(Preset::Gemini),
            "command" => Ok(Preset::Command),
            other => Err(Error::UnknownPreset {
                name: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Preset::Claude => "claude",
            Preset::Codex => "codex",
            Preset::Gemini => "gemini",
            Preset::Command => "command",
        })
    }
}
