//! The callbacks a worker started and has not reaped yet, recorded in its slot
//! (`workers/<N>/callbacks/<pgid>.json`): whoever recovers the slot after the worker
//! died ends them, since nobody else would ever time them out.
//!
//! A record is written once the callback's process group exists and removed once its
//! worker reaped it. Recovery signals a recorded group only when it is still the one
//! started for the task (leader's start time, our uid, the task's marker in its
//! environment: see [`super::leftover_agent_is_ours`]), never a reused pid, and only
//! on the host that started it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::group;
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::layout::WorkerPaths;
use crate::protocol::TaskId;

/// How long a recovered slot's callbacks get after SIGTERM before SIGKILL (what their
/// own worker would have given them).
pub const KILL_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    /// The group's leader (`sh -c CALLBACK`), whose pid is the group's id.
    pid: u32,
    /// Its start time (clock ticks since boot), to tell a reused pid.
    start_time: Option<u64>,
    /// The host that started it ([`crate::host::host_id`]): nobody else may signal it.
    host_id: String,
    task_id: String,
    /// The worker that started it, and its start time: while it lives (a live worker
    /// finishing its own slot's leftover) its threads time the callback out.
    worker_pid: u32,
    worker_start_time: Option<u64>,
}

/// `workers/<N>/callbacks/`.
pub fn dir(paths: &WorkerPaths) -> PathBuf {
    paths.dir.join("callbacks")
}

/// Record callback group `pid` (task `id`) on the slot; the record's path, to
/// [`forget`] once it is reaped. A failure is logged: the callback still runs and its
/// own worker still times it out.
pub fn record(paths: &WorkerPaths, pid: u32, id: &TaskId) -> Option<PathBuf> {
    let rec = Record {
        pid,
        start_time: crate::procfs::stat(pid).map(|s| s.start_time),
        host_id: crate::host::host_id().to_string(),
        task_id: id.to_string(),
        worker_pid: std::process::id(),
        worker_start_time: crate::procfs::stat(std::process::id()).map(|s| s.start_time),
    };
    let path = dir(paths).join(format!("{pid}.json"));
    let written = fsio::ensure_dir(&dir(paths))
        .and_then(|()| fsio::write_json(&path, &rec, Durability::Atomic));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!("callback for task {id}: cannot record it for recovery: {e}");
            None
        }
    }
}

/// Remove a callback's record: it was reaped.
pub fn forget(path: &Path) {
    if let Err(e) = fsio::remove_file_if_exists(path) {
        tracing::warn!("{e}");
    }
}

/// The records on the slot, with their paths (unreadable ones are logged and removed).
fn records(paths: &WorkerPaths) -> Vec<(PathBuf, Record)> {
    let Ok(files) = fsio::regular_files(&dir(paths)) else {
        return Vec::new();
    };
    files
        .into_iter()
        .filter(|(name, _, _)| name.ends_with(".json") && !fsio::is_temp_name(name))
        .filter_map(
            |(_, path, _)| match fsio::read_json::<Record>(&path, SMALL_FILE_LIMIT) {
                Ok(Some(r)) => Some((path, r)),
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!("removing an unreadable callback record: {e}");
                    forget(&path);
                    None
                }
            },
        )
        .collect()
}

/// Whether the slot holds a record of a callback started on this host by a worker now
/// gone: it died before reaping it.
pub fn any_left_here(paths: &WorkerPaths) -> bool {
    records(paths).iter().any(|(_, r)| left_here(r))
}

/// A record of a callback started on this host by a worker that is gone.
fn left_here(r: &Record) -> bool {
    r.host_id == crate::host::host_id()
        && !crate::host::same_process_alive(r.worker_pid, r.worker_start_time)
}

/// End the callbacks a dead worker left on its slot (the caller holds its gate): each
/// group still the one started for its task gets SIGTERM, then SIGKILL after
/// [`KILL_GRACE`]; their records go. Records of another host's callbacks stay, for
/// that host's recovery, and so do those of a worker still alive (its own threads
/// time them out). Returns how many groups were signalled.
pub fn end_left(paths: &WorkerPaths) -> usize {
    let mut ended = Vec::new();
    for (path, r) in records(paths) {
        if !left_here(&r) {
            continue;
        }
        let id = TaskId::from(r.task_id.as_str());
        match group::find(r.pid, r.start_time, &id) {
            group::Found::Ours => {
                tracing::warn!(
                    "stopping callback group {} of task {id}: its worker died before it ended",
                    r.pid
                );
                crate::agent::signal_group(r.pid, Signal::SIGTERM);
                ended.push(r.pid);
            }
            group::Found::Stranger => tracing::info!(
                "callback record of task {id}: group {} is no longer its callback",
                r.pid
            ),
            group::Found::Gone => {}
        }
        forget(&path);
    }
    let deadline = std::time::Instant::now() + KILL_GRACE;
    for pgid in &ended {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !group::wait_gone(*pgid, left) {
            crate::agent::signal_group(*pgid, Signal::SIGKILL);
            group::wait_gone(*pgid, Duration::from_secs(5));
        }
    }
    ended.len()
}
