//! A task's own git worktree, on the worker's side: made before its agent starts
//! (recorded first in `worktree.json`, so recovery can find it), concluded when the
//! agent ends (leftovers committed, the branch measured), forgotten once the result is
//! out. The git work itself is [`crate::worktree`]'s.

use std::path::Path;

mod conclude;
mod setup;

pub(super) use conclude::conclude;

use super::admit::Hold;
use super::slot_server::Shared;
use crate::layout::WorkerPaths;
use crate::protocol::{Outcome, Task, TaskResult, WorktreeRecord};
use crate::worktree;

/// The task's worktree, made and recorded, when it runs in one (its own `worktree`, else
/// the root's default). Err: the task's rejected result (not a repository, a bad base,
/// its branch taken …), with nothing left behind.
///
/// A new worktree is then readied ([`setup::ready`]: its port, held in `hold`
/// and set in `task`'s environment, and config.json's `worktreeSetup`); a failed setup
/// is the task's failed result, its worktree concluded as any failed task's.
pub(super) fn prepare(
    shared: &Shared,
    paths: &WorkerPaths,
    task: &mut Task,
    hold: &mut Hold,
) -> Result<Option<WorktreeRecord>, Box<TaskResult>> {
    let id = &task.id.clone().expect("id ensured at claim");
    let wanted = task.worktree.or(shared.config.worktree).unwrap_or(false);
    if !wanted {
        return Ok(None);
    }
    let reject = |e: crate::Error| {
        Box::new(TaskResult::failed(
            id.clone(),
            Outcome::Rejected,
            format!("rejected: {e}"),
        ))
    };
    let dir: &Path = match task.dir.as_deref() {
        Some(d) => {
            crate::workdir::check(d).map_err(reject)?;
            d
        }
        None => &shared.opts.project_dir,
    };
    let include = task.include_uncommitted.unwrap_or(false);
    let req = worktree::Request {
        dir,
        id,
        base: task.base.as_deref(),
        include_uncommitted: include,
        folder: shared.config.worktree_dir.as_deref(),
    };
    let rec = worktree::plan(&req).map_err(reject)?;
    // Recorded before it exists: a crash after `git worktree add` leaves a worktree
    // recovery knows of, never an unknown one.
    RECORDED.store(true, std::sync::atomic::Ordering::Relaxed);
    worktree::write_record(&paths.dir, &rec).map_err(reject)?;
    if let Err(e) = worktree::make(&rec, include) {
        worktree::forget_record(&paths.dir);
        return Err(reject(e));
    }
    let mut rec = rec;
    setup::ready(shared, paths, task, &mut rec, hold)?;
    Ok(Some(rec))
}

/// Forget the slot's worktree record: the task's result tells of it now. Only a
/// process that wrote one has one to forget (a predecessor's is settled by recovery at
/// start): a worker that never ran a worktree task spares the removal (a failed
/// `unlink` a task).
pub(super) fn forget_record(slot_dir: &Path) {
    if RECORDED.load(std::sync::atomic::Ordering::Relaxed) {
        worktree::forget_record(slot_dir);
    }
}

/// Whether this process ever wrote a worktree record (never reset: with many slots,
/// another slot's may still be there).
static RECORDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A worktree task whose agent was refused tool calls and changed nothing did not do its
/// work, whatever its exit code: it fails, its error naming the first refusal. (Refused
/// but with changes, it succeeds; every view shows the refusals as a warning.)
pub(super) fn fail_if_refused_and_unchanged(result: &mut TaskResult) {
    let unchanged = result.worktree.as_ref().is_some_and(|w| !w.kept);
    let Some(first) = result.denials.first() else {
        return;
    };
    if !result.success || !unchanged {
        return;
    }
    let more = match result.denials.len() {
        1 => String::new(),
        n => format!(" (and {} more refusal(s))", n - 1),
    };
    result.success = false;
    result.outcome = Some(Outcome::Failure);
    result.error = Some(format!(
        "the agent was refused {}{more}; it changed nothing",
        first.describe()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Denial, TaskId, WorktreeChange};

    fn result(kept: bool, denials: Vec<Denial>) -> TaskResult {
        let mut r = TaskResult::failed(TaskId::from("t1"), Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.denials = denials;
        r.worktree = Some(WorktreeChange {
            repo: "/r".into(),
            path: "/r.conductor-worktrees/t1".into(),
            branch: "conductor/t1".into(),
            base_commit: "a".into(),
            head_commit: if kept { "b" } else { "a" }.into(),
            files_changed: u64::from(kept),
            insertions: 0,
            deletions: 0,
            kept,
            committed_for_agent: false,
            note: None,
        });
        r
    }

    fn write_refused() -> Denial {
        Denial {
            tool: "Write".into(),
            input: "src/x.rs".into(),
            reason: Some("a sensitive file".into()),
        }
    }

    #[test]
    fn refused_and_unchanged_fails_naming_the_first_refusal() {
        let mut r = result(false, vec![write_refused(), write_refused()]);
        fail_if_refused_and_unchanged(&mut r);
        assert!(!r.success);
        assert_eq!(r.outcome, Some(Outcome::Failure));
        assert_eq!(
            r.error.as_deref(),
            Some(
                "the agent was refused Write(src/x.rs): a sensitive file \
                 (and 1 more refusal(s)); it changed nothing"
            )
        );
    }

    #[test]
    fn refused_with_changes_or_unchanged_without_refusals_still_succeeds() {
        for mut r in [result(true, vec![write_refused()]), result(false, vec![])] {
            fail_if_refused_and_unchanged(&mut r);
            assert!(r.success, "{r:?}");
            assert_eq!(r.error, None);
        }
    }
}
