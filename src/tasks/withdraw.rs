//! Cancelling a task by id: withdrawn from an inbox or the queue before it starts, stopped by its worker once it runs.

use std::fs;
use std::io;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::inspect::read_task_file;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::maintenance::{request_cancel, CancelOutcome};
use crate::protocol::{Outcome, TaskId, TaskResult};
use crate::queue::Queue;

use super::locate::{find, no_such_task};
use super::state::TaskState;

/// What [`cancel_task`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CancelTask {
    /// Taken out of a slot's inbox (`slot`) or the queue (`slot: None`) before any
    /// worker claimed it, and answered with a `cancelled` result.
    Withdrawn {
        /// The slot whose inbox held it (`None`: the shared queue).
        slot: Option<Slot>,
    },
    /// It runs on `slot`: its worker was asked (`workers/N/cancel`) to stop it; the
    /// `cancelled` result follows when it has.
    Requested {
        /// The slot that runs it.
        slot: Slot,
    },
    /// It runs on `slot`, but no live worker serves the slot to act on a cancel.
    NoLiveWorker {
        /// The slot that holds it.
        slot: Slot,
    },
    /// It had already finished in this state; nothing was done.
    Finished {
        /// The state it ended in.
        state: TaskState,
    },
}

/// How many times a cancel follows a task that moves while it is being cancelled (claimed
/// from the inbox or queue just as it is withdrawn).
const CHASES: usize = 5;

/// Cancel task `id`, wherever it is. A waiting (inbox) or queued task is withdrawn by
/// renaming its file out — that rename and a worker's claim cannot both succeed — and
/// only then answered `cancelled`; one that a worker claimed first is cancelled where it
/// runs. [`Error::NoSuchTask`] when nothing knows the id.
pub fn cancel_task(root: &Root, id: &TaskId) -> Result<CancelTask> {
    crate::trust::verify_root(root)?;
    for _ in 0..CHASES {
        let Some(loc) = find(root, id)? else {
            return Err(no_such_task(root, id));
        };
        match (loc.state, loc.slot) {
            // Either arm falls through to a new look when a worker claimed it first.
            (TaskState::Waiting, Some(slot)) if withdraw_inbox(root, slot, id)? => {
                return Ok(CancelTask::Withdrawn { slot: Some(slot) });
            }
            (TaskState::Queued, _) if Queue::new(root.clone()).withdraw_pending(id)? => {
                return Ok(CancelTask::Withdrawn { slot: None });
            }
            (TaskState::Running, Some(slot)) => {
                match request_cancel(root, slot, Some(id))? {
                    CancelOutcome::Requested { .. } => return Ok(CancelTask::Requested { slot }),
                    CancelOutcome::NoLiveWorker { .. } => {
                        return Ok(CancelTask::NoLiveWorker { slot })
                    }
                    CancelOutcome::IdNotReadable => {
                        return Err(Error::CancelMidWrite {
                            slot: slot.0,
                            task: id.to_string(),
                        })
                    }
                    // It ended (or moved) since we looked: look again.
                    _ => {}
                }
            }
            (state, _) if state.is_finished() => return Ok(CancelTask::Finished { state }),
            _ => {}
        }
    }
    Err(Error::CancelKeptMoving {
        task: id.to_string(),
    })
}

/// Take task `id` out of `slot`'s inbox and answer it `cancelled`. `Ok(false)` when the
/// inbox no longer holds it (its worker claimed it first).
pub(crate) fn withdraw_inbox(root: &Root, slot: Slot, id: &TaskId) -> Result<bool> {
    let w = root.worker(slot);
    let inbox = w.task();
    let dir = w.rejected_dir();
    fsio::ensure_dir(&dir)?;
    let stamp = humantime::format_rfc3339_millis(SystemTime::now())
        .to_string()
        .replace(':', "");
    let aside = dir.join(format!("{stamp}-{id}.task.json"));
    // An original client's task is registered only when claimed: take its id before it
    // leaves the inbox, so a waiter never sees it nowhere (between the move and the
    // answer) and ends "no such task". If its worker claims it first, the worker's own
    // registration names the same place, so nothing changes.
    if let Err(e) = crate::ids::claim(root, id, crate::ids::Place::Worker(slot)) {
        tracing::warn!("registering withdrawn task {id}: {e}");
    }
    match fs::rename(&inbox, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("withdraw (move out of the inbox)", &inbox, e)),
    }
    fsio::fsync_dir(&w.dir)?;
    let moved = read_task_file(&aside).and_then(|f| f.task_id);
    if moved.as_ref() != Some(id) {
        // Between our look and our rename the worker claimed our task and the next one
        // was delivered: that one goes back, never replacing a newer delivery.
        return put_back(&w, &aside, id, moved).map(|()| false);
    }
    answer(
        &w,
        &aside,
        id,
        &format!("withdrawn from worker {slot}'s inbox"),
    )?;
    Ok(true)
}

