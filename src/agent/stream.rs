//! Claude Code's `stream-json` events (one JSON object a line) rendered as readable log lines.
//!
//! The shapes read here: `{"type":"system","subtype":"init","session_id","model","cwd",
//! "tools":[…]}`; `{"type":"assistant","message":{"content":[{"type":"text","text"},
//! {"type":"tool_use","name","input":{…}},{"type":"thinking","thinking"}]}}`;
//! `{"type":"user","message":{"content":[{"type":"tool_result","content","is_error"}]}}`;
//! and the final `{"type":"result","subtype","is_error","result","session_id",
//! "total_cost_usd","num_turns","duration_ms"}` (the object `--output-format json` prints
//! alone). Codex's `--json` events (`thread.started`, `item.*`, `turn.*`) and Gemini
//! CLI's `stream-json` events (`init`, `message` with `delta` pieces of text, `tool_use`,
//! `tool_result`, `error`, and a final `result` with `status` and `stats`) are read too.
//! A line that is not JSON is shown as it is; an event of a type not known here is shown
//! labelled, `· unknown event <type>: <compact json>`.

use serde_json::{Map, Value};

mod codex;
mod lines;
mod refusals;

use lines::{clip, first_line, push_line, str_field, text_lines, tool_result_summary};

/// Renders one event line after another; remembers the session's working directory
/// (from the `init` event) to show paths relative to it.
#[derive(Debug, Default)]
pub struct StreamRenderer {
    cwd: Option<String>,
    /// Gemini: assistant text not yet ended by a newline (it streams in pieces).
    pending: String,
    /// Gemini: the assistant's text since its last tool call: the answer so far.
    answer: String,
    /// Gemini: the session id from its `init` event.
    session: Option<String>,
    /// The final event as the result should read it, when it is not the line itself.
    final_line: Option<Vec<u8>>,
    /// Refused tool calls, told in full in the final event.
    refusals: refusals::Refusals,
}

/// What a line was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// The final `result` event.
    Result,
    /// Any other event, or not an event at all.
    Other,
}

impl StreamRenderer {
    pub fn new() -> StreamRenderer {
        StreamRenderer::default()
    }

