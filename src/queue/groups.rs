//! Groups: a named cap on how many of its tasks run at once, root-wide.
//!
//! `groups/<name>.json` (`{"schema", "name", "parallel", "createdAt"}`) defines a group;
//! a task joins one with its `group` field. Its cap is held exactly as `maxRunning` is:
//! a task of the group runs only while holding one of the group's run slots,
//! `groups/<name>.<i>.lock/` for `i` below `parallel` — a directory lock that records
//! the task it is held for, so a killed worker's slot stays taken while its task's
//! processes still run, and is freed by recovery once they are gone. `parallel` is read
//! at every claim: `group set` takes effect at the next pickup, without restarting any
//! worker. Lowering it stops no running task; no new one starts until fewer than the
//! new cap run.

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dirlock::{DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::layout::Root;
use crate::protocol::{check_group_name, now_rfc3339, Task, SCHEMA};

use super::held::{is_held, take_one_of};
use super::handle::Queue;

/// A group as its file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    #[serde(default = "schema_v1")]
    pub schema: u32,
    pub name: String,
    /// How many of its tasks may run at once (at least 1).
    pub parallel: u32,
    #[serde(default)]
    pub created_at: String,
    /// Its tasks' spend per day in USD: once reached, no new task of it starts that day
    /// (see [`crate::budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
}

fn schema_v1() -> u32 {
    SCHEMA
}

/// A group's load, for `group list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupUse {
    /// The group's name.
    pub name: String,
    /// How many of its tasks may run at once.
    pub parallel: u32,
    /// Its tasks running now.
    pub running: u32,
    /// Its tasks waiting in the queue.
    pub queued: u32,
    /// Whether the group is paused.
    pub paused: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Its daily budget in US dollars, if it has one.
    pub daily_budget_usd: Option<f64>,
    /// What its tasks reported spending today (the spend ledger).
    pub spent_today_usd: f64,
}

/// What [`take_slot`] found.
#[derive(Debug)]
pub enum GroupSlot {
    /// One of the group's run slots, held until dropped.
    Held(Box<DirLock>),
    /// As many of its tasks run as its cap allows; says so.
    Full(String),
    /// No such group (removed after its task was queued); says so.
    Unknown(String),
}

fn bad(field: &str, reason: String) -> Error {
    Error::BadArgument {
        field: field.to_string(),
        reason,
    }
}

fn check(name: &str, parallel: u32) -> Result<()> {
    check_group_name(name).map_err(|r| bad("group", r))?;
    if parallel == 0 {
        return Err(bad(
            "parallel",
            format!("group {name}: --parallel must be at least 1 (to stop its tasks for a while, `conductor pause --group {name}`)"),
        ));
    }
    Ok(())
}

/// Define group `name` with cap `parallel`; refused if it exists.
pub fn add(root: &Root, name: &str, parallel: u32) -> Result<Group> {
    root.require_existing()?;
    check(name, parallel)?;
    fsio::ensure_dir(&root.groups_dir())?;
    let group = Group {
        schema: SCHEMA,
        name: name.to_string(),
        parallel,
        created_at: now_rfc3339(),
        daily_budget_usd: None,
    };
    let path = root.group_file(name);
    match fsio::write_new(&path, &fsio::to_json_bytes(&group), Durability::Durable) {
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => {
            let held = read(root, name)?.map_or(0, |g| g.parallel);
            Err(bad(
                "group",
                format!(
                    "group {name} exists already (parallel {held}, {}); change its cap with `conductor group set {name} --parallel N`",
                    path.display()
                ),
            ))
        }
        other => other.map(|()| group),
    }
}

/// Change group `name`'s cap; workers follow it at their next pickup.
pub fn set(root: &Root, name: &str, parallel: u32) -> Result<Group> {
    check(name, parallel)?;
    let mut group = require(root, name)?;
    group.parallel = parallel;
    fsio::write_replace(
        &root.group_file(name),
        &fsio::to_json_bytes(&group),
        Durability::Durable,
    )?;
    Ok(group)
}

