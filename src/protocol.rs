//! The on-disk protocol types: task, status and result files (docs/ARCHITECTURE.md, section 2).

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, FileProblem, Result};

mod agent_record;
pub mod approval;
pub mod denial;
mod env_labels;
pub mod id_gen;
mod run_fields;
pub use run_fields::check_usd;
pub(crate) mod salvage;
mod scheduling;
mod schema;
mod status;
mod task;
pub use status::{parse_status, Status, WorkerState};
mod outcome;
pub use outcome::Outcome;
mod task_id;
mod time;
pub(crate) mod until;
mod worktree;
pub use agent_record::AgentRecord;
pub use denial::Denial;
pub use env_labels::parse_env_assignment;
pub use scheduling::{id_list, MAX_AFTER};
pub(crate) use schema::check_schema;
use schema::{lenient_timestamp, schema_v1};
pub use schema::SCHEMA;
pub use task::Task;
pub use task_id::TaskId;
pub use until::{CheckVerdict, Until, UntilReport};
pub use worktree::{ReviewState, WorktreeChange, WorktreeRecord};

/// Largest `context` (as JSON text): Linux caps one environment string at 128 KiB.
pub const MAX_CONTEXT_BYTES: usize = 120 * 1024;
/// Largest `timeoutSecs` accepted (a year).
pub const MAX_TIMEOUT_SECS: u64 = 366 * 24 * 3600;

pub use time::{now_rfc3339, parse_rfc3339, rfc3339};

/// A group's name: 1–64 of `A-Z a-z 0-9 - _` (it names files under `groups/` and
/// `paused/`).
/// A key must be what a task id may be (it names a lock directory and a pause file);
/// the reason, if not, speaks of a key.
pub fn check_key_name(key: &str) -> std::result::Result<(), String> {
    TaskId::Text(key.to_string())
        .validate()
        .map_err(|e| e.replacen("task id", "key", 1))
}

pub fn check_group_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "group {name:?} is not a group name: use 1-64 letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

impl Task {
    /// A task with just a prompt; everything else defaulted.
    pub fn new(prompt: impl Into<String>) -> Task {
        Task {
            schema: SCHEMA,
            id: None,
            prompt: prompt.into(),
            context: None,
            timestamp: None,
            timeout_secs: None,
            key: None,
            priority: None,
            max_attempts: None,
            attempt: None,
            resume: None,
            model: None,
            origin: None,
            after: Vec::new(),
            dir: None,
            depth: None,
            agent: None,
            not_before: None,
            deferrals: None,
            worktree: None,
            base: None,
            include_uncommitted: None,
            max_budget_usd: None,
            group: None,
            allowed_tools: None,
            permission_mode: None,
            env: std::collections::BTreeMap::new(),
            labels: Vec::new(),
            until: None,
        }
    }

    /// With id `id`.
    pub fn with_id(mut self, id: impl Into<TaskId>) -> Task {
        self.id = Some(id.into());
        self
    }

    /// With `context`, handed to the agent as `CONDUCTOR_CONTEXT`.
    pub fn with_context(mut self, context: Value) -> Task {
        self.context = Some(context);
        self
    }

    /// With a limit of `secs` seconds on its run.
    pub fn with_timeout_secs(mut self, secs: u64) -> Task {
        self.timeout_secs = Some(secs);
        self
    }

