//! The refused tool calls an agent reports, read into the result's `denials`: Claude
//! Code's `permission_denials` in its final event (with the `summary` and `reason` the
//! stream renderer adds, [`crate::agent::stream`]); the same list the renderer makes of
//! Gemini CLI's calls denied by its policy; Codex items that say `declined`. Codex
//! `exec` asks no one (`approval never`): a command its sandbox blocks just fails, which
//! is no refusal it reports.

use serde_json::{Map, Value};

use crate::protocol::denial::INPUT_CHARS;
use crate::protocol::Denial;

/// Keys whose value says what a tool was used on, most telling first.
const INPUT_KEYS: [&str; 8] = [
    "file_path",
    "notebook_path",
    "absolute_path",
    "path",
    "command",
    "pattern",
    "url",
    "query",
];

/// The `permission_denials` of a final event: `[{tool_name, tool_use_id, tool_input,
/// summary?, reason?}]`.
pub(super) fn from_final_event(event: &Map<String, Value>) -> Vec<Denial> {
    let Some(list) = event.get("permission_denials").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(Value::as_object)
        .map(|d| {
            let text = |k: &str| d.get(k).and_then(Value::as_str).map(str::trim);
            let input = text("summary")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .or_else(|| d.get("tool_input").map(summary))
                .unwrap_or_default();
            Denial {
                tool: text("tool_name").unwrap_or("?").to_string(),
                input: clip(&input),
                reason: text("reason").filter(|r| !r.is_empty()).map(clean_reason),
            }
        })
        .collect()
}

/// Codex's `item.completed` events whose command or file change was `declined`.
pub(super) fn from_codex_events(events: &[Map<String, Value>]) -> Vec<Denial> {
    events
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("item.completed"))
        .filter_map(|e| e.get("item").and_then(Value::as_object))
        .filter(|item| item.get("status").and_then(Value::as_str) == Some("declined"))
        .map(|item| {
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("?");
            let input = match kind {
                "command_execution" => item.get("command").and_then(Value::as_str),
                _ => item
                    .get("changes")
                    .and_then(Value::as_array)
                    .and_then(|c| c.first())
                    .and_then(|c| c.get("path"))
                    .and_then(Value::as_str),
            };
            Denial {
                tool: kind.to_string(),
                input: clip(input.unwrap_or("")),
                reason: None,
            }
        })
        .collect()
}

/// A tool input in short: its path or command, else compact JSON.
fn summary(input: &Value) -> String {
    let Some(obj) = input.as_object() else {
        return input.to_string();
    };
    INPUT_KEYS
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
        .map(|s| s.lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_else(|| input.to_string())
}

/// Claude wraps a refused call's error in `<tool_use_error>…</tool_use_error>`, and may
/// go on with advice to the model ("IMPORTANT: You *may* attempt …"): the reason is what
/// comes before, without its closing full stop.
fn clean_reason(r: &str) -> String {
    let r = r.trim();
    let r = r.strip_prefix("<tool_use_error>").unwrap_or(r);
    let r = r.strip_suffix("</tool_use_error>").unwrap_or(r);
    let r = r.split(" IMPORTANT:").next().unwrap_or(r).trim();
    clip(r.strip_suffix('.').unwrap_or(r))
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(INPUT_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn claudes_permission_denials_are_read_with_what_the_renderer_added() {
        let event = obj(json!({"type": "result", "permission_denials": [
            {"tool_name": "Write", "tool_use_id": "t1",
             "tool_input": {"file_path": "/r/src/x.rs", "content": "…"},
             "summary": "src/x.rs",
             "reason": "<tool_use_error>Claude requested permissions to write to /r/src/x.rs, which is a sensitive file.</tool_use_error>"},
            {"tool_name": "Bash", "tool_use_id": "t2",
             "tool_input": {"command": "rm -rf build\nls", "description": "clean"},
             "reason": "Permission to use Bash has been denied. IMPORTANT: You *may* try"},
            {"tool_name": "WebFetch", "tool_input": {"x": 1}},
        ]}));
        let d = from_final_event(&event);
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].label(), "Write(src/x.rs)");
        assert_eq!(
            d[0].reason.as_deref(),
            Some("Claude requested permissions to write to /r/src/x.rs, which is a sensitive file")
        );
        assert_eq!(d[1].label(), "Bash(rm -rf build)");
        assert_eq!(
            d[1].reason.as_deref(),
            Some("Permission to use Bash has been denied")
        );
        assert_eq!(d[2].label(), "WebFetch({\"x\":1})");
        assert!(from_final_event(&obj(json!({"type": "result"}))).is_empty());
        assert!(from_final_event(&obj(json!({"permission_denials": []}))).is_empty());
    }

    #[test]
    fn a_long_input_is_clipped() {
        let long = "x".repeat(500);
        let event = obj(json!({"permission_denials": [
            {"tool_name": "Bash", "tool_input": {"command": long}}]}));
        let d = from_final_event(&event);
        assert_eq!(d[0].input.chars().count(), INPUT_CHARS + 1);
        assert!(d[0].input.ends_with('…'));
    }

    #[test]
    fn codex_declined_items_are_denials_and_failed_ones_are_not() {
        let events: Vec<Map<String, Value>> = [
            json!({"type": "item.completed", "item": {"type": "command_execution",
                   "command": "rm -rf /", "status": "declined"}}),
            json!({"type": "item.completed", "item": {"type": "file_change",
                   "changes": [{"path": "a.txt", "kind": "add"}], "status": "declined"}}),
            json!({"type": "item.completed", "item": {"type": "command_execution",
                   "command": "false", "status": "failed", "exit_code": 1}}),
        ]
        .into_iter()
        .map(obj)
        .collect();
        let d = from_codex_events(&events);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].label(), "command_execution(rm -rf /)");
        assert_eq!(d[1].label(), "file_change(a.txt)");
    }
}