/// Set (or, with `None`, remove) group `name`'s daily budget; workers follow it at
/// their next pickup.
pub fn set_budget(root: &Root, name: &str, usd: Option<f64>) -> Result<Group> {
    crate::budget::check_usd("--daily-budget-usd", usd).map_err(|r| bad("daily budget", r))?;
    let mut group = require(root, name)?;
    group.daily_budget_usd = usd;
    fsio::write_replace(
        &root.group_file(name),
        &fsio::to_json_bytes(&group),
        Durability::Durable,
    )?;
    Ok(group)
}

/// Group `name`, if the root has it.
pub fn read(root: &Root, name: &str) -> Result<Option<Group>> {
    if check_group_name(name).is_err() {
        return Ok(None);
    }
    fsio::read_json::<Group>(&root.group_file(name), 64 * 1024)
}

/// Group `name`, or [`Error::UnknownGroup`] naming the known ones.
pub fn require(root: &Root, name: &str) -> Result<Group> {
    check_group_name(name).map_err(|r| bad("group", r))?;
    if let Some(g) = read(root, name)? {
        return Ok(g);
    }
    let known: Vec<String> = list(root)?.into_iter().map(|g| g.name).collect();
    Err(Error::UnknownGroup {
        name: name.to_string(),
        path: root.group_file(name),
        known: if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        },
    })
}

/// Every group, by name.
pub fn list(root: &Root) -> Result<Vec<Group>> {
    let mut out = Vec::new();
    let Some(entries) = fsio::read_dir_if_exists(&root.groups_dir())? else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(base) = name.strip_suffix(".json") else {
            continue;
        };
        match read(root, base) {
            Ok(Some(g)) => out.push(g),
            Ok(None) => {}
            Err(e) => tracing::warn!("ignoring group file {name}: {e}"),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The group's run-slot locks that exist, whatever their index (a cap lowered
/// while more ran leaves some above it).
fn slot_locks(root: &Root, name: &str) -> Vec<PathBuf> {
    let prefix = format!("{name}.");
    let mut out = Vec::new();
    for entry in fs::read_dir(root.groups_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = entry.file_name().to_string_lossy().into_owned();
        let index = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".lock"));
        if index.is_some_and(|i| i.parse::<u32>().is_ok()) {
            out.push(entry.path());
        }
    }
    out
}

/// How many of the group's tasks run now: its run slots held by someone alive (or
/// whose task still runs).
pub fn running(root: &Root, name: &str, opts: &LockOptions) -> u32 {
    slot_locks(root, name)
        .iter()
        .filter(|l| is_held(l, opts))
        .count() as u32
}

/// Why a task of group `name` cannot start now, if it cannot: no such group, or as
/// many of its tasks run as it allows.
pub fn full(root: &Root, name: &str, opts: &LockOptions) -> Option<String> {
    match read(root, name) {
        Ok(Some(g)) => {
            let n = running(root, name, opts);
            (n >= g.parallel).then(|| at_cap(&g))
        }
        _ => Some(unknown(name)),
    }
}

fn at_cap(g: &Group) -> String {
    at_limit(&g.name, g.parallel)
}

/// Why a task of group `name` waits while `parallel` of its tasks run.
pub(crate) fn at_limit(name: &str, parallel: u32) -> String {
    format!("group {name} at its limit (parallel {parallel})")
}

/// Why a task of group `name` waits while no such group is defined.
pub(crate) fn unknown(name: &str) -> String {
    format!("no group {name} (conductor group add {name} --parallel N)")
}

/// Take one of group `name`'s run slots, as [`super::take_run_slot`] takes one of the
/// root's.
pub fn take_slot(root: &Root, name: &str, opts: &LockOptions) -> Result<GroupSlot> {
    let Some(g) = read(root, name)? else {
        return Ok(GroupSlot::Unknown(unknown(name)));
    };
    // Slots above a lowered cap still count until their tasks end.
    if running(root, name, opts) >= g.parallel {
        return Ok(GroupSlot::Full(at_cap(&g)));
    }
    let locks = (0..g.parallel).map(|i| root.group_slot_lock(name, i));
    Ok(match take_one_of(locks, opts)? {
        Some(l) => GroupSlot::Held(Box::new(l)),
        None => GroupSlot::Full(at_cap(&g)),
    })
}

