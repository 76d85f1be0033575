//! The callbacks and hooks a process started and has not reaped yet, recorded in a
//! slot (`workers/<N>/callbacks/<pgid>.json`) for whoever recovers the slot should that
//! process die first ([`crate::recovery::callbacks`] ends them): the on-finish
//! callback, `approvalCallback`, `budgetCallback`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::layout::WorkerPaths;
use crate::protocol::TaskId;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    /// The group's leader (`sh -c CALLBACK`), whose pid is the group's id.
    pub(crate) pid: u32,
    /// Its start time (clock ticks since boot), to tell a reused pid.
    pub(crate) start_time: Option<u64>,
    /// The host that started it ([`crate::host::host_id`]): nobody else may signal it.
    pub(crate) host_id: String,
    pub(crate) task_id: String,
    /// The worker that started it, and its start time: while it lives (a live worker
    /// finishing its own slot's leftover) its threads time the callback out.
    pub(crate) worker_pid: u32,
    pub(crate) worker_start_time: Option<u64>,
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
pub(crate) fn records(paths: &WorkerPaths) -> Vec<(PathBuf, Record)> {
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
