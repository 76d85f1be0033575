//! What recovery does with the task a dead worker left, once decided: its kept end
//! announced, the task delivered again (its worktree concluded first), or ended.

use std::io;

use crate::error::Result;
use crate::fsio::{self, Durability};
use crate::layout::{Root, WorkerPaths};
use crate::ledger::Ledger;
use crate::protocol::{Outcome, Status, Task, TaskId, TaskResult};
use crate::queue;

use super::decide::{disposition, Disposition};
use super::report::{Found, RecoveryReport};

/// Act on what is decided for the task a dead worker left (`found`): announce its
/// kept end, deliver it again, or end it; noted in `report`.
pub(super) fn settle_leftover(
    root: &Root,
    paths: &WorkerPaths,
    ledger: &Ledger<'_>,
    found: &Found,
    report: &mut RecoveryReport,
) -> Result<()> {
    let id = found.id.clone();
    let tell = |st: Status| fsio::write_json(&paths.status(), &st, Durability::Atomic);
    match disposition(found.facts(paths)) {
        Disposition::AnnounceKept => {
            ledger.announce_kept(&id, tell)?;
            crate::worktree::forget_record(&paths.dir);
            report.already_finished = Some(id);
        }
        Disposition::Redeliver { to_queue } => {
            let task = found.task.clone().expect("a re-delivered task was read");
            // The next attempt goes on in the same worktree, from the partial work.
            if let Some(change) = conclude_worktree(paths, found) {
                tracing::info!("task {id}: {}", change.note.as_deref().unwrap_or(""));
            }
            crate::worktree::forget_record(&paths.dir);
            if redeliver(root, paths, task, &id, to_queue, &found.why(), true)? {
                report.redelivered = Some(id);
            } else {
                end_leftover(ledger, found, Outcome::Interrupted, tell)?;
                report.interrupted = Some(id);
            }
        }
        Disposition::Defer { to_queue } => {
            let task = found.task.clone().expect("a deferred task was read");
            if redeliver(
                root,
                paths,
                task,
                &id,
                to_queue,
                "finishing its deferral",
                false,
            )? {
                report.redelivered = Some(id);
            } else {
                end_leftover(ledger, found, Outcome::Interrupted, tell)?;
                report.interrupted = Some(id);
            }
        }
        Disposition::Cancelled => {
            let _ = fsio::remove_file_if_exists(&paths.cancel());
            end_leftover(ledger, found, Outcome::Cancelled, tell)?;
            report.interrupted = Some(id);
        }
        Disposition::Interrupted => {
            end_leftover(ledger, found, Outcome::Interrupted, tell)?;
            report.interrupted = Some(id);
        }
    }
    Ok(())
}

/// Put the task back for its next attempt. `false` when the inbox holds another task
/// (then it cannot go back and ends as interrupted).
fn redeliver(
    root: &Root,
    paths: &WorkerPaths,
    mut task: Task,
    id: &TaskId,
    to_queue: bool,
    why: &str,
    next_attempt: bool,
) -> Result<bool> {
    if next_attempt {
        task.attempt = Some(task.attempt() + 1);
    }
    task.id = Some(id.clone());
    let running = paths.running();
    if to_queue {
        // Back to the queue, for whichever worker is free first.
        queue::requeue(root, &running, &task)?;
        tracing::info!("requeued task {id} as attempt {} ({why})", task.attempt());
        return Ok(true);
    }
    let bytes = fsio::to_json_bytes(&task);
    match fsio::write_new(&paths.task(), &bytes, Durability::Durable) {
        Ok(()) => {
            fsio::remove_file_if_exists(&running)?;
            tracing::info!(
                "re-delivered task {id} as attempt {} ({why})",
                task.attempt()
            );
            Ok(true)
        }
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
            // An earlier recovery may have re-delivered it and died before removing
            // running.json: then the inbox already holds this very task.
            if inbox_holds(paths, id) {
                fsio::remove_file_if_exists(&running)?;
                return Ok(true);
            }
            tracing::warn!("cannot re-deliver task {id}: the inbox holds another task");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

fn inbox_holds(paths: &WorkerPaths, id: &TaskId) -> bool {
    fsio::read_bounded(&paths.task(), fsio::TASK_SIZE_LIMIT)
        .ok()
        .flatten()
        .and_then(|b| Task::salvage_id(&b))
        .as_ref()
        == Some(id)
}

/// Give a leftover task its terminal result (`interrupted` or `cancelled`).
fn end_leftover(
    ledger: &Ledger<'_>,
    found: &Found,
    outcome: Outcome,
    tell: impl FnOnce(Status) -> Result<()>,
) -> Result<()> {
    let mut r = match outcome {
        Outcome::Cancelled => TaskResult::failed(found.id.clone(), outcome, "cancelled"),
        _ => TaskResult::failed(found.id.clone(), Outcome::Interrupted, found.why()),
    };
    r.worker = Some(ledger.paths.slot.0);
    r.attempt = Some(found.task.as_ref().map_or(1, Task::attempt));
    r.started_at = found.status.as_ref().and_then(|s| s.started_at.clone());
    r.worktree = conclude_worktree(ledger.paths, found);
    // An `until` task tells the rounds it ran before its worker died.
    r.until = crate::protocol::until::read_record(&ledger.paths.dir, &found.id);
    ledger.finish(&r, tell)?;
    crate::worktree::forget_record(&ledger.paths.dir);
    crate::protocol::until::forget_record(&ledger.paths.dir);
    Ok(())
}

/// The dead worker's task worktree, if it had one: what its agent left is committed
/// on the task's branch (the worktree is kept; a branch that changed nothing is removed)
/// and the change is what the result tells of it.
fn conclude_worktree(
    paths: &WorkerPaths,
    found: &Found,
) -> Option<crate::protocol::WorktreeChange> {
    let rec = crate::worktree::read_record(&paths.dir, &found.id)?;
    if !rec.path.exists() {
        // The worker died before `git worktree add` finished: nothing of it is kept.
        crate::worktree::remove(&rec.repo, &rec.path, None);
        return None;
    }
    let prompt = found.task.as_ref().map_or("", |t| t.prompt.as_str());
    let message = crate::worktree::commit_message(prompt, &found.id);
    let note = format!(
        "{}; recovery kept the worktree {} and committed the partial work on {}",
        found.why(),
        rec.path.display(),
        rec.branch
    );
    match crate::worktree::conclude(&rec, &message, Some(&note)) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::error!("task {}: committing its partial work: {e}", found.id);
            Some(crate::worktree::kept_as_is(
                &rec,
                format!(
                    "{note}; but committing failed ({e}): the worktree is as the agent left it"
                ),
            ))
        }
    }
}
