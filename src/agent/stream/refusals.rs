//! What the renderer remembers of refused tool calls, to add to the final event: Claude
//! Code's `permission_denials` gain each call's `summary` (its input in short) and
//! `reason` (the error the model was told); Gemini CLI, which lists none, gets a
//! `permission_denials` of the same shape from its tool calls denied by policy
//! (`tool_result` with `error.type` `policy_violation`). [`crate::preset`] reads them.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

/// Gemini CLI's error type of a tool call its policy (or a hook) refused.
const GEMINI_DENIED: &str = "policy_violation";
/// Most tool calls remembered (ids and summaries), so a long session stays bounded.
const MAX_REMEMBERED: usize = 10_000;

#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// Tool call id → the first line of the error it ended with (Claude).
    errors: HashMap<String, String>,
    /// Gemini tool call id → (tool name, input summary).
    calls: HashMap<String, (String, String)>,
    /// Gemini's refused calls, in Claude's `permission_denials` shape.
    gemini: Vec<Value>,
}

impl Refusals {
    /// A Claude tool result that was an error.
    pub(super) fn claude_error(&mut self, tool_use_id: &str, first_line: &str) {
        if self.errors.len() < MAX_REMEMBERED {
            self.errors
                .insert(tool_use_id.to_string(), first_line.to_string());
        }
    }

    /// A Gemini tool call, `summary` its input in short.
    pub(super) fn gemini_call(&mut self, id: &str, name: &str, summary: String) {
        if self.calls.len() < MAX_REMEMBERED {
            self.calls
                .insert(id.to_string(), (name.to_string(), summary));
        }
    }

    /// A Gemini tool result: remembered when its policy refused it.
    pub(super) fn gemini_result(&mut self, event: &Map<String, Value>) {
        let error = event.get("error");
        let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str);
        if kind != Some(GEMINI_DENIED) || self.gemini.len() >= MAX_REMEMBERED {
            return;
        }
        let id = event.get("tool_id").and_then(Value::as_str).unwrap_or("");
        let (name, summary) = self.calls.get(id).cloned().unwrap_or_default();
        let reason = error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .and_then(|m| m.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("")
            .trim();
        self.gemini.push(json!({
            "tool_name": name, "tool_use_id": id, "summary": summary, "reason": reason,
        }));
    }

    /// Claude's final event with its `permission_denials` told in full (`summarize`
    /// gives an input's summary); `None` when it lists none.
    pub(super) fn claude_final(
        &self,
        event: &Map<String, Value>,
        summarize: impl Fn(&Value) -> String,
    ) -> Option<Vec<u8>> {
        let denials = event.get("permission_denials")?.as_array()?;
        if denials.is_empty() {
            return None;
        }
        let told: Vec<Value> = denials
            .iter()
            .map(|d| {
                let mut d = d.clone();
                if let Some(obj) = d.as_object_mut() {
                    let id = obj.get("tool_use_id").and_then(Value::as_str);
                    if let Some(reason) = id.and_then(|id| self.errors.get(id)) {
                        obj.insert("reason".into(), Value::String(reason.clone()));
                    }
                    let summary = obj.get("tool_input").map(&summarize);
                    if let Some(s) = summary {
                        obj.insert("summary".into(), Value::String(s));
                    }
                }
                d
            })
            .collect();
        let mut whole = event.clone();
        whole.insert("permission_denials".into(), Value::Array(told));
        Some(Value::Object(whole).to_string().into_bytes())
    }

    /// Add Gemini's refused calls to its final event as `permission_denials`.
    pub(super) fn gemini_final(&mut self, whole: &mut Map<String, Value>) {
        if !self.gemini.is_empty() {
            let list = std::mem::take(&mut self.gemini);
            whole.insert("permission_denials".into(), Value::Array(list));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::StreamRenderer;
    use serde_json::{json, Value};

    /// Render `events`; the final event as the result reads it.
    fn final_of(events: &[Value]) -> Value {
        let mut r = StreamRenderer::new();
        let mut last = None;
        for e in events {
            let line = e.to_string();
            let mut out = Vec::new();
            if r.render(line.as_bytes(), &mut out) == super::super::LineKind::Result {
                last = Some(r.final_event(line.as_bytes()));
            }
        }
        serde_json::from_slice(&last.expect("a final event")).unwrap()
    }

    #[test]
    fn claudes_denials_gain_the_reason_the_model_was_told_and_a_short_input() {
        let events = [
            json!({"type": "system", "subtype": "init", "session_id": "s", "cwd": "/r"}),
            json!({"type": "assistant", "message": {"content": [{"type": "tool_use",
                   "id": "tu1", "name": "Write", "input": {"file_path": "/r/x.rs"}}]}}),
            json!({"type": "user", "message": {"content": [{"type": "tool_result",
                   "tool_use_id": "tu1", "is_error": true,
                   "content": "Claude requested permissions to edit /r/x.rs\nmore"}]}}),
            json!({"type": "result", "subtype": "success", "is_error": false, "result": "ok",
                   "permission_denials": [{"tool_name": "Write", "tool_use_id": "tu1",
                                           "tool_input": {"file_path": "/r/x.rs"}}]}),
        ];
        let last = final_of(&events);
        let d = &last["permission_denials"][0];
        assert_eq!(d["summary"], "x.rs");
        assert_eq!(d["reason"], "Claude requested permissions to edit /r/x.rs");
        assert_eq!(last["result"], "ok");
        // With no denials the final event is the line itself.
        let plain = json!({"type": "result", "subtype": "success", "result": "ok",
                           "permission_denials": []});
        assert_eq!(final_of(std::slice::from_ref(&plain)), plain);
    }

    #[test]
    fn geminis_calls_denied_by_policy_become_its_denials() {
        let events = [
            json!({"type": "init", "session_id": "g1", "model": "m"}),
            json!({"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "c1",
                   "parameters": {"command": "rm -rf x"}}),
            json!({"type": "tool_result", "tool_id": "c1", "status": "error",
                   "error": {"type": "policy_violation",
                             "message": "Tool execution denied by policy."}}),
            json!({"type": "tool_use", "tool_name": "read_file", "tool_id": "c2",
                   "parameters": {"file_path": "a"}}),
            json!({"type": "tool_result", "tool_id": "c2", "status": "error",
                   "error": {"type": "file_not_found", "message": "no such file"}}),
            json!({"type": "result", "status": "success", "stats": {}}),
        ];
        let last = final_of(&events);
        let list = last["permission_denials"].as_array().unwrap();
        assert_eq!(list.len(), 1, "{last}");
        assert_eq!(list[0]["tool_name"], "run_shell_command");
        assert_eq!(list[0]["summary"], "rm -rf x");
        assert_eq!(list[0]["reason"], "Tool execution denied by policy.");
    }
}
