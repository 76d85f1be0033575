//! Reading a task id out of a file that is not a valid task, so its rejection can
//! still be answered under the id its client waits for.
//!
//! Original clients poll `result.json` for their id: a task refused without a result
//! leaves them waiting forever. So whenever an id is plainly readable — in a file cut
//! short, one with a byte-order mark, one with a syntax error after the id, or the head
//! of one too large to read whole — it is found here by a small lexical scan for the
//! top-level `"id"` key.

use serde_json::Value;

use super::task_id::TaskId;

/// How much of a too-large file is scanned for its id.
pub const PREFIX_SCANNED: usize = 64 * 1024;

/// The task id in `bytes`, if one can be read and is valid.
pub fn task_id(bytes: &[u8]) -> Option<TaskId> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let id = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => serde_json::from_value(v.get("id")?.clone()).ok()?,
        Err(_) => scan_top_level_id(bytes)?,
    };
    id.validate().ok()?;
    Some(id)
}

/// The value of the first `"id"` key of the outermost object, read lexically.
fn scan_top_level_id(b: &[u8]) -> Option<TaskId> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(b, i)?;
                if depth == 1 && &b[i + 1..end] == b"id" {
                    let colon = skip_ws(b, end + 1);
                    if b.get(colon) == Some(&b':') {
                        return id_value(b, skip_ws(b, colon + 1));
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index of the quote closing the string that opens at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j),
            _ => j += 1,
        }
    }
    None
}

fn skip_ws(b: &[u8], mut j: usize) -> usize {
    while b.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
        j += 1;
    }
    j
}

/// A string or a whole number at `j`, as a [`TaskId`] keeps it.
fn id_value(b: &[u8], j: usize) -> Option<TaskId> {
    let end = match b.get(j)? {
        b'"' => string_end(b, j)? + 1,
        c if c.is_ascii_digit() => j + b[j..].iter().take_while(|c| c.is_ascii_digit()).count(),
        _ => return None,
    };
    serde_json::from_slice(&b[j..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(bytes: &[u8]) -> Option<String> {
        task_id(bytes).map(|i| i.to_string())
    }

    #[test]
    fn ids_are_found_in_what_does_not_parse() {
        assert_eq!(id(br#"{"id":"a1","prompt":"x"}"#).as_deref(), Some("a1"));
        assert_eq!(
            id(b"\xEF\xBB\xBF{\"id\":\"bom\",\"prompt\":\"x\"}").as_deref(),
            Some("bom")
        );
        assert_eq!(
            id(br#"{"id": "cut", "prompt": "half a prom"#).as_deref(),
            Some("cut")
        );
        assert_eq!(
            id(br#"{"id":1705234567890,"prompt":"x",,}"#).as_deref(),
            Some("1705234567890")
        );
        assert_eq!(
            id(br#"{"prompt":"has \"id\": inside","id":"late","#).as_deref(),
            Some("late")
        );
    }

    #[test]
    fn nested_or_invalid_ids_are_not_taken() {
        assert_eq!(id(br#"{"context":{"id":"inner"},"prompt":"x""#), None);
        assert_eq!(id(br#"{"id":"../escape","prompt":"x""#), None);
        assert_eq!(id(br#"{"id":null"#), None);
        assert_eq!(id(b"not json at all"), None);
        assert_eq!(id(br#"{"id":"unterminated"#), None);
    }

    #[test]
    fn a_numeric_id_stays_a_number() {
        let t = task_id(br#"{"id": 42, "prompt": "#).unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), "42");
    }
}
