//! Finding a task by id wherever it is (`find`): the registry's word, then the files
//! that show its state, in the order a task moves through them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::ids::{self, Place};
use crate::inspect::read_task_file;
use crate::layout::{Root, Slot};
use crate::protocol::{TaskId, TaskResult};

use super::damaged;
use super::state::TaskState;

/// Where a task is, and the file that shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskLocation {
    /// The task's id.
    pub id: TaskId,
    /// Where it is in its life.
    pub state: TaskState,
    /// It was submitted to the shared queue (else delivered to a slot's inbox).
    pub queued: bool,
    /// The slot whose inbox holds it, that runs it, or that ran it; `None` while it is
    /// in the queue, and for a queued task withdrawn before it ran.
    #[serde(serialize_with = "slot_number")]
    pub slot: Option<Slot>,
    /// `task.json`, the pending entry, `running.json`, or the result.
    pub file: Option<PathBuf>,
}

fn slot_number<S: serde::Serializer>(
    slot: &Option<Slot>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    slot.map(|n| n.0).serialize(s)
}

/// How often a task seen nowhere is looked for again (it may be between two places:
/// a withdrawal renames it out before its result is written, a few fsyncs later; on a
/// loaded machine that took over the 50 ms once allowed). Only a task truly gone pays
/// the whole half second, once.
const RELOOKS: u32 = 100;
const RELOOK_PAUSE: Duration = Duration::from_millis(5);

/// Find task `id` anywhere on the root. `None` when no file and no registry entry
/// knows the id.
pub fn find(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    id.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    for look in 0..RELOOKS {
        let place = ids::lookup(root, id)?;
        let found = match place {
            Some(Place::Worker(slot)) => in_slot(root, id, slot)?,
            Some(Place::Queue) => in_queue(root, id)?,
            None => return unregistered(root, id),
        };
        if found.is_some() {
            return Ok(found);
        }
        if look + 1 < RELOOKS {
            std::thread::sleep(RELOOK_PAUSE);
        }
    }
    let place = ids::lookup(root, id)?;
    Ok(Some(TaskLocation {
        id: id.clone(),
        state: TaskState::Gone,
        queued: place == Some(Place::Queue),
        slot: match place {
            Some(Place::Worker(s)) => Some(s),
            _ => None,
        },
        file: Some(root.id_entry(id)),
    }))
}

fn holds(path: &Path, id: &TaskId) -> bool {
    read_task_file(path).and_then(|f| f.task_id).as_ref() == Some(id)
}

fn located(
    id: &TaskId,
    state: TaskState,
    queued: bool,
    slot: Option<Slot>,
    file: PathBuf,
) -> TaskLocation {
    TaskLocation {
        id: id.clone(),
        state,
        queued,
        slot,
        file: Some(file),
    }
}

/// A task delivered to `slot`'s inbox: looked for in its life's order.
fn in_slot(root: &Root, id: &TaskId, slot: Slot) -> Result<Option<TaskLocation>> {
    let w = root.worker(slot);
    if holds(&w.task(), id) {
        return Ok(Some(located(
            id,
            TaskState::Waiting,
            false,
            Some(slot),
            w.task(),
        )));
    }
    let kept = w.result_for(id);
    let finished = |r: TaskResult| {
        located(
            id,
            TaskState::of_result(&r),
            false,
            Some(slot),
            kept.clone(),
        )
    };
    if holds(&w.running(), id) {
        // The worker publishes the result before it retires running.json: a result
        // already there means the task has finished.
        if let Some(r) = TaskResult::read(&kept)? {
            return Ok(Some(finished(r)));
        }
        return Ok(Some(located(
            id,
            TaskState::Running,
            false,
            Some(slot),
            w.running(),
        )));
    }
    Ok(TaskResult::read(&kept)?.map(finished))
}

/// The slot whose `running.json` holds task `id`.
pub(crate) fn running_slot(root: &Root, id: &TaskId) -> Result<Option<Slot>> {
    Ok(root
        .slots()?
        .into_iter()
        .find(|s| holds(&root.worker(*s).running(), id)))
}

/// A task submitted to the queue: looked for in its life's order.
fn in_queue(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    if let Some(p) = root.pending_entry(id)? {
        return Ok(Some(located(id, TaskState::Queued, true, None, p)));
    }
    let path = root.queue_results().join(format!("{id}.json"));
    let finished = |(r, file): (TaskResult, PathBuf)| {
        let slot = r.worker.and_then(|n| Slot::checked(n).ok());
        located(id, TaskState::of_result(&r), true, slot, file)
    };
    if let Some(slot) = running_slot(root, id)? {
        // Published before running.json is retired: the task has finished.
        if let Some(r) = damaged::read_queue_result(root, id, &path)? {
            return Ok(Some(finished(r)));
        }
        let file = root.worker(slot).running();
        return Ok(Some(located(
            id,
            TaskState::Running,
            true,
            Some(slot),
            file,
        )));
    }
    Ok(damaged::read_queue_result(root, id, &path)?.map(finished))
}

/// An id without a registry entry: an original client's task not yet claimed, or a
/// root from before the registry. One look in each slot, and the queue's results.
fn unregistered(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    let slots = root.slots()?;
    for &slot in &slots {
        if let Some(found) = in_slot(root, id, slot)? {
            return Ok(Some(found));
        }
    }
    in_queue(root, id)
}

pub(crate) fn no_such_task(root: &Root, id: &TaskId) -> Error {
    Error::NoSuchTask {
        id: id.to_string(),
        root: root.path().to_path_buf(),
    }
}
