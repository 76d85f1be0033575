//! A tool call the agent was refused (`denials` in a result): Claude Code's
//! `permission_denials`, Gemini CLI's tool calls denied by its policy, Codex's declined
//! items. A task whose agent was refused anything still succeeds, with the refusals
//! shown as a warning in every view; a worktree task refused and left with no change
//! fails, its error naming the first refusal (docs/ARCHITECTURE.md, "Refusals").

use serde::{Deserialize, Serialize};

/// Longest `input` summary kept, in characters.
pub const INPUT_CHARS: usize = 160;

/// One refused tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    /// The tool's name as the agent calls it (`Write`, `Bash`, `write_file`).
    pub tool: String,
    /// What it was asked to do, in short: the path, the command (paths relative to the
    /// task's directory where the stream said which that is).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub input: String,
    /// Why, as the agent told the model (the refused call's error, first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Denial {
    /// `Write(src/x.rs)`, or `Write` with no input.
    pub fn label(&self) -> String {
        if self.input.is_empty() {
            self.tool.clone()
        } else {
            format!("{}({})", self.tool, self.input)
        }
    }

    /// `Write(src/x.rs): why`, the reason when known.
    pub fn describe(&self) -> String {
        match &self.reason {
            Some(r) if !r.is_empty() => format!("{}: {r}", self.label()),
            _ => self.label(),
        }
    }
}

/// The warning every view shows of a result's refusals: `refused 2 tool calls: Bash(rm
/// x), Write(y)`; `None` when there were none.
pub fn warning(denials: &[Denial]) -> Option<String> {
    let first = denials.first()?;
    Some(match denials.len() {
        1 => format!("the agent was refused 1 tool call: {}", first.describe()),
        n => {
            let labels: Vec<String> = denials.iter().take(3).map(Denial::label).collect();
            let more = if n > 3 { ", …" } else { "" };
            format!(
                "the agent was refused {n} tool calls: {}{more}",
                labels.join(", ")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(tool: &str, input: &str, reason: Option<&str>) -> Denial {
        Denial {
            tool: tool.into(),
            input: input.into(),
            reason: reason.map(String::from),
        }
    }

    #[test]
    fn a_denial_reads_as_the_call_and_its_reason() {
        let one = d("Write", "src/x.rs", Some("a sensitive file"));
        assert_eq!(one.label(), "Write(src/x.rs)");
        assert_eq!(one.describe(), "Write(src/x.rs): a sensitive file");
        assert_eq!(d("WebFetch", "", None).describe(), "WebFetch");
        assert_eq!(warning(&[]), None);
        assert_eq!(
            warning(std::slice::from_ref(&one)).unwrap(),
            "the agent was refused 1 tool call: Write(src/x.rs): a sensitive file"
        );
        let many: Vec<Denial> = (0..5).map(|i| d("Bash", &format!("c{i}"), None)).collect();
        assert_eq!(
            warning(&many).unwrap(),
            "the agent was refused 5 tool calls: Bash(c0), Bash(c1), Bash(c2), …"
        );
    }

    #[test]
    fn denials_are_camel_case_and_skip_what_is_empty() {
        let json = serde_json::to_value(d("Bash", "", None)).unwrap();
        assert_eq!(json, serde_json::json!({"tool": "Bash"}));
    }
}
