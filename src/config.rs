//! `config.json`: optional root-wide defaults (running cap, timeouts, lock lease).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dirlock::LockOptions;
use crate::error::{Error, FileProblem, Result};
use crate::fsio::{self, RESULT_SIZE_LIMIT, SMALL_FILE_LIMIT};
use crate::layout::MAX_SLOTS;
use crate::protocol::{check_schema, MAX_TIMEOUT_SECS, SCHEMA};
use crate::worktree::setup::{validate_port_range, WorktreeSetup};

pub mod edit;

/// Smallest `maxTaskBytes`: room for a prompt and the fields around it.
pub const MIN_TASK_BYTES: u64 = 1024;
/// Longest `leaseSecs`: a lock of a dead holder on another host stays this long.
pub const MAX_LEASE_SECS: u64 = 24 * 3600;
/// Longest `lockGraceSecs`: a half-made lock blocks its resource this long.
pub const MAX_LOCK_GRACE_SECS: u64 = 3600;
/// Longest `callback` command line.
pub const MAX_CALLBACK_CHARS: usize = 4096;
/// Longest `callbackTimeoutSecs` (a day).
pub const MAX_CALLBACK_TIMEOUT_SECS: u64 = 24 * 3600;
/// Longest `approvalTimeoutSecs` (a day).
pub const MAX_APPROVAL_TIMEOUT_SECS: u64 = 24 * 3600;

fn schema_v1() -> u32 {
    SCHEMA
}

/// Root-wide settings. Every field is optional; a missing file means all defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// The config file format version (1).
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// Cap on agents running at once across the root (shared queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Default task timeout when neither the task nor `--timeout` gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// How long a lock held from another host stays alive without a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    /// How long a lock directory without an owner file counts as being acquired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_grace_secs: Option<u64>,
    /// Largest task file accepted, in bytes (default 4 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_task_bytes: Option<u64>,
    /// One running task per `key` (shared queue); default on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key_serialization: Option<bool>,
    /// A task whose agent reports a usage or rate limit with a reset time waits for
    /// the reset instead of failing; default on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_rate_limited: Option<bool>,
    /// Tasks run in a git worktree of their own unless they say otherwise (default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<bool>,
    /// Where task worktrees are made (absolute) instead of next to the repository
    /// (`<repo>.conductor-worktrees/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_dir: Option<std::path::PathBuf>,
    /// A shell command `conductor merge` runs on each merged result in a scratch
    /// worktree before merging (`--check` overrides it); a task whose check fails is
    /// not merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_check: Option<String>,
    /// How long `gc` keeps a finished task's worktree (its branch stays); default 7 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_retention_secs: Option<u64>,
    /// A shell command a worker runs when a task it ran ends (any end state), with the
    /// task's id, state, slot, exit code and result path in its environment.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "callback_command"
    )]
    pub callback: Option<String>,
    /// A shell command run when a task's agent asks a person to approve a tool call
    /// (`approval.json` written), the event as JSON on its stdin (see [`crate::hooks`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "approval_callback"
    )]
    pub approval_callback: Option<String>,
    /// A shell command run once a day per budget when the root's or a group's daily
    /// budget is spent, the event as JSON on its stdin (see [`crate::hooks`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "budget_callback"
    )]
    pub budget_callback: Option<String>,
    /// How long the callback may run before it is stopped (TERM, then KILL); default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_timeout_secs: Option<u64>,
    /// Whether the root's processes fsync what they write (default on). Off, a crash
    /// of the machine may lose or tear what was written since the kernel last flushed;
    /// a crashed or killed *process* loses nothing either way. `conductor run` turns it
    /// off in the private root it deletes afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsync: Option<bool>,
    /// Whether a claude-preset agent asks a person (`conductor approve`/`deny`) for a tool
    /// call its worker does not pre-approve, instead of being refused. Absent: on when the
    /// worker pre-approves fewer tools than the preset's default (see `worker::approval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<bool>,
    /// How long such a question waits for an answer before it is denied; default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_secs: Option<u64>,
    /// Files copied or linked into each new task worktree and a command run there
    /// before its agent (see [`crate::worktree::setup`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_setup: Option<WorktreeSetup>,
    /// `[first, last]`: each running worktree task gets a port of these to itself, in
    /// its environment as `CONDUCTOR_PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range: Option<[u16; 2]>,
    /// The root's spend per day in USD: once the costs its tasks reported today reach
    /// it, no new task starts (running ones finish) until the next day or a higher one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
}

