//! The queue's capacity view (`conductor status --json`): the running cap and its use,
//! each key's load, pending counts by priority, the key and run-slot locks, pauses and
//! groups.

use std::collections::BTreeMap;
use std::fs;

use serde::Serialize;

use super::handle::Queue;
use super::{groups, pause};
use crate::dirlock;
use crate::error::Result;

/// Global running cap use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotUse {
    /// The root-wide cap (`maxRunning`), if any.
    pub max: Option<u32>,
    /// Tasks running now.
    pub used: u32,
    /// How many more may start (`None`: no cap).
    pub available: Option<u32>,
}

/// One key's load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyUse {
    /// Its tasks running now.
    pub running: u32,
    /// Its tasks waiting in the queue.
    pub pending: u32,
}

/// Pending tasks by priority.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCount {
    /// How many wait at each priority (0 most urgent).
    pub by_priority: BTreeMap<u8, u32>,
    /// How many wait in all.
    pub total: u32,
}

/// A key or slot lock and its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockInfo {
    /// What is locked: `key`, `slot`, `group` …
    pub kind: String,
    /// The key's, slot's or group's name.
    pub name: String,
    /// The holder's pid, as its lock records it.
    pub holder_pid: Option<u32>,
    /// The holder's host, as its lock records it.
    pub host: Option<String>,
    /// When the lock was taken (RFC 3339).
    pub acquired_at: Option<String>,
    /// Whether the holder is alive (for another host: its lease is renewed).
    pub alive: bool,
}

/// The capacity view (`conductor status --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// The root-wide cap and its use.
    pub slots: SlotUse,
    /// Each key's running and waiting tasks.
    pub by_key: BTreeMap<String, KeyUse>,
    /// The tasks waiting in the queue.
    pub pending: PendingCount,
    /// Every key and slot lock held, with its holder.
    pub locks: Vec<LockInfo>,
    /// The pauses in force ("slot 2", "key alice", "group batch", "everything").
    pub paused: Vec<String>,
    /// Each group's cap and load.
    pub groups: Vec<groups::GroupUse>,
}

impl Queue {
    /// Running cap, per-key load, pending counts and the key/slot locks.
    pub fn capacity(&self) -> Result<Capacity> {
        let config = self.config()?;
        let opts = config.lock_options();
        let mut locks = Vec::new();
        let mut by_key: BTreeMap<String, KeyUse> = BTreeMap::new();
        let mut used = 0;
        for (kind, dir) in [
            ("slot", self.root.slots_dir()),
            ("key", self.root.keys_dir()),
        ] {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(base) = name.strip_suffix(".lock") else {
                    continue;
                };
                let Some(h) = dirlock::inspect(&entry.path(), &opts)? else {
                    continue;
                };
                let alive = !h.liveness.is_stale();
                if alive && kind == "slot" {
                    used += 1;
                }
                if alive && kind == "key" {
                    by_key.entry(base.to_string()).or_default().running += 1;
                }
                locks.push(LockInfo {
                    kind: kind.to_string(),
                    name: base.to_string(),
                    holder_pid: h.pid,
                    host: h.owner.as_ref().map(|o| o.host.clone()),
                    acquired_at: h.owner.as_ref().map(|o| o.acquired_at.clone()),
                    alive,
                });
            }
        }
        let mut pending = PendingCount::default();
        for p in self.scan()? {
            pending.total += 1;
            *pending.by_priority.entry(p.priority).or_default() += 1;
            if let Some(k) = p.key {
                by_key.entry(k).or_default().pending += 1;
            }
        }
        if config.max_running.is_none() {
            // No run slots are taken without a cap: count the tasks in hand instead.
            used = self
                .root
                .slots()?
                .into_iter()
                .filter(|s| self.root.worker(*s).running().exists())
                .count() as u32;
        }
        Ok(Capacity {
            slots: SlotUse {
                max: config.max_running,
                used,
                available: config.max_running.map(|m| m.saturating_sub(used)),
            },
            by_key,
            pending,
            locks,
            paused: pause::Paused::load(&self.root)
                .entries
                .iter()
                .map(|(t, _)| t.to_string())
                .collect(),
            groups: groups::usage(&self.root)?,
        })
    }
}
