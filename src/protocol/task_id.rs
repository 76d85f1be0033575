//! The task id: a string or a number as the task gave it, checked to name a file safely.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A task id, kept as the task gave it: a string, or a number (the original clients
/// use `Date.now()`). It names files, so only `A-Z a-z 0-9 . _ -` are allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TaskId {
    /// A numeric id, as the original clients write (`Date.now()`).
    Number(u64),
    /// A text id.
    Text(String),
}

impl TaskId {
    /// Check that the id can safely name a file (`results/<id>.json`).
    pub fn validate(&self) -> std::result::Result<(), String> {
        let TaskId::Text(s) = self else {
            return Ok(());
        };
        if s.is_empty() || s.len() > 128 {
            return Err(format!(
                "task id {s:?} must be 1 to 128 characters long (it is {})",
                s.len()
            ));
        }
        if s.starts_with('.') {
            return Err(format!("task id {s:?} must not start with a dot"));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "task id {s:?} contains {c:?}; only A-Z a-z 0-9 . _ - are allowed"
            ));
        }
        Ok(())
    }

    /// A fresh id, unique across processes on this host: `<handle>-<unix ms>-<pid>-<seq>`,
    /// its first six characters a handle that tells it apart ([`id_gen`](super::id_gen)). On a root,
    /// take [`crate::ids::fresh`], which also makes the handle unique there.
    pub fn generate() -> TaskId {
        TaskId::Text(super::id_gen::generate())
    }

    /// Ids for running this task again: `<id>-r1`, `-r2` … (a retry of `x-r1` counts on
    /// from `x`). The caller takes the first one not yet used.
    pub fn retries(&self) -> impl Iterator<Item = TaskId> {
        let text = self.to_string();
        let base = match text.rsplit_once("-r") {
            Some((b, n)) if n.parse::<u32>().is_ok() => b.to_string(),
            _ => text,
        };
        (1u32..).map(move |k| TaskId::Text(format!("{base}-r{k}")))
    }

    /// Parse an id given on a command line: digits become a number, as clients write it.
    pub fn parse(s: &str) -> std::result::Result<TaskId, String> {
        let id = match s.parse::<u64>() {
            Ok(n) if n.to_string() == s => TaskId::Number(n),
            _ => TaskId::Text(s.to_string()),
        };
        id.validate()?;
        Ok(id)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskId::Number(n) => write!(f, "{n}"),
            TaskId::Text(s) => f.write_str(s),
        }
    }
}

impl From<&str> for TaskId {
    fn from(s: &str) -> Self {
        TaskId::Text(s.to_string())
    }
}

impl From<u64> for TaskId {
    fn from(n: u64) -> Self {
        TaskId::Number(n)
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            TaskId::Number(n) => s.serialize_u64(*n),
            TaskId::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(d)? {
            Value::String(s) => Ok(TaskId::Text(s)),
            Value::Number(n) => n.as_u64().map(TaskId::Number).ok_or_else(|| {
                D::Error::custom(format!(
                    "task id {n} must be a string or a non-negative integer"
                ))
            }),
            other => Err(D::Error::custom(format!(
                "task id must be a string or a number, not {}",
                json_kind(&other)
            ))),
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