    /// Append the readable form of `line` (without its newline) to `out`, each line
    /// ending in `\n`. A line that is not a JSON object with a `type` is appended as
    /// it is; a blank line adds nothing.
    pub fn render(&mut self, line: &[u8], out: &mut Vec<u8>) -> LineKind {
        if line.iter().all(u8::is_ascii_whitespace) {
            return LineKind::Other;
        }
        let event = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(obj)) => obj,
            _ => {
                as_is(line, out);
                return LineKind::Other;
            }
        };
        let Some(kind) = event.get("type").and_then(Value::as_str) else {
            as_is(line, out);
            return LineKind::Other;
        };
        let gemini_text = kind == "message" && str_field(&event, "role") == Some("assistant");
        if !gemini_text {
            self.flush_pending(out);
        }
        match kind {
            "system" => self.system(&event, out),
            "assistant" => self.assistant(&event, out),
            "user" => self.user(&event, out),
            // Gemini's result says `status`; Claude's says `subtype` / `is_error`.
            "result" if event.contains_key("status") && !event.contains_key("subtype") => {
                self.gemini_result(&event, out);
                return LineKind::Result;
            }
            "result" => {
                result(&event, out);
                let told = self.refusals.claude_final(&event, |i| self.tool_input(i));
                self.final_line = told;
                return LineKind::Result;
            }
            // Gemini CLI (`--output-format stream-json`).
            "init" => self.gemini_init(&event, out),
            "message" if gemini_text => {
                let text = str_field(&event, "content").unwrap_or("");
                self.answer.push_str(text);
                self.pending.push_str(text);
                if let Some(end) = self.pending.rfind('\n') {
                    let done: String = self.pending.drain(..=end).collect();
                    text_lines(&done, "", out);
                }
            }
            // The prompt, as the agent read it: the task already shows it.
            "message" if str_field(&event, "role") == Some("user") => {}
            "tool_use" if event.contains_key("tool_name") => self.gemini_tool_use(&event, out),
            "tool_result" if event.contains_key("tool_id") => self.gemini_tool_result(&event, out),
            // Codex (`codex exec --json`).
            "thread.started" | "turn.started" | "turn.completed" | "turn.failed"
            | "item.started" | "item.updated" | "item.completed" => codex::event(kind, &event, out),
            "error" => {
                let why = str_field(&event, "message").map(first_line).unwrap_or("");
                // Gemini says how bad: `warning` or `error`.
                match str_field(&event, "severity") {
                    Some(severity) => push_line(out, &clip(&format!("! {severity}: {why}"))),
                    None => push_line(out, &clip(&format!("! {why}"))),
                }
            }
            other => push_line(
                out,
                &clip(&format!(
                    "· unknown event {other}: {}",
                    Value::Object(event.clone())
                )),
            ),
        }
        LineKind::Other
    }

    /// The stream ended: show what text it left unfinished.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        self.flush_pending(out);
    }

    /// The final event as the result should read it: the line itself, or (Gemini, whose
    /// `result` carries neither) the line with the answer (`response`) and the session id
    /// (`session_id`) added. Call after [`StreamRenderer::render`] said [`LineKind::Result`].
    pub fn final_event(&mut self, line: &[u8]) -> Vec<u8> {
        self.final_line.take().unwrap_or_else(|| line.to_vec())
    }

    fn flush_pending(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            text_lines(&std::mem::take(&mut self.pending), "", out);
        }
    }

    /// Gemini's `init`: the session id (remembered for the result) and the model.
    fn gemini_init(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        self.session = str_field(event, "session_id").map(String::from);
        let mut parts = vec![format!(
            "· session {}",
            self.session.as_deref().unwrap_or("?")
        )];
        if let Some(model) = str_field(event, "model") {
            parts.push(model.to_string());
        }
        push_line(out, &parts.join(" · "));
    }

    /// A Gemini tool call: its name and input in short, remembered in case policy denies it.
    fn gemini_tool_use(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        self.answer.clear();
        let name = str_field(event, "tool_name").unwrap_or("?");
        let what = event
            .get("parameters")
            .map(|i| self.tool_input(i))
            .unwrap_or_default();
        push_line(out, &clip(format!("› {name} {what}").trim_end()));
        let id = str_field(event, "tool_id").unwrap_or("");
        self.refusals.gemini_call(id, name, what);
    }

    /// A Gemini tool call's result, or the error it ended with.
    fn gemini_tool_result(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        self.answer.clear();
        let failed = str_field(event, "status") == Some("error");
        self.refusals.gemini_result(event);
        let text = match (failed, event.get("error")) {
            (true, Some(e)) => str_of(e, "message").to_string(),
            _ => result_text(event.get("output")),
        };
        push_line(out, &clip(&tool_result_summary(&text, failed)));
    }

    /// `✓ done · 2 tool calls · 325 tokens in · 50 out · 0.5s` or `✗ error: why · …`;
    /// the event kept for the result gains the answer and the session id.
    fn gemini_result(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        let failed = str_field(event, "status") == Some("error");
        let head = if failed {
            let why = event
                .get("error")
                .map(|e| first_line(str_of(e, "message")))
                .unwrap_or("");
            if why.is_empty() {
                "✗ error".to_string()
            } else {
                format!("✗ error: {why}")
            }
        } else {
            "✓ done".to_string()
        };
        let mut parts = vec![head];
        let stats = event.get("stats");
        let n = |k: &str| stats.and_then(|s| s.get(k)).and_then(Value::as_u64);
        if let Some(calls) = n("tool_calls").filter(|c| *c > 0) {
            parts.push(format!(
                "{calls} tool call{}",
                if calls == 1 { "" } else { "s" }
            ));
        }
        if let (Some(i), Some(o)) = (n("input_tokens"), n("output_tokens")) {
            parts.push(format!("{i} tokens in · {o} out"));
        }
        if let Some(ms) = n("duration_ms").filter(|ms| *ms > 0) {
            parts.push(format!("{:.1}s", ms as f64 / 1000.0));
        }
        if let Some(s) = &self.session {
            parts.push(format!("session {s}"));
        }
        push_line(out, &clip(&parts.join(" · ")));
        let mut whole = event.clone();
        whole.insert(
            "response".into(),
            Value::String(std::mem::take(&mut self.answer)),
        );
        if let Some(s) = &self.session {
            whole
                .entry("session_id")
                .or_insert_with(|| Value::String(s.clone()));
        }
        self.refusals.gemini_final(&mut whole);
        self.final_line = Some(Value::Object(whole).to_string().into_bytes());
    }

    fn system(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        let subtype = str_field(event, "subtype").unwrap_or("event");
        match subtype {
            "init" => {}
            // The model's API failed and Claude Code will try again.
            "api_retry" => {
                let mut line = String::from("· API error");
                if let Some(code) = event.get("error_status").and_then(Value::as_u64) {
                    line.push_str(&format!(" {code}"));
                }
                if let Some(e) = str_field(event, "error") {
                    line.push_str(&format!(" {e}"));
                }
                let attempt = event.get("attempt").and_then(Value::as_u64).unwrap_or(0);
                line.push_str(&format!(": retry {attempt}"));
                if let Some(max) = event.get("max_retries").and_then(Value::as_u64) {
                    line.push_str(&format!("/{max}"));
                }
                if let Some(ms) = event.get("retry_delay_ms").and_then(Value::as_u64) {
                    line.push_str(&format!(" in {:.1}s", ms as f64 / 1000.0));
                }
                push_line(out, &line);
                return;
            }
            // A tool call nobody approved (the tool result that follows says so too).
            "permission_denied" => {
                let tool = str_field(event, "tool_name").unwrap_or("?");
                let why = str_field(event, "message").map(first_line).unwrap_or("");
                push_line(out, &clip(&format!("✗ permission denied: {tool}: {why}")));
                return;
            }
            other => {
                let line = match str_field(event, "message").map(first_line) {
                    Some(m) if !m.is_empty() => format!("· {other}: {m}"),
                    _ => format!("· {other}"),
                };
                push_line(out, &clip(&line));
                return;
            }
        }
        self.cwd = str_field(event, "cwd").map(String::from);
        let mut parts = vec![format!(
            "· session {}",
            str_field(event, "session_id").unwrap_or("?")
        )];
        if let Some(model) = str_field(event, "model") {
            parts.push(model.to_string());
        }
        if let Some(tools) = event.get("tools").and_then(Value::as_array) {
            parts.push(format!("{} tools", tools.len()));
        }
        if let Some(cwd) = &self.cwd {
            parts.push(format!("in {cwd}"));
        }
        push_line(out, &parts.join(" · "));
    }

    fn assistant(&self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        for block in content(event) {
            match block_type(&block) {
                "text" => text_lines(str_of(&block, "text"), "", out),
                "tool_use" => {
                    let name = str_of(&block, "name");
                    let what = block
                        .get("input")
                        .map(|i| self.tool_input(i))
                        .unwrap_or_default();
                    push_line(out, &clip(format!("› {name} {what}").trim_end()));
                }
                "thinking" => {
                    let first = first_line(str_of(&block, "thinking"));
                    if !first.is_empty() {
                        push_line(out, &clip(&format!("… {first}")));
                    }
                }
                "redacted_thinking" => {}
                other => push_line(out, &format!("[{other}]")),
            }
        }
    }

    fn user(&mut self, event: &Map<String, Value>, out: &mut Vec<u8>) {
        for block in content(event) {
            match block_type(&block) {
                "tool_result" => {
                    let text = result_text(block.get("content"));
                    let failed = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    if let (true, Some(id)) = (failed, block.get("tool_use_id")) {
                        let id = id.as_str().unwrap_or("");
                        self.refusals.claude_error(id, first_line(&text));
                    }
                    push_line(out, &clip(&tool_result_summary(&text, failed)));
                }
                "text" => text_lines(str_of(&block, "text"), "» ", out),
                other => push_line(out, &format!("[{other}]")),
            }
        }
    }

    /// The one argument that says what a tool was used on, paths relative to the
    /// session's directory; else the input as compact JSON.
    fn tool_input(&self, input: &Value) -> String {
        const KEYS: [&str; 12] = [
            "file_path",
            "notebook_path",
            "absolute_path",
            "path",
            "dir_path",
            "command",
            "pattern",
            "url",
            "query",
            "description",
            "prompt",
            "skill",
        ];
        let Some(obj) = input.as_object() else {
            return input.to_string();
        };
        let Some(v) = KEYS
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
        else {
            return if obj.is_empty() {
                String::new()
            } else {
                input.to_string()
            };
        };
        let v = first_line(v);
        match &self.cwd {
            Some(cwd) => v
                .strip_prefix(cwd.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .unwrap_or(v)
                .to_string(),
            None => v.to_string(),
        }
    }
}