    /// Check the fields a worker relies on; the message says what to fix.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(id) = &self.id {
            id.validate()?;
        }
        self.validate_numbers()?;
        self.validate_resume_and_model()?;
        if let Some(k) = &self.key {
            check_key_name(k)?;
        }
        if let Some(g) = &self.group {
            check_group_name(g)?;
        }
        self.validate_after_and_dir()?;
        self.validate_env_and_labels()?;
        self.validate_agent_and_tools()?;
        self.validate_run_fields()
    }

    /// The priority, attempts, timeout and the size of the context.
    fn validate_numbers(&self) -> std::result::Result<(), String> {
        if let Some(p) = self.priority {
            if p > 9 {
                return Err(format!("priority {p} is out of range 0-9"));
            }
        }
        if self.max_attempts == Some(0) {
            return Err("maxAttempts must be at least 1".into());
        }
        if self.attempt == Some(0) {
            return Err("attempt counts from 1".into());
        }
        if let Some(t) = self.timeout_secs {
            if t > MAX_TIMEOUT_SECS {
                return Err(format!("timeoutSecs {t} is more than a year"));
            }
        }
        if let Some(c) = &self.context {
            let len = c.to_string().len();
            if len > MAX_CONTEXT_BYTES {
                return Err(format!(
                    "context is {len} bytes; it reaches the agent in its environment \
                     (CONDUCTOR_CONTEXT), which takes at most {MAX_CONTEXT_BYTES}: put large \
                     data in a file and pass its path"
                ));
            }
        }
        if self.timeout_secs == Some(0) {
            return Err("timeoutSecs must be at least 1".into());
        }
        Ok(())
    }

    /// The agent preset, the earliest start, and the narrowing of tools and permissions.
    fn validate_agent_and_tools(&self) -> std::result::Result<(), String> {
        if let Some(a) = &self.agent {
            if a.is_empty()
                || a.len() > 64
                || !a
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!(
                    "agent {a:?} is not a preset name (letters, digits, - and _)"
                ));
            }
        }
        if let Some(t) = &self.not_before {
            if parse_rfc3339(t).is_none() {
                return Err(format!("notBefore {t:?} is not an RFC 3339 time"));
            }
        }
        if let Some(tools) = &self.allowed_tools {
            if let Some(t) = tools.iter().find(|t| {
                t.trim().is_empty()
                    || t.starts_with('-')
                    || t.len() > 256
                    || t.contains(',')
                    || t.chars().any(char::is_control)
            }) {
                return Err(format!(
                    "allowedTools: {t:?} is not a tool name or rule (e.g. \"Read\", \"Bash(git *)\")"
                ));
            }
        }
        if let Some(m) = &self.permission_mode {
            if m.is_empty()
                || m.len() > 64
                || !m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(format!(
                    "permissionMode {m:?} is not a permission mode name"
                ));
            }
        }
        Ok(())
    }

    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt.unwrap_or(1)
    }

    /// When it may start, if it was deferred (`notBefore`).
    pub fn not_before(&self) -> Option<SystemTime> {
        self.not_before.as_deref().and_then(parse_rfc3339)
    }

    /// How many attempts it may have in all (default 1: no retry).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts.unwrap_or(1)
    }

    /// Parse and check a task file's bytes; errors name `path` and say what is wrong.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Task> {
        let task: Task = crate::fsio::parse_json(path, bytes)?;
        check_schema(path, task.schema)?;
        task.validate()
            .map_err(|r| Error::bad(path, FileProblem::Invalid(r)))?;
        Ok(task)
    }

    /// The bytes to deliver: the task checked ([`Task::validate`]) and serialized,
    /// refused if over `limit` bytes (the root's `maxTaskBytes`, which workers enforce).
    /// The task must have its id by now (the error names it).
    pub fn to_bytes_checked(&self, limit: u64) -> Result<Vec<u8>> {
        self.validate()
            .map_err(|reason| Error::InvalidTask { reason })?;
        let bytes = crate::fsio::to_json_bytes(self);
        if bytes.len() as u64 > limit {
            let id = self
                .id
                .as_ref()
                .map_or_else(|| "(no id)".to_string(), TaskId::to_string);
            return Err(Error::InvalidTask {
                reason: format!(
                    "task {id} is {} bytes, over the root's task limit of {limit} bytes \
                     (\"maxTaskBytes\" in config.json; 4 MiB by default)",
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    /// Read and check a task file (schema and fields); `None` if it does not exist.
    pub fn read(path: &Path, limit: u64) -> Result<Option<Task>> {
        match crate::fsio::read_bounded(path, limit)? {
            None => Ok(None),
            Some(bytes) => Task::from_bytes(path, &bytes).map(Some),
        }
    }

    /// Whether the task file at `path` holds task `id`, read leniently (a file cut short
    /// or broken still names its id) and compared as text, as ids are written: a number
    /// and its digits are one id.
    pub fn file_holds(path: &Path, id: &TaskId) -> bool {
        crate::fsio::read_bounded(path, crate::fsio::TASK_SIZE_LIMIT)
            .ok()
            .flatten()
            .and_then(|b| Task::salvage_id(&b))
            .is_some_and(|found| found.to_string() == id.to_string())
    }

    /// Best-effort id from a task file that failed to parse, so a rejection can
    /// still be answered with a result under the id the client waits for.
    pub fn salvage_id(bytes: &[u8]) -> Option<TaskId> {
        salvage::task_id(bytes)
    }
}

/// `result.json` and `results/<taskId>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    /// The file format version (1).
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// The task it is the result of.
    pub task_id: TaskId,
    /// The agent's answer (its stdout, or the preset's reading of it).
    #[serde(default)]
    pub output: String,
    /// Whether the task succeeded.
    pub success: bool,
    /// `null` on success, otherwise a one-line reason.
    #[serde(default)]
    pub error: Option<String>,
    /// When it was written (RFC 3339).
    #[serde(default, deserialize_with = "lenient_timestamp")]
    pub timestamp: String,
    /// How the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The agent's exit status, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the agent, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The end of the agent's stderr, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// How long the agent ran, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// When the agent started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Which attempt this result is of, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The worker slot that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
    /// `output` is cut to its limit; the whole is in `output_file`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// Where the whole output is kept, when `output` is not all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file: Option<String>,
    /// Why the output is not whole where it is kept (e.g. cut from the log file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_note: Option<String>,
    /// Claude Code's session (claude preset): `conductor retry --resume` continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What the run cost, as the agent reported it (claude preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// How many turns the agent took, as it reported (claude preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u64>,
    /// Whether the agent itself reported an error (claude preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Tokens the agent reported it sent to the model, cache reads and writes included
    /// (claude preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Tokens the agent reported the model produced (claude preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// The agent preset that ran it (`claude`, `codex`, `command`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The task ran in its own git worktree: its branch, commits and diffstat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeChange>,
    /// The tool calls the agent was refused, as it reported them ([`Denial`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<Denial>,
    /// With `until`: the rounds run and the check's last verdict ([`UntilReport`]).
    #[serde(flatten)]
    pub until: UntilReport,
}

impl TaskResult {
    /// How a task ended, as every view names it: `ok`, `FAILED`, `TIMED OUT`, `CANCELLED`,
    /// `INTERRUPTED`, `REJECTED` (only success is lower case, so the rest stand out).
    /// A result from an original client, without `outcome`, is `ok` or `FAILED`.
    pub fn outcome_label(&self) -> &'static str {
        match self.outcome {
            Some(Outcome::Success) => "ok",
            Some(Outcome::Failure) => "FAILED",
            Some(Outcome::Timeout) => "TIMED OUT",
            Some(Outcome::Cancelled) => "CANCELLED",
            Some(Outcome::Interrupted) => "INTERRUPTED",
            Some(Outcome::Rejected) => "REJECTED",
            None if self.success => "ok",
            None => "FAILED",
        }
    }

    /// Read a result file (`result.json`, `results/<id>.json`, `queue/results/<id>.json`),
    /// refusing newer schemas; `None` if it does not exist.
    pub fn read(path: &Path) -> Result<Option<TaskResult>> {
        match crate::fsio::read_bounded(path, crate::fsio::RESULT_SIZE_LIMIT)? {
            None => Ok(None),
            Some(bytes) => parse_result(path, &bytes).map(Some),
        }
    }

    /// A failed result with `outcome` and a one-line `error`, stamped now.
    pub fn failed(task_id: TaskId, outcome: Outcome, error: impl Into<String>) -> TaskResult {
        let now = now_rfc3339();
        TaskResult {
            schema: SCHEMA,
            task_id,
            output: String::new(),
            success: false,
            error: Some(error.into()),
            timestamp: now.clone(),
            outcome: Some(outcome),
            exit_code: None,
            signal: None,
            stderr: None,
            duration_ms: None,
            started_at: None,
            finished_at: Some(now),
            attempt: None,
            worker: None,
            output_truncated: false,
            output_file: None,
            output_note: None,
            session_id: None,
            cost_usd: None,
            num_turns: None,
            is_error: None,
            input_tokens: None,
            output_tokens: None,
            agent: None,
            worktree: None,
            denials: Vec::new(),
            until: UntilReport::default(),
        }
    }
}

/// Parse a result file's bytes, refusing newer schemas.
pub fn parse_result(path: &Path, bytes: &[u8]) -> Result<TaskResult> {
    let r: TaskResult = crate::fsio::parse_json(path, bytes)?;
    check_schema(path, r.schema)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_named_as_they_are() {
        let label = |o| {
            TaskResult::failed(TaskId::from("t"), o, "x")
                .outcome_label()
                .to_string()
        };
        assert_eq!(label(Outcome::Timeout), "TIMED OUT");
        assert_eq!(label(Outcome::Cancelled), "CANCELLED");
        assert_eq!(label(Outcome::Interrupted), "INTERRUPTED");
        assert_eq!(label(Outcome::Failure), "FAILED");
    }
}
