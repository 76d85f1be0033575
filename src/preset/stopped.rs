//! A stopped streaming run's result: readable text and what its events said so far.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::{Map, Value};

use super::kind::Preset;
use crate::protocol::TaskResult;

/// The most of the rendered log a stopped task's `output` holds (its end; the whole log
/// stays beside the task record, named by `outputFile`).
pub const STOPPED_OUTPUT_CAP: u64 = 16 * 1024;

type Event = Map<String, Value>;

impl Preset {
    /// A run stopped by conductor (cancelled, timed out, interrupted) before its agent's
    /// final event: its `output` is the raw event stream so far. Make it what `conductor
    /// logs` shows (the rendered log at `log`, its last [`STOPPED_OUTPUT_CAP`] bytes), or
    /// the agent's last text when that log is empty, and lift the session id, turns and
    /// cost the events carried. A run that printed its final event is left to
    /// [`Preset::interpret`].
    pub fn lift_stopped(self, r: &mut TaskResult, log: &Path) {
        if !self.streams() {
            return;
        }
        let events: Vec<Event> = r
            .output
            .lines()
            .filter_map(|l| match serde_json::from_str::<Value>(l) {
                Ok(Value::Object(o)) if o.contains_key("type") => Some(o),
                _ => None,
            })
            .collect();
        let is_final = |e: &Event| kind(e) == Some("result");
        if events.is_empty() || events.iter().any(is_final) {
            return;
        }
        r.session_id = r.session_id.take().or_else(|| session(&events));
        if self == Preset::Claude {
            let turns = claude_turns(&events);
            r.num_turns = (turns > 0).then_some(turns).or(r.num_turns);
        }
        r.cost_usd = events
            .iter()
            .rev()
            .find_map(|e| e.get("total_cost_usd").and_then(Value::as_f64))
            .or(r.cost_usd);
        let (text, cut) = log_tail(log);
        r.output = if text.trim().is_empty() {
            last_text(self, &events)
        } else {
            text
        };
        if cut {
            r.output_truncated = true;
            r.output_file = Some(log.display().to_string());
        }
    }
}

fn kind(e: &Event) -> Option<&str> {
    e.get("type").and_then(Value::as_str)
}

/// The session the stream named: claude's and gemini's `session_id`, codex's thread.
fn session(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| {
        let id = match kind(e) {
            Some("thread.started") => e.get("thread_id"),
            _ => e.get("session_id"),
        };
        id.and_then(Value::as_str).map(String::from)
    })
}