/// The pending tasks of group `name`.
pub fn queued(queue: &Queue, name: &str, limit: u64) -> Result<u32> {
    Ok(queue
        .scan()?
        .iter()
        .filter_map(|p| Task::read(&p.path, limit).ok().flatten())
        .filter(|t| t.group.as_deref() == Some(name))
        .count() as u32)
}

/// Each group with its cap, running and queued tasks, and whether it is paused.
pub fn usage(root: &Root) -> Result<Vec<GroupUse>> {
    let config = crate::config::Config::load(&root.config_file())?;
    let opts = config.lock_options();
    let queue = Queue::new(root.clone());
    let tasks: Vec<Task> = queue
        .scan()?
        .iter()
        .filter_map(|p| Task::read(&p.path, config.max_task_bytes()).ok().flatten())
        .collect();
    let paused = super::pause::Paused::load(root);
    let spent = crate::budget::spent_today(root);
    Ok(list(root)?
        .into_iter()
        .map(|g| GroupUse {
            running: running(root, &g.name, &opts),
            queued: tasks
                .iter()
                .filter(|t| t.group.as_deref() == Some(g.name.as_str()))
                .count() as u32,
            paused: paused.group(&g.name),
            spent_today_usd: spent.group(&g.name),
            daily_budget_usd: g.daily_budget_usd,
            parallel: g.parallel,
            name: g.name,
        })
        .collect())
}

/// Remove group `name`: refused ([`Error::GroupInUse`]) while tasks of it wait or run.
pub fn remove(root: &Root, name: &str) -> Result<Group> {
    let g = require(root, name)?;
    let config = crate::config::Config::load(&root.config_file())?;
    let opts = config.lock_options();
    let running = running(root, name, &opts);
    let queued = queued(&Queue::new(root.clone()), name, config.max_task_bytes())?;
    if running > 0 || queued > 0 {
        return Err(Error::GroupInUse {
            name: name.to_string(),
            path: root.group_file(name),
            running,
            queued,
        });
    }
    fsio::remove_file_if_exists(&root.group_file(name))?;
    fsio::fsync_dir(&root.groups_dir())?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_caps_its_run_slots_and_follows_a_new_cap() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        super::super::init_root(&root).unwrap();
        let opts = LockOptions::default();
        assert!(matches!(
            take_slot(&root, "batch", &opts).unwrap(),
            GroupSlot::Unknown(_)
        ));
        let e = require(&root, "batch").unwrap_err().to_string();
        assert!(
            e.contains("no group batch") && e.contains("known groups: none"),
            "{e}"
        );
        add(&root, "batch", 1).unwrap();
        assert!(add(&root, "batch", 2).is_err(), "a second add is refused");
        let first = match take_slot(&root, "batch", &opts).unwrap() {
            GroupSlot::Held(l) => l,
            other => panic!("{other:?}"),
        };
        assert!(matches!(
            take_slot(&root, "batch", &opts).unwrap(),
            GroupSlot::Full(why) if why == "group batch at its limit (parallel 1)"
        ));
        set(&root, "batch", 2).unwrap();
        let second = match take_slot(&root, "batch", &opts).unwrap() {
            GroupSlot::Held(l) => l,
            other => panic!("{other:?}"),
        };
        assert_eq!(running(&root, "batch", &opts), 2);
        // Lowered while two run: the one above the new cap still counts.
        set(&root, "batch", 1).unwrap();
        drop(first);
        assert!(matches!(
            take_slot(&root, "batch", &opts).unwrap(),
            GroupSlot::Full(_)
        ));
        drop(second);
        assert!(matches!(
            take_slot(&root, "batch", &opts).unwrap(),
            GroupSlot::Held(_)
        ));
        remove(&root, "batch").unwrap();
        assert!(list(&root).unwrap().is_empty());
    }

    #[test]
    fn bad_names_and_caps_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        super::super::init_root(&root).unwrap();
        let e = add(&root, "a/b", 1).unwrap_err().to_string();
        assert!(e.contains("\"a/b\" is not a group name"), "{e}");
        let e = add(&root, "ok", 0).unwrap_err().to_string();
        assert!(e.contains("--parallel must be at least 1"), "{e}");
    }
}
