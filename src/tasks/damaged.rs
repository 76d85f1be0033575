//! A damaged queue result: the whole copies a finished task leaves on its slot stand in.
//!
//! A queued task's result is published twice, as one file linked into two places: the
//! slot's `results/<id>.json` and `queue/results/<id>.json`. Where the queue's name was
//! later replaced by a cut or empty file (a full disk, a copy by hand, a filesystem
//! without links), the slot's copy is still whole, and the slot's task record
//! (`tasks/<id>.json`) still holds what was asked. Readers use those rather than fail.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::layout::{Root, Slot};
use crate::protocol::{TaskId, TaskResult};

/// The queue's result of task `id` at `path`, and the file it was read from: when that
/// file is damaged, the first whole copy a slot keeps, else the damage's error.
pub(super) fn read_queue_result(
    root: &Root,
    id: &TaskId,
    path: &Path,
) -> Result<Option<(TaskResult, PathBuf)>> {
    match TaskResult::read(path) {
        Ok(r) => Ok(r.map(|r| (r, path.to_path_buf()))),
        Err(damage @ Error::BadFile { .. }) => {
            for slot in root.slots()? {
                let copy = root.worker(slot).result_for(id);
                if let Ok(Some(r)) = TaskResult::read(&copy) {
                    if &r.task_id == id {
                        tracing::warn!(
                            "{} {}; using the slot's copy {}",
                            path.display(),
                            damage_text(&damage),
                            copy.display()
                        );
                        return Ok(Some((r, copy)));
                    }
                }
            }
            Err(damage)
        }
        Err(e) => Err(e),
    }
}

fn damage_text(e: &Error) -> String {
    match e {
        Error::BadFile { problem, .. } => problem.to_string(),
        other => other.to_string(),
    }
}

/// The slot that ran queued task `id`, from its task record, for a task whose queue
/// result is there but damaged and no slot keeps a whole copy: the task has finished
/// (only a finished task has a queue result) and its record can run it again.
pub fn slot_of_damaged(root: &Root, id: &TaskId) -> Result<Option<Slot>> {
    let queued = root.queue_results().join(format!("{id}.json"));
    if !matches!(TaskResult::read(&queued), Err(Error::BadFile { .. })) {
        return Ok(None);
    }
    Ok(root
        .slots()?
        .into_iter()
        .find(|s| crate::protocol::Task::file_holds(&root.worker(*s).task_record(id), id)))
}
