//! Line helpers the stream renderers share (Claude Code's here in `stream.rs`, Codex's in
//! `codex.rs`): summaries, clipping, and writing one rendered line.

use serde_json::{Map, Value};

/// Longest summary of a tool use or a tool result, in characters.
pub(super) const SUMMARY_CHARS: usize = 160;

/// `‹ first line (+N lines)`, or `‹ error: first line` for a failed tool.
pub(super) fn tool_result_summary(text: &str, failed: bool) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let first = lines.first().map(|l| l.trim()).unwrap_or("");
    let more = match lines.len() {
        0 | 1 => String::new(),
        n => format!(" (+{} lines)", n - 1),
    };
    match (failed, first.is_empty()) {
        (true, _) => format!("  ‹ error: {first}{more}"),
        (false, true) => "  ‹ (no output)".to_string(),
        (false, false) => format!("  ‹ {first}{more}"),
    }
}

pub(super) fn str_field<'m>(m: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    m.get(key).and_then(Value::as_str)
}

/// Every line of `text`, trailing blank lines left out.
pub(super) fn text_lines(text: &str, prefix: &str, out: &mut Vec<u8>) {
    for line in text.trim_end().lines() {
        push_line(out, &format!("{prefix}{}", line.trim_end()));
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// At most [`SUMMARY_CHARS`] characters, `…` marking a cut.
pub(super) fn clip(s: &str) -> String {
    match s.char_indices().nth(SUMMARY_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// One rendered line; control characters (a tool's colour codes, a stray `\r`) are left
/// out, so what a terminal shows is what the line says.
pub(super) fn push_line(out: &mut Vec<u8>, line: &str) {
    if line.chars().any(|c| c.is_control() && c != '\t') {
        out.extend_from_slice(crate::text::without_escapes(line).as_bytes());
    } else {
        out.extend_from_slice(line.as_bytes());
    }
    out.push(b'\n');
}
