//! Root-wide usage limits per agent preset: `agents/<preset>.limited`.
//!
//! When a task's agent reports that its account hit a usage or rate limit with a reset
//! time, the worker that ran it writes `agents/<preset>.limited` (`{"schema", "preset",
//! "until", "reason", "taskId"}`) and defers the task to that time (its `notBefore`).
//! Until then no worker of the root starts a task of that preset: a queue claim skips
//! them (and wakes when the earliest is due), an inbox task waits in its inbox. The file
//! is never removed on a schedule: once `until` has passed it means nothing, and the
//! next limit replaces it.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::fsio::{self, Durability};
use crate::layout::Root;
use crate::protocol::{parse_rfc3339, rfc3339, TaskId, SCHEMA};

/// An agent preset's limit, as its file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentLimit {
    #[serde(default = "schema_v1")]
    pub schema: u32,
    pub preset: String,
    /// RFC 3339: when the limit resets.
    pub until: String,
    /// The agent's own words.
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
}

fn schema_v1() -> u32 {
    SCHEMA
}

impl AgentLimit {
    pub fn until_time(&self) -> Option<SystemTime> {
        parse_rfc3339(&self.until)
    }
}

/// Record that `preset`'s account is limited until `until` (a later limit already on
/// file stands).
pub fn record(
    root: &Root,
    preset: &str,
    until: SystemTime,
    reason: &str,
    task: Option<&TaskId>,
) -> Result<()> {
    if let Some(held) = active(root, preset, SystemTime::now()) {
        if held >= until {
            return Ok(());
        }
    }
    fsio::ensure_dir(&root.agents_dir())?;
    let limit = AgentLimit {
        schema: SCHEMA,
        preset: preset.to_string(),
        until: rfc3339(until),
        reason: reason.to_string(),
        task_id: task.cloned(),
    };
    fsio::write_replace(
        &root.agent_limit(preset),
        &fsio::to_json_bytes(&limit),
        Durability::Atomic,
    )
}

/// The limit on file for `preset`, if any (expired or not).
pub fn read(root: &Root, preset: &str) -> Option<AgentLimit> {
    fsio::read_json::<AgentLimit>(&root.agent_limit(preset), 64 * 1024)
        .ok()
        .flatten()
}

/// Until when `preset` is limited, if that is after `now`.
pub fn active(root: &Root, preset: &str, now: SystemTime) -> Option<SystemTime> {
    read(root, preset)
        .and_then(|l| l.until_time())
        .filter(|t| *t > now)
}

/// `t` as the local clock shows it, `HH:MM` ("rate-limited until 22:43").
pub fn hh_mm(t: SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let local = (secs as i64 + crate::preset::local_offset_secs(secs)).rem_euclid(86_400);
    format!("{:02}:{:02}", local / 3600, local % 3600 / 60)
}

/// Why a task waits for a usage limit, if it does: its own `notBefore` ahead, or its
/// agent preset limited root-wide (`agent` = the preset it names, if any).
pub fn waiting_reason(
    root: &Root,
    not_before: Option<SystemTime>,
    agent: Option<&str>,
) -> Option<String> {
    let now = SystemTime::now();
    let own = not_before.filter(|t| *t > now);
    let preset = agent.and_then(|a| active(root, a, now));
    own.into_iter()
        .chain(preset)
        .max()
        .map(|t| format!("rate-limited until {}", hh_mm(t)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_limit_holds_until_its_reset_and_a_later_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let now = SystemTime::now();
        assert_eq!(active(&root, "claude", now), None);
        let soon = now + Duration::from_secs(60);
        record(&root, "claude", soon, "hit the limit", None).unwrap();
        let got = active(&root, "claude", now).unwrap();
        assert!(got.duration_since(soon).unwrap_or_default() < Duration::from_millis(1));
        assert_eq!(active(&root, "codex", now), None);
        assert_eq!(active(&root, "claude", soon + Duration::from_secs(1)), None);
        // An earlier reset does not shorten a limit on file; a later one extends it.
        record(&root, "claude", now + Duration::from_secs(5), "x", None).unwrap();
        assert!(active(&root, "claude", now + Duration::from_secs(30)).is_some());
        record(&root, "claude", now + Duration::from_secs(600), "y", None).unwrap();
        assert_eq!(read(&root, "claude").unwrap().reason, "y");
    }
}
