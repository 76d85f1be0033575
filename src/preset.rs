//! Agent presets: sensible command lines per agent, and reading what they print.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::error::Error;
use crate::protocol::TaskResult;

/// Which kind of agent a worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// Claude Code in print mode streaming its events (`stream-json`): the live log
    /// shows its messages and tool uses as they come; the answer, session id, cost and
    /// turns are lifted into the result from the final event; tasks with `resume`
    /// continue a session.
    Claude,
    /// OpenAI Codex, non-interactive, prompt on stdin.
    Codex,
    /// Any command; its stdout is the output as is.
    #[default]
    Command,
}

impl Preset {
    /// The command line used when `--agent` is not given.
    pub fn default_command(self) -> &'static str {
        match self {
            // Claude Code refuses stream-json in print mode without --verbose.
            Preset::Claude => "claude -p --output-format stream-json --verbose",
            Preset::Codex => "codex exec -",
            Preset::Command => "claude -p",
        }
    }

    /// Extra arguments for a task that continues session `id` (`conductor retry --resume`).
    pub fn resume_args(self, id: &str) -> Option<Vec<String>> {
        match self {
            Preset::Claude => Some(vec!["--resume".into(), id.into()]),
            Preset::Codex | Preset::Command => None,
        }
    }

    /// Whether stdout is read as Claude Code's event stream: one JSON object a line,
    /// rendered readable in the live log, the raw lines kept in `tasks/<id>.jsonl`.
    /// (`--output-format json` prints the final event alone, so it reads the same.)
    pub fn streams(self) -> bool {
        self == Preset::Claude
    }

    /// Lift what the agent printed into the result's fields.
    pub fn interpret(self, result: &mut TaskResult) {
        if self == Preset::Claude {
            interpret_claude(result);
        }
    }
}

impl FromStr for Preset {
    type Err = Error;

    fn from_str(s: &str) -> Result<Preset, Error> {
        match s {
            "claude" => Ok(Preset::Claude),
            "codex" => Ok(Preset::Codex),
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
            Preset::Command => "command",
        })
    }
}

/// The worker hands over the final `result` event of a stream (see
/// [`crate::agent::stream`]) or, when there was none, stdout as printed;
/// `claude -p --output-format json` prints that one event alone:
/// `{"type":"result","subtype":"success","is_error":false,"result":"…","session_id":"…",
///   "num_turns":3,"total_cost_usd":0.01,…}` (older versions: `cost_usd`). Anything else
/// is left untouched: the raw stdout stays the output.
fn interpret_claude(r: &mut TaskResult) {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(r.output.trim()) else {
        return;
    };
    if obj.get("type").and_then(Value::as_str) != Some("result") {
        return;
    }
    r.session_id = obj
        .get("session_id")
        .and_then(Value::as_str)
        .map(String::from);
    r.cost_usd = obj
        .get("total_cost_usd")
        .or_else(|| obj.get("cost_usd"))
        .and_then(Value::as_f64);
    r.num_turns = obj.get("num_turns").and_then(Value::as_u64);
    let is_error = obj
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    r.is_error = Some(is_error);
    let text = obj.get("result").and_then(Value::as_str).map(String::from);
    if is_error && r.success {
        let subtype = obj
            .get("subtype")
            .and_then(Value::as_str)
            .unwrap_or("error");
        let detail = text.as_deref().map(first_line).unwrap_or(subtype);
        r.success = false;
        r.outcome = Some(crate::protocol::Outcome::Failure);
        r.error = Some(format!("claude reported an error ({subtype}): {detail}"));
    }
    if let Some(t) = text {
        r.output = t;
    }
}

fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, TaskId};

    fn ok(output: &str) -> TaskResult {
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.output = output.into();
        r
    }

    #[test]
    fn claude_json_is_lifted_into_the_result() {
        let mut r = ok(
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1200,
            "num_turns":3,"result":"All tests pass.","session_id":"abc-123","total_cost_usd":0.0123}"#,
        );
        Preset::Claude.interpret(&mut r);
        assert_eq!(r.output, "All tests pass.");
        assert_eq!(r.session_id.as_deref(), Some("abc-123"));
        assert_eq!(r.cost_usd, Some(0.0123));
        assert_eq!(r.num_turns, Some(3));
        assert_eq!(r.is_error, Some(false));
        assert!(r.success);
    }

    #[test]
    fn claude_error_results_fail_the_task() {
        let mut r = ok(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"cost_usd":0.5,"session_id":"s"}"#,
        );
        Preset::Claude.interpret(&mut r);
        assert!(!r.success);
        assert_eq!(r.cost_usd, Some(0.5));
        assert_eq!(
            r.error.as_deref(),
            Some("claude reported an error (error_max_turns): error_max_turns")
        );
    }

    #[test]
    fn other_output_is_left_alone() {
        for text in ["plain text", "[1,2]", r#"{"type":"assistant"}"#] {
            let mut r = ok(text);
            Preset::Claude.interpret(&mut r);
            assert_eq!(r.output, text);
            assert_eq!(r.session_id, None);
        }
    }
}
