//! `Task`, what `task.json` holds: the fields (what a task does with them lives with
//! their concern: `protocol.rs`, `scheduling.rs`, `run_fields.rs`, `until.rs`, …).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::schema_v1;
use super::task_id::TaskId;
use super::until::{Until, MAX_CHECK_BYTES, MAX_ROUNDS};

/// `task.json`: the one undelivered task in a worker's inbox (also `running.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The file format version (1).
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// Its id, unique across the root; one is made when none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<TaskId>,
    /// What the agent is asked: piped to the agent's stdin.
    pub prompt: String,
    /// Any JSON; handed to the agent as `CONDUCTOR_CONTEXT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Written by original clients; ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    /// How long it may run before it is stopped (none: the worker's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Serialization key (user or project): one running task per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// 0–9, default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Default 1: an interrupted task is never re-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Which attempt this delivery is (1-based); set by conductor on re-delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Continue this agent session (claude preset: `--resume ID`; codex: `codex exec
    /// resume ID`; gemini: `--resume ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// The model the agent uses for this task, passed by the preset (`claude --model`,
    /// `codex -m`, `gemini -m`); the command preset ignores it (with a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `"queue"` for a task submitted to the shared queue (its result is also linked
    /// into `queue/results/`, and a retry goes back to the queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Run only after every one of these tasks has succeeded; if one ends otherwise,
    /// this one ends `cancelled` ("dependency ID failed"). Shared queue only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<TaskId>,
    /// Run the agent in this directory (absolute; it must exist and be the worker
    /// user's) instead of the worker's project directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// How many agents up the chain that created it (absent: 0, created outside any
    /// agent); its agent gets `CONDUCTOR_DEPTH` = this + 1 (see [`crate::env::stamp_depth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// The agent preset that must run it (`claude`, `codex`, `command`…): only a worker
    /// started with that preset takes it; absent, the worker's first (default) preset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Not to start before this time (RFC 3339): set when its agent's usage or rate
    /// limit deferred it, to the limit's reset. A queue claim skips it until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// How many times a usage or rate limit deferred it (absent: never); at
    /// [`crate::preset::MAX_DEFERRALS`] a limit met again ends it `failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferrals: Option<u32>,
    /// Run in a fresh git worktree of the task's repository, on branch
    /// `conductor/<id>` (absent: the root's `worktree` default in config.json).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<bool>,
    /// With a worktree: the commit or ref its branch is made from (default `HEAD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// With a worktree: copy the repository's staged and unstaged changes into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_uncommitted: Option<bool>,
    /// The most its agent may spend, in USD: passed where the agent's CLI takes a cap
    /// (Claude Code's `--max-budget-usd`); other presets run it without one (a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
    /// The group it runs in (`groups/<name>.json`): at most that group's `parallel`
    /// tasks of it run at once, root-wide. Shared queue only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Narrow the tools the worker lets its agent use unattended to these (claude
    /// preset; `[]`: none): each must be one the worker allows (or a rule within one,
    /// `Bash(git *)`), and the worker's tools left out are denied to the agent. A
    /// widening task is rejected naming this field (see [`crate::preset::Preset::narrow`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// Narrow the worker's permission mode (claude preset) or approval mode (gemini) to
    /// this one, which may let the agent do no more than the worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Extra environment variables for its agent (no `CONDUCTOR_*` names: those are
    /// conductor's to set).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Labels for people and filters (`tasks --label L`); they change nothing in how
    /// the task runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Run again until a check passes (`--until`), in rounds of one session ([`Until`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Until>,
}

impl Task {
    /// `until`: a check command, and a bound of rounds within range.
    pub(super) fn validate_until(&self) -> Result<(), String> {
        let Some(u) = &self.until else {
            return Ok(());
        };
        if u.check.trim().is_empty() {
            return Err(
                "until.check is empty: give the command to run (e.g. \"cargo test\")".into(),
            );
        }
        if u.check.len() > MAX_CHECK_BYTES || u.check.contains('\0') {
            return Err(format!(
                "until.check must be at most {MAX_CHECK_BYTES} bytes, without NUL"
            ));
        }
        match u.rounds {
            Some(n) if n == 0 || n > MAX_ROUNDS => {
                Err(format!("until.rounds {n} is out of range 1-{MAX_ROUNDS}"))
            }
            _ => Ok(()),
        }
    }
}
