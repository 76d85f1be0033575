//! `approval.json` and its answer: an agent's question to a person, asked through its slot.
//!
//! The agent's permission tool (`conductor approval-mcp`) writes the question
//! (`workers/<N>/approval.json`, replaced whole); whoever answers it creates
//! `workers/<N>/approval.<question id>.answer.json` without replacing (`link`), so of two
//! answers — a person's and the asker's own timeout — exactly one wins. Both files go
//! once the answer is taken, and the worker removes whatever is left when the task ends.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{check_schema, TaskId, SCHEMA};
use crate::error::Result;
use crate::fsio::{self, SMALL_FILE_LIMIT};

/// The question's name in the slot directory.
pub const QUESTION_FILE: &str = "approval.json";

/// A tool call the agent asks a person to allow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    #[serde(default)]
    /// The question file's format version.
    pub schema: u32,
    /// This question's own id (a nonce): its answer file carries it in its name.
    pub id: String,
    /// The task whose agent asks.
    pub task_id: TaskId,
    /// The tool it wants to use (`Bash`, `WebFetch`, `mcp__server__tool` …).
    pub tool_name: String,
    /// The tool's input as the agent gave it (for Bash: `{"command": …}`).
    #[serde(default)]
    pub input: Value,
    /// The agent's id for the tool call, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// When it was asked (RFC 3339).
    pub asked_at: String,
    /// When it is denied if nobody answers (RFC 3339).
    pub deadline: String,
    /// The asking process (`conductor approval-mcp`).
    pub pid: u32,
}

/// A person's (or the timeout's) decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

/// The answer to one [`Question`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    #[serde(default)]
    pub schema: u32,
    pub question_id: String,
    pub task_id: TaskId,
    pub decision: Decision,
    /// Why (a denial's reason is what the agent is told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub answered_at: String,
    /// Who answered: `conductor approve`, `dashboard`, `mcp`, `timeout` …
    pub by: String,
}

impl Question {
    /// A line for people: `Bash: rm -rf build` (the command, a file path, else the input).
    pub fn summary(&self) -> String {
        let detail = ["command", "file_path", "url", "path", "pattern"]
            .iter()
            .find_map(|k| self.input.get(*k).and_then(Value::as_str))
            .map(str::to_string)
            .unwrap_or_else(|| match &self.input {
                Value::Null => String::new(),
                other => other.to_string(),
            });
        let detail = crate::text::prompt_preview(&detail, 200);
        if detail.is_empty() {
            self.tool_name.clone()
        } else {
            format!("{}: {detail}", self.tool_name)
        }
    }
}

/// `workers/<N>/approval.json` in slot directory `dir`.
pub fn question_path(dir: &Path) -> PathBuf {
    dir.join(QUESTION_FILE)
}

/// Where the answer to question `question_id` goes in slot directory `dir`.
pub fn answer_path(dir: &Path, question_id: &str) -> PathBuf {
    dir.join(format!("approval.{question_id}.answer.json"))
}

/// Whether `name` is one of the approval files of a slot directory.
pub fn is_approval_file(name: &str) -> bool {
    name == QUESTION_FILE || (name.starts_with("approval.") && name.ends_with(".answer.json"))
}

/// The question waiting in slot directory `dir`, if any.
pub fn read_question(dir: &Path) -> Result<Option<Question>> {
    let path = question_path(dir);
    let q: Option<Question> = fsio::read_json(&path, SMALL_FILE_LIMIT)?;
    if let Some(q) = &q {
        check_schema(&path, q.schema)?;
    }
    Ok(q)
}

/// The question waiting in slot directory `dir` from task `id`'s agent; none when
/// there is none, it is another task's (a leftover) or it cannot be read.
pub fn question_of(dir: &Path, id: &TaskId) -> Option<Question> {
    read_question(dir)
        .ok()
        .flatten()
        .filter(|q| &q.task_id == id)
}

/// The answer to question `question_id`, if it came.
pub fn read_answer(dir: &Path, question_id: &str) -> Result<Option<Answer>> {
    let path = answer_path(dir, question_id);
    let a: Option<Answer> = fsio::read_json(&path, SMALL_FILE_LIMIT)?;
    if let Some(a) = &a {
        check_schema(&path, a.schema)?;
    }
    Ok(a)
}

impl Answer {
    pub fn new(q: &Question, decision: Decision, reason: Option<String>, by: &str) -> Answer {
        Answer {
            schema: SCHEMA,
            question_id: q.id.clone(),
            task_id: q.task_id.clone(),
            decision,
            reason,
            answered_at: super::now_rfc3339(),
            by: by.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_reads_as_its_tool_and_what_it_would_do() {
        let q = Question {
            schema: SCHEMA,
            id: "q1".into(),
            task_id: TaskId::from("t1"),
            tool_name: "Bash".into(),
            input: serde_json::json!({"command": "make   install", "description": "x"}),
            tool_use_id: None,
            asked_at: String::new(),
            deadline: String::new(),
            pid: 1,
        };
        assert_eq!(q.summary(), "Bash: make install");
        assert!(is_approval_file("approval.json"));
        assert!(is_approval_file("approval.abc.answer.json"));
        assert!(!is_approval_file("result.json"));
    }
}