/// Take task `id` back out of `slot`'s inbox undelivered, to give it to another slot:
/// no result, its id free again. `Ok(false)` when the inbox no longer holds it (its
/// worker claimed it first; the rename that takes it back and the claim cannot both
/// succeed).
pub(crate) fn take_back(root: &Root, slot: Slot, id: &TaskId) -> Result<bool> {
    let w = root.worker(slot);
    let inbox = w.task();
    let aside = w.dir.join(format!(".{id}.taken-back.json"));
    match fs::rename(&inbox, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("take back (move out of the inbox)", &inbox, e)),
    }
    let moved = read_task_file(&aside).and_then(|f| f.task_id);
    if moved.as_ref() != Some(id) {
        // The worker claimed ours and another task was delivered since: that one stays.
        return put_back(&w, &aside, id, moved).map(|()| false);
    }
    crate::ids::release(root, id, crate::ids::Place::Worker(slot))?;
    fsio::remove_file_if_exists(&aside)?;
    Ok(true)
}

/// Return a task withdrawn by mistake to the inbox; if the inbox was filled again
/// meanwhile, it stays withdrawn and is answered (its waiters must not hang).
fn put_back(
    w: &WorkerPaths,
    aside: &std::path::Path,
    wanted: &TaskId,
    moved: Option<TaskId>,
) -> Result<()> {
    match fs::hard_link(aside, w.task()) {
        Ok(()) => fsio::remove_file_if_exists(aside).map(drop),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            tracing::warn!(
                "a cancel of task {wanted} took task {} out of worker {}'s inbox, and the inbox was refilled before it could go back; it is kept as {}",
                moved.as_ref().map_or("(id unreadable)".to_string(), TaskId::to_string),
                w.slot,
                aside.display()
            );
            match moved {
                Some(other) => answer(w, aside, &other, &format!("withdrawn from worker {}'s inbox by a cancel of task {wanted} that raced with its delivery; send it again", w.slot)),
                None => Ok(()),
            }
        }
        Err(e) => Err(Error::io("put back into the inbox", w.task(), e)),
    }
}

/// Record the withdrawn task (`tasks/<id>.json`, so `retry` and `tasks` know it), say
/// why beside it, and publish its `cancelled` result. `result.json` is left alone: it
/// belongs to the task the worker runs or ran last, which original clients read.
fn answer(w: &WorkerPaths, aside: &std::path::Path, id: &TaskId, why: &str) -> Result<()> {
    let mut reason = aside.as_os_str().to_os_string();
    reason.push(".reason");
    fsio::write_replace(
        std::path::Path::new(&reason),
        format!("cancelled before it started: {why} (conductor cancel)\n").as_bytes(),
        Durability::Atomic,
    )?;
    fsio::ensure_dir(&w.tasks_dir())?;
    match fs::hard_link(aside, w.task_record(id)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("record task as", w.task_record(id), e)),
    }
    let mut r = TaskResult::failed(
        id.clone(),
        Outcome::Cancelled,
        format!("cancelled before it started ({why})"),
    );
    r.worker = Some(w.slot.0);
    fsio::ensure_dir(&w.results_dir())?;
    match fsio::write_new(
        &w.result_for(id),
        &fsio::to_json_bytes(&r),
        Durability::Durable,
    ) {
        // An earlier task under this id answered already: its result stands.
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
            tracing::warn!(
                "{} exists; not answering the withdrawn task over it",
                w.result_for(id).display()
            );
            Ok(())
        }
        other => other,
    }
}