/// Claude's turns so far: the distinct assistant messages it streamed.
fn claude_turns(events: &[Event]) -> u64 {
    let mut ids: Vec<&str> = events
        .iter()
        .filter(|e| kind(e) == Some("assistant"))
        .filter_map(|e| e.get("message")?.get("id")?.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len() as u64
}

/// The agent's last words: claude's last assistant text, codex's last agent message,
/// gemini's assistant text after its last tool call.
fn last_text(preset: Preset, events: &[Event]) -> String {
    match preset {
        Preset::Claude => events
            .iter()
            .rev()
            .filter(|e| kind(e) == Some("assistant"))
            .find_map(|e| {
                let blocks = e.get("message")?.get("content")?.as_array()?;
                let text: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text")?.as_str())
                    .collect();
                (!text.is_empty()).then(|| text.join("\n"))
            })
            .unwrap_or_default(),
        Preset::Codex => events
            .iter()
            .rev()
            .find_map(|e| {
                let item = e.get("item")?;
                (item.get("type")?.as_str()? == "agent_message")
                    .then(|| item.get("text")?.as_str().map(String::from))?
            })
            .unwrap_or_default(),
        Preset::Gemini => {
            let after_tools = events
                .iter()
                .rposition(|e| kind(e) == Some("tool_use"))
                .map_or(0, |i| i + 1);
            events[after_tools..]
                .iter()
                .filter(|e| {
                    kind(e) == Some("message")
                        && e.get("role").and_then(Value::as_str) == Some("assistant")
                })
                .filter_map(|e| e.get("content").and_then(Value::as_str))
                .collect()
        }
        Preset::Command => String::new(),
    }
}

/// The end of the rendered log (at most [`STOPPED_OUTPUT_CAP`] bytes, from a line
/// start), and whether its start was cut.
fn log_tail(log: &Path) -> (String, bool) {
    let Ok(mut f) = std::fs::File::open(log) else {
        return (String::new(), false);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(STOPPED_OUTPUT_CAP);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_err()
        || f.take(STOPPED_OUTPUT_CAP).read_to_end(&mut bytes).is_err()
    {
        return (String::new(), false);
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = if from > 0 {
        text.split_once('\n').map_or("", |(_, rest)| rest)
    } else {
        &text
    };
    (text.trim_end().to_string(), from > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, TaskId};

    fn stopped(output: &str) -> TaskResult {
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Cancelled, "cancelled");
        r.output = output.into();
        r
    }

    const CLAUDE: &str = concat!(
        r#"{"type":"system","subtype":"init","session_id":"s-1","tools":[]}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Reading first."}]},"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","name":"Read","input":{}}]},"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"x"}]}}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"Now editing."}]},"session_id":"s-1"}"#,
        "\n",
    );

    #[test]
    fn a_stopped_claude_run_reads_as_its_rendered_log_with_its_session_and_turns() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("t.log");
        std::fs::write(
            &log,
            "· session s-1\nReading first.\n› Read\nNow editing.\n",
        )
        .unwrap();
        let mut r = stopped(CLAUDE);
        Preset::Claude.lift_stopped(&mut r, &log);
        assert_eq!(
            r.output,
            "· session s-1\nReading first.\n› Read\nNow editing."
        );
        assert_eq!(r.session_id.as_deref(), Some("s-1"));
        assert_eq!(r.num_turns, Some(2));
        assert!(!r.output_truncated);
        // No log: the agent's last text.
        let mut r = stopped(CLAUDE);
        Preset::Claude.lift_stopped(&mut r, &dir.path().join("none.log"));
        assert_eq!(r.output, "Now editing.");
    }

    #[test]
    fn a_long_log_gives_its_end_from_a_line_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("t.log");
        let body: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &body).unwrap();
        let mut r = stopped(CLAUDE);
        Preset::Claude.lift_stopped(&mut r, &log);
        assert!(r.output.len() as u64 <= STOPPED_OUTPUT_CAP);
        assert!(r.output.starts_with("line "), "{}", &r.output[..20]);
        assert!(r.output.ends_with("line 4999"));
        assert!(r.output_truncated);
        assert_eq!(r.output_file.as_deref(), Some(log.to_str().unwrap()));
    }

    #[test]
    fn codex_and_gemini_stopped_runs_give_their_last_words_and_session() {
        let none = Path::new("/nonexistent/conductor-test.log");
        let codex = concat!(
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"Halfway."}}"#,
            "\n"
        );
        let mut r = stopped(codex);
        Preset::Codex.lift_stopped(&mut r, none);
        assert_eq!(
            (r.output.as_str(), r.session_id.as_deref()),
            ("Halfway.", Some("th-1"))
        );
        let gemini = concat!(
            r#"{"type":"init","session_id":"g-1","model":"m"}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"Looking ","delta":true}"#,
            "\n",
            r#"{"type":"tool_use","tool_name":"ls"}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"Found it","delta":true}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":" now.","delta":true}"#,
            "\n"
        );
        let mut r = stopped(gemini);
        Preset::Gemini.lift_stopped(&mut r, none);
        assert_eq!(
            (r.output.as_str(), r.session_id.as_deref()),
            ("Found it now.", Some("g-1"))
        );
    }

    #[test]
    fn a_run_with_its_final_event_or_no_events_is_left_alone() {
        let none = Path::new("/nonexistent/conductor-test.log");
        let done = r#"{"type":"result","result":"done","session_id":"s"}"#;
        let mut r = stopped(done);
        Preset::Claude.lift_stopped(&mut r, none);
        assert_eq!(r.output, done);
        let mut r = stopped("plain words");
        Preset::Codex.lift_stopped(&mut r, none);
        assert_eq!((r.output.as_str(), r.session_id), ("plain words", None));
        let mut r = stopped(CLAUDE);
        Preset::Command.lift_stopped(&mut r, none);
        assert_eq!(r.output, CLAUDE);
    }
}