/// `callback` as a string, or an error that names the field (serde's own says only
/// "expected a string at line 1 column 14").
fn callback_command<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    shell_command(d, "callback")
}

fn approval_callback<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    shell_command(d, "approvalCallback")
}

fn budget_callback<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    shell_command(d, "budgetCallback")
}

fn shell_command<'de, D: serde::Deserializer<'de>>(
    d: D,
    field: &str,
) -> std::result::Result<Option<String>, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s)),
        other => Err(D::Error::custom(format!(
            "{field} must be a shell command as a string, not {other}"
        ))),
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            schema: SCHEMA,
            max_running: None,
            timeout_secs: None,
            lease_secs: None,
            lock_grace_secs: None,
            max_task_bytes: None,
            per_key_serialization: None,
            defer_rate_limited: None,
            worktree: None,
            worktree_dir: None,
            worktree_retention_secs: None,
            merge_check: None,
            callback: None,
            approval_callback: None,
            budget_callback: None,
            callback_timeout_secs: None,
            fsync: None,
            approvals: None,
            approval_timeout_secs: None,
            worktree_setup: None,
            port_range: None,
            daily_budget_usd: None,
        }
    }
}

impl Config {
    /// Load `path`; a missing file is the default configuration. Every field is
    /// checked here, once: an error names the file, the field and its range.
    pub fn load(path: &Path) -> Result<Config> {
        let cfg: Config = fsio::read_json(path, SMALL_FILE_LIMIT)?.unwrap_or_default();
        check_schema(path, cfg.schema)?;
        cfg.validate()
            .map_err(|why| Error::bad(path, FileProblem::Invalid(why)))?;
        Ok(cfg)
    }

    /// Check every numeric field against its range; the message names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        within(
            "maxRunning",
            self.max_running.map(u64::from),
            1,
            u64::from(MAX_SLOTS),
            "leave it out for no cap",
        )?;
        within(
            "timeoutSecs",
            self.timeout_secs,
            1,
            MAX_TIMEOUT_SECS,
            "leave it out for no default timeout",
        )?;
        within(
            "leaseSecs",
            self.lease_secs,
            1,
            MAX_LEASE_SECS,
            "leave it out for the default 120",
        )?;
        within(
            "lockGraceSecs",
            self.lock_grace_secs,
            1,
            MAX_LOCK_GRACE_SECS,
            "leave it out for the default 10",
        )?;
        if let Some(d) = self.worktree_dir.as_ref().filter(|d| !d.is_absolute()) {
            return Err(format!(
                "worktreeDir {} is not an absolute path",
                d.display()
            ));
        }
        within(
            "worktreeRetentionSecs",
            self.worktree_retention_secs,
            0,
            MAX_TIMEOUT_SECS * 10,
            "leave it out for the default of 7 days",
        )?;
        self.validate_commands()?;
        within(
            "callbackTimeoutSecs",
            self.callback_timeout_secs,
            1,
            MAX_CALLBACK_TIMEOUT_SECS,
            "leave it out for the default 60",
        )?;
        self.validate_setup_and_budget()?;
        within(
            "approvalTimeoutSecs",
            self.approval_timeout_secs,
            1,
            MAX_APPROVAL_TIMEOUT_SECS,
            "leave it out for the default 600",
        )?;
        within(
            "maxTaskBytes",
            self.max_task_bytes,
            MIN_TASK_BYTES,
            RESULT_SIZE_LIMIT,
            "leave it out for the default 4 MiB",
        )
    }

    /// The shell commands: `mergeCheck` and the callbacks.
    fn validate_commands(&self) -> std::result::Result<(), String> {
        for (name, command) in [
            ("mergeCheck", &self.merge_check),
            ("callback", &self.callback),
            ("approvalCallback", &self.approval_callback),
            ("budgetCallback", &self.budget_callback),
        ] {
            let Some(c) = command else { continue };
            if c.trim().is_empty() || c.len() > MAX_CALLBACK_CHARS || c.contains('\0') {
                return Err(format!(
                    "{name} must be a shell command of 1 to {MAX_CALLBACK_CHARS} characters \
                     (leave it out for none)"
                ));
            }
        }
        Ok(())
    }

    /// `worktreeSetup`, `portRange`, `dailyBudgetUsd`.
    fn validate_setup_and_budget(&self) -> std::result::Result<(), String> {
        if let Some(s) = &self.worktree_setup {
            s.validate()?;
        }
        validate_port_range(self.port_range)?;
        crate::protocol::check_usd("dailyBudgetUsd", self.daily_budget_usd)
    }

    /// How locks on this root are judged stale (lease and clock settings).
    pub fn lock_options(&self) -> LockOptions {
        let d = LockOptions::default();
        LockOptions {
            grace: self
                .lock_grace_secs
                .map(Duration::from_secs)
                .unwrap_or(d.grace),
            lease: self.lease_secs.map(Duration::from_secs).unwrap_or(d.lease),
        }
    }

    /// One running task per key (default on).
    pub fn per_key_serialization(&self) -> bool {
        self.per_key_serialization.unwrap_or(true)
    }

    /// Whether a task the agent's provider rate-limited waits and runs again (default on).
    pub fn defer_rate_limited(&self) -> bool {
        self.defer_rate_limited.unwrap_or(true)
    }

    /// How long `gc` keeps a finished task's worktree (default 7 days).
    pub fn worktree_retention(&self) -> Duration {
        Duration::from_secs(self.worktree_retention_secs.unwrap_or(7 * 24 * 3600))
    }

    /// How long a task's callback may run (default 60 s).
    pub fn callback_timeout(&self) -> Duration {
        Duration::from_secs(self.callback_timeout_secs.unwrap_or(60))
    }

    /// Whether writes are fsynced (default on; see [`Config::fsync`](Config#structfield.fsync)).
    pub fn fsync(&self) -> bool {
        self.fsync.unwrap_or(true)
    }

    /// How long an agent's question waits for a person before it is denied (default 600 s).
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_secs(self.approval_timeout_secs.unwrap_or(600))
    }

    /// The largest `task.json` a worker accepts, in bytes.
    pub fn max_task_bytes(&self) -> u64 {
        self.max_task_bytes.unwrap_or(fsio::TASK_SIZE_LIMIT)
    }
}

