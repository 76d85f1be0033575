//! Codex's `--json` events (`thread.started`, `turn.*`, `item.*`) as log lines.

use serde_json::{Map, Value};

use super::lines::{clip, first_line, push_line, str_field, text_lines, tool_result_summary};

/// One Codex event of the kinds [`super::StreamRenderer::render`] hands here.
pub(super) fn event(kind: &str, event: &Map<String, Value>, out: &mut Vec<u8>) {
    match kind {
        "thread.started" => push_line(
            out,
            &format!("· session {}", str_field(event, "thread_id").unwrap_or("?")),
        ),
        "turn.started" => {}
        "item.started" | "item.updated" | "item.completed" => {
            if let Some(item) = event.get("item").and_then(Value::as_object) {
                item_event(kind, item, out);
            }
        }
        "turn.completed" => {
            let usage = event.get("usage");
            let n = |k: &str| {
                usage
                    .and_then(|u| u.get(k))
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            };
            push_line(
                out,
                &format!(
                    "✓ turn done · {} tokens in · {} out",
                    n("input_tokens"),
                    n("output_tokens")
                ),
            );
        }
        "turn.failed" => {
            let why = event
                .get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(first_line)
                .unwrap_or("");
            push_line(out, &clip(&format!("✗ turn failed: {why}")));
        }
        _ => {}
    }
}

/// One Codex item: a command when it starts and its output when it ends; messages,
/// reasoning, file changes, tool calls and errors when they complete. An item type not
/// known here is named (`[type]`), never dropped.
fn item_event(event: &str, item: &Map<String, Value>, out: &mut Vec<u8>) {
    let kind = str_field(item, "type").unwrap_or("?");
    let completed = event == "item.completed";
    match (kind, event) {
        ("command_execution", "item.started") => {
            let cmd = str_field(item, "command").map(first_line).unwrap_or("");
            push_line(out, &clip(&format!("› exec {cmd}")));
        }
        ("command_execution", "item.completed") => {
            let text = str_field(item, "aggregated_output").unwrap_or("");
            let code = item.get("exit_code").and_then(Value::as_i64);
            let failed = code.is_some_and(|c| c != 0);
            let mut line = tool_result_summary(text, failed);
            if failed {
                line = line.replacen(
                    "error: ",
                    &format!("error: exit {} ", code.unwrap_or(-1)),
                    1,
                );
            }
            push_line(out, &clip(line.trim_end()));
        }
        (_, "item.started" | "item.updated") => {}
        ("agent_message", _) => text_lines(str_field(item, "text").unwrap_or(""), "", out),
        ("reasoning", _) => {
            let first = first_line(str_field(item, "text").unwrap_or(""));
            if !first.is_empty() {
                push_line(out, &clip(&format!("… {first}")));
            }
        }
        ("file_change", _) => {
            let changes = item.get("changes").and_then(Value::as_array);
            for c in changes.into_iter().flatten() {
                let path = c.get("path").and_then(Value::as_str).unwrap_or("?");
                let how = c.get("kind").and_then(Value::as_str).unwrap_or("change");
                push_line(out, &clip(&format!("› {how} {path}")));
            }
        }
        ("mcp_tool_call", _) => {
            let server = str_field(item, "server").unwrap_or("?");
            let tool = str_field(item, "tool").unwrap_or("?");
            let args = item
                .get("arguments")
                .map(Value::to_string)
                .unwrap_or_default();
            push_line(out, &clip(&format!("› {server}.{tool} {args}")));
        }
        ("web_search", _) => {
            let q = str_field(item, "query").unwrap_or("");
            push_line(out, &clip(&format!("› web_search {q}")));
        }
        ("error", _) => {
            let why = str_field(item, "message").map(first_line).unwrap_or("");
            push_line(out, &clip(&format!("! {why}")));
        }
        (other, _) if completed => push_line(out, &format!("[{other}]")),
        _ => {}
    }
}