/// `✓ done · 3 turns · $0.0123 · 12.3s · session abc` or `✗ error_max_turns: … · …`.
fn result(event: &Map<String, Value>, out: &mut Vec<u8>) {
    let failed = event.get("is_error").and_then(Value::as_bool) == Some(true);
    let head = if failed {
        // Claude Code 2.1 says `"subtype":"success"` after an API error it gave up on;
        // `terminal_reason` names it then.
        let subtype = str_field(event, "subtype")
            .filter(|s| *s != "success")
            .or_else(|| str_field(event, "terminal_reason"))
            .unwrap_or("error");
        match str_field(event, "result").map(first_line) {
            Some(why) if !why.is_empty() => format!("✗ {subtype}: {why}"),
            _ => format!("✗ {subtype}"),
        }
    } else {
        "✓ done".to_string()
    };
    let mut parts = vec![head];
    if let Some(n) = event.get("num_turns").and_then(Value::as_u64) {
        parts.push(format!("{n} turn{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(c) = event
        .get("total_cost_usd")
        .or_else(|| event.get("cost_usd"))
        .and_then(Value::as_f64)
    {
        parts.push(format!("${c:.4}"));
    }
    if let Some(ms) = event.get("duration_ms").and_then(Value::as_u64) {
        parts.push(format!("{:.1}s", ms as f64 / 1000.0));
    }
    if let Some(s) = str_field(event, "session_id") {
        parts.push(format!("session {s}"));
    }
    push_line(out, &clip(&parts.join(" · ")));
}

/// A tool result's content: a string, or blocks of which the text ones count.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| match block_type(b) {
                "text" => Some(str_of(b, "text").to_string()),
                "" => None,
                other => Some(format!("[{other}]")),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

/// The content blocks of an event's message (a plain string counts as one text block).
fn content(event: &Map<String, Value>) -> Vec<Value> {
    match event.get("message").and_then(|m| m.get("content")) {
        Some(Value::Array(blocks)) => blocks.clone(),
        Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn as_is(line: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(line);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::lines::SUMMARY_CHARS;
    use super::*;

    fn render_all(lines: &[&str]) -> (String, Vec<LineKind>) {
        let mut r = StreamRenderer::new();
        let mut out = Vec::new();
        let kinds = lines
            .iter()
            .map(|l| r.render(l.as_bytes(), &mut out))
            .collect();
        (String::from_utf8(out).unwrap(), kinds)
    }

    #[test]
    fn a_session_reads_as_messages_and_tool_uses() {
        let (text, kinds) = render_all(&[
            r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-x","cwd":"/p","tools":["Read","Bash"]}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look.\nTwo lines.\n"},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/p/src/main.rs"}}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}\n// end\n"}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"boom"}],"is_error":true}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"cargo test\n--all"}}]}}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"ok","session_id":"s-1","total_cost_usd":0.0123,"duration_ms":2500}"#,
        ]);
        assert_eq!(
            text,
            "· session s-1 · claude-x · 2 tools · in /p\n\
             Let me look.\nTwo lines.\n\
             › Read src/main.rs\n\
             \x20 ‹ fn main() {} (+1 lines)\n\
             \x20 ‹ error: boom\n\
             › Bash cargo test\n\
             ✓ done · 3 turns · $0.0123 · 2.5s · session s-1\n"
        );
        assert_eq!(kinds.last(), Some(&LineKind::Result));
        assert!(kinds[..5].iter().all(|k| *k == LineKind::Other));
    }

    #[test]
    fn malformed_lines_are_shown_as_they_are() {
        let lines = [
            "not json at all",
            r#"{"type":"assistant","message":"#,
            "[1,2,3]",
            r#"{"no_type":1}"#,
        ];
        let (text, kinds) = render_all(&lines);
        assert_eq!(text, lines.join("\n") + "\n");
        assert!(kinds.iter().all(|k| *k == LineKind::Other));
        assert_eq!(render_all(&["", "  "]).0, "");
    }

    #[test]
    fn unknown_event_types_are_labelled_not_passed_raw() {
        let (text, kinds) = render_all(&[
            r#"{"type":"rate_limit_event", "rate_limit_info": {"status":"allowed","resetsAt":1700000000}}"#,
            r#"{"type":"stream_event","event":{}}"#,
            r#"{"type":"tool_use","id":"no tool_name: not Gemini's"}"#,
        ]);
        assert_eq!(
            text,
            "· unknown event rate_limit_event: {\"rate_limit_info\":{\"resetsAt\":1700000000,\"status\":\"allowed\"},\"type\":\"rate_limit_event\"}\n\
             · unknown event stream_event: {\"event\":{},\"type\":\"stream_event\"}\n\
             · unknown event tool_use: {\"id\":\"no tool_name: not Gemini's\",\"type\":\"tool_use\"}\n"
        );
        assert!(kinds.iter().all(|k| *k == LineKind::Other));
        let long = format!(r#"{{"type":"huge","data":"{}"}}"#, "x".repeat(1000));
        let (text, _) = render_all(&[&long]);
        assert_eq!(text.trim_end().chars().count(), SUMMARY_CHARS + 1);
    }

    #[test]
    fn gemini_events_read_as_messages_tool_calls_and_a_result_with_the_answer() {
        let lines = [
            r#"{"type":"init","timestamp":"t","session_id":"g-1","model":"gemini-2.5-pro"}"#,
            r#"{"type":"message","role":"user","content":"write a file\n"}"#,
            r#"{"type":"message","role":"assistant","content":"Running","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":" it.\nSecond","delta":true}"#,
            r#"{"type":"tool_use","tool_name":"run_shell_command","tool_id":"c1","parameters":{"command":"echo hi > g.txt && ls"}}"#,
            r#"{"type":"tool_result","tool_id":"c1","status":"success","output":"g.txt\nh.txt"}"#,
            r#"{"type":"tool_use","tool_name":"read_file","tool_id":"c2","parameters":{"absolute_path":"/p/x"}}"#,
            r#"{"type":"tool_result","tool_id":"c2","status":"error","error":{"type":"file_not_found","message":"File not found: /p/x"}}"#,
            r#"{"type":"error","severity":"warning","message":"Loop detected"}"#,
            r#"{"type":"message","role":"assistant","content":"All ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"done.","delta":true}"#,
            r#"{"type":"result","status":"success","stats":{"total_tokens":375,"input_tokens":325,"output_tokens":50,"duration_ms":459,"tool_calls":2}}"#,
        ];
        let mut r = StreamRenderer::new();
        let mut out = Vec::new();
        let mut last = None;
        for l in lines {
            if r.render(l.as_bytes(), &mut out) == LineKind::Result {
                last = Some(r.final_event(l.as_bytes()));
            }
        }
        r.finish(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "· session g-1 · gemini-2.5-pro\n\
             Running it.\n\
             Second\n\
             › run_shell_command echo hi > g.txt && ls\n\
             \x20 ‹ g.txt (+1 lines)\n\
             › read_file /p/x\n\
             \x20 ‹ error: File not found: /p/x\n\
             ! warning: Loop detected\n\
             All done.\n\
             ✓ done · 2 tool calls · 325 tokens in · 50 out · 0.5s · session g-1\n"
        );
        let last: Value = serde_json::from_slice(&last.unwrap()).unwrap();
        assert_eq!(last["response"], "All done.");
        assert_eq!(last["session_id"], "g-1");
        assert_eq!(last["stats"]["input_tokens"], 325);

        let (text, kinds) = render_all(&[
            r#"{"type":"message","role":"assistant","content":"half a line","delta":true}"#,
            r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: down]"},"stats":{"input_tokens":0,"output_tokens":0,"duration_ms":0}}"#,
        ]);
        assert_eq!(
            text,
            "half a line\n✗ error: [API Error: down] · 0 tokens in · 0 out\n"
        );
        assert_eq!(kinds.last(), Some(&LineKind::Result));
    }

    #[test]
    fn retries_denials_and_api_errors_say_what_happened() {
        let (text, _) = render_all(&[
            r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":508,"error_status":529,"error":"overloaded"}"#,
            r#"{"type":"system","subtype":"permission_denied","tool_name":"Write","message":"Claude requested permissions to write to /p/a.txt"}"#,
            r#"{"type":"system","subtype":"hook_response","message":"hook said\nmore"}"#,
            r#"{"type":"system","subtype":"compact_boundary"}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","result":"API Error: 529 Overloaded","num_turns":1}"#,
        ]);
        assert_eq!(
            text,
            "· API error 529 overloaded: retry 1/10 in 0.5s\n\
             ✗ permission denied: Write: Claude requested permissions to write to /p/a.txt\n\
             · hook_response: hook said\n\
             · compact_boundary\n\
             ✗ api_error: API Error: 529 Overloaded · 1 turn\n"
        );
    }

    #[test]
    fn codex_events_read_as_messages_commands_and_turns() {
        let (text, kinds) = render_all(&[
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"i0","type":"agent_message","text":"Running."}}"#,
            r#"{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"bash -lc 'ls'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc 'ls'","aggregated_output":"a\nb\n","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"false","aggregated_output":"","exit_code":1}}"#,
            r#"{"type":"item.completed","item":{"id":"i3","type":"file_change","changes":[{"path":"src/a.rs","kind":"update"}]}}"#,
            r#"{"type":"item.completed","item":{"id":"i4","type":"todo_list","items":[]}}"#,
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":50,"output_tokens":20}}"#,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 529"}}"#,
        ]);
        assert_eq!(
            text,
            "· session th-1\n\
             Running.\n\
             › exec bash -lc 'ls'\n\
             \x20 ‹ a (+1 lines)\n\
             \x20 ‹ error: exit 1\n\
             › update src/a.rs\n\
             [todo_list]\n\
             ! Reconnecting... 1/5\n\
             ✓ turn done · 50 tokens in · 20 out\n\
             ✗ turn failed: unexpected status 529\n"
        );
        assert!(kinds.iter().all(|k| *k == LineKind::Other));
    }

    #[test]
    fn an_error_result_says_why_and_long_summaries_are_clipped() {
        let (text, _) = render_all(&[
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":1,"cost_usd":0.5}"#,
        ]);
        assert_eq!(text, "✗ error_max_turns · 1 turn · $0.5000\n");
        let (text, _) = render_all(&[
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"\u001b[31mred\u001b[0m\r"}]}}"#,
        ]);
        assert_eq!(text, "red\n");
        let long = "é".repeat(400);
        let line = format!(
            r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","name":"Grep","input":{{"pattern":"{long}"}}}}]}}}}"#
        );
        let (text, _) = render_all(&[&line]);
        assert_eq!(text.trim_end().chars().count(), SUMMARY_CHARS + 1);
        assert!(text.trim_end().ends_with('…'));
    }
}