/// `Err` naming `field` when `value` is set outside `min..=max`; `unset` says what
/// leaving it out means.
fn within(
    field: &str,
    value: Option<u64>,
    min: u64,
    max: u64,
    unset: &str,
) -> std::result::Result<(), String> {
    match value {
        Some(v) if v < min || v > max => Err(format!(
            "{field} {v} is out of range: it must be {min} to {max} ({unset})"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(json: &str) -> Config {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn every_numeric_field_is_range_checked() {
        assert_eq!(Config::default().validate(), Ok(()));
        let fine = r#"{"maxRunning": 1024, "timeoutSecs": 1, "leaseSecs": 86400,
                       "lockGraceSecs": 3600, "maxTaskBytes": 1024}"#;
        assert_eq!(parsed(fine).validate(), Ok(()));
        for (json, field) in [
            (r#"{"maxRunning": 0}"#, "maxRunning 0"),
            (r#"{"maxRunning": 1025}"#, "maxRunning 1025"),
            (r#"{"timeoutSecs": 0}"#, "timeoutSecs 0"),
            (r#"{"timeoutSecs": 99999999999}"#, "timeoutSecs"),
            (r#"{"leaseSecs": 0}"#, "leaseSecs 0"),
            (r#"{"leaseSecs": 86401}"#, "leaseSecs"),
            (r#"{"lockGraceSecs": 0}"#, "lockGraceSecs 0"),
            (r#"{"maxTaskBytes": 10}"#, "maxTaskBytes 10"),
            (r#"{"maxTaskBytes": 999999999999}"#, "maxTaskBytes"),
            (r#"{"callback": "  "}"#, "callback must be"),
            (r#"{"budgetCallback": ""}"#, "budgetCallback must be"),
            (r#"{"callbackTimeoutSecs": 0}"#, "callbackTimeoutSecs 0"),
            (r#"{"callbackTimeoutSecs": 86401}"#, "callbackTimeoutSecs"),
            (r#"{"approvalTimeoutSecs": 0}"#, "approvalTimeoutSecs 0"),
            (r#"{"approvalTimeoutSecs": 86401}"#, "approvalTimeoutSecs"),
        ] {
            let why = parsed(json).validate().expect_err(json);
            assert!(why.starts_with(field), "{json}: {why}");
        }
    }

    #[test]
    fn a_bad_config_file_is_refused_naming_the_file_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"maxRunning": 0}"#).unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        assert!(err.contains("maxRunning 0 is out of range"), "{err}");
        std::fs::write(&path, r#"{"callback": ["echo", "x"]}"#).unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("callback must be a shell command as a string"),
            "{err}"
        );
        std::fs::write(&path, r#"{"maxRunning": 3}"#).unwrap();
        assert_eq!(Config::load(&path).unwrap().max_running, Some(3));
    }
}
