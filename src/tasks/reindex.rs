//! Rebuilding the task-id registry (`ids/`) from the files tasks leave, should it be lost.
//!
//! Entries are written (atomically, not fsynced) before a task is delivered and never
//! rewritten; one lost to a power loss is restored when a worker claims its task. This
//! is for a registry deleted or damaged by hand, or a root from before it existed. Every id found in a slot's `results/`, `tasks/`, `task.json` or
//! `running.json`, in `queue/pending/` or `queue/results/` gets an entry if it has none:
//! `queue` when the task came through the queue (a queue result or pending entry, or a
//! task file whose `origin` says so), else the slot's. An existing entry is never
//! changed. A new entry takes the time of the file it was found from, so `conductor tasks`
//! keeps its order.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fsio::{self, TASK_SIZE_LIMIT};
use crate::ids::{self, Place};
use crate::layout::Root;
use crate::protocol::{Task, TaskId};
use crate::queue::{PendingName, ORIGIN_QUEUE};

/// What [`rebuild`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reindexed {
    /// Entries created.
    pub added: usize,
    /// Ids that already had an entry for the place found.
    pub present: usize,
    /// Ids whose entry names another place than their files (left alone), each with why.
    pub conflicts: Vec<String>,
}

/// Where the files say an id went, and the oldest file that says it.
struct Found {
    place: Place,
    from: PathBuf,
}

/// Ids named `<id>.json` in `dir`.
fn json_ids(dir: &Path) -> Vec<(TaskId, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = TaskId::parse(name.strip_suffix(".json")?).ok()?;
            Some((id, e.path()))
        })
        .collect()
}

fn came_from_queue(task_file: &Path) -> bool {
    Task::read(task_file, TASK_SIZE_LIMIT)
        .ok()
        .flatten()
        .is_some_and(|t| t.origin.as_deref() == Some(ORIGIN_QUEUE))
}

/// Gather every id the files know, and where each went.
fn scan(root: &Root) -> Result<BTreeMap<String, (TaskId, Found)>> {
    let mut found: BTreeMap<String, (TaskId, Found)> = BTreeMap::new();
    let mut note = |id: TaskId, place: Place, from: PathBuf| {
        found
            .entry(id.to_string())
            .and_modify(|(_, f)| {
                // The queue's word wins: its tasks also leave files in the slot that ran them.
                if place == Place::Queue {
                    f.place = Place::Queue;
                }
            })
            .or_insert((id, Found { place, from }));
    };
    for (id, path) in json_ids(&root.queue_results()) {
        note(id, Place::Queue, path);
    }
    if let Ok(entries) = fs::read_dir(root.queue_pending()) {
        for e in entries.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(PendingName::parse) {
                note(p.id, Place::Queue, e.path());
            }
        }
    }
    for slot in root.slots()? {
        let w = root.worker(slot);
        for (id, record) in json_ids(&w.tasks_dir()) {
            let place = if came_from_queue(&record) {
                Place::Queue
            } else {
                Place::Worker(slot)
            };
            note(id, place, record);
        }
        for (id, kept) in json_ids(&w.results_dir()) {
            note(id, Place::Worker(slot), kept);
        }
        for file in [w.task(), w.running()] {
            if let Some(id) = crate::inspect::read_task_file(&file).and_then(|f| f.task_id) {
                let place = if file == w.running() && came_from_queue(&file) {
                    Place::Queue
                } else {
                    Place::Worker(slot)
                };
                note(id, place, file);
            }
        }
    }
    Ok(found)
}

/// Give every id the files know an entry in `ids/` if it has none (see the module doc).
pub fn rebuild(root: &Root) -> Result<Reindexed> {
    crate::trust::verify_root(root)?;
    fsio::ensure_dir(&root.ids_dir())?;
    let mut report = Reindexed::default();
    for (_, (id, f)) in scan(root)? {
        // A generated id keeps its handle, so no new id is made with it.
        ids::claim_handle(root, &id)?;
        match ids::lookup(root, &id)? {
            Some(p) if p == f.place => report.present += 1,
            Some(p) => report.conflicts.push(format!(
                "task {id}: {} says {p}, but {} says {}",
                root.id_entry(&id).display(),
                f.from.display(),
                f.place
            )),
            None => {
                ids::claim(root, &id, f.place)?;
                backdate(&root.id_entry(&id), &f.from);
                report.added += 1;
            }
        }
    }
    Ok(report)
}

/// Give a rebuilt entry the time of the file it was found from.
fn backdate(entry: &Path, from: &Path) {
    let Ok(t) = fs::symlink_metadata(from).and_then(|m| m.modified()) else {
        return;
    };
    let set = fs::File::options()
        .write(true)
        .open(entry)
        .and_then(|f| f.set_modified(t.min(SystemTime::now())));
    if let Err(e) = set {
        tracing::debug!("{}", Error::io("set the time of", entry, e));
    }
}
