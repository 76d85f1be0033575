//! Concluding a task's worktree when its agent ends: what it left committed, what the
//! branch holds said.

use crate::protocol::{Outcome, Task, WorktreeChange, WorktreeRecord};
use crate::worktree;

/// Commit what the agent left, and say what the branch holds. `stopped`: why the run
/// was cut short, if it was (the partial work is kept all the same).
pub(crate) fn conclude(
    rec: &WorktreeRecord,
    task: &Task,
    stopped: Option<Outcome>,
) -> WorktreeChange {
    let message = worktree::commit_message(&task.prompt, &rec.task_id);
    let note = stopped.map(|o| {
        format!(
            "the run ended {}; the partial work it left is kept on {}",
            format!("{o:?}").to_lowercase(),
            rec.branch
        )
    });
    match worktree::conclude(rec, &message, note.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("task {}: concluding its worktree: {e}", rec.task_id);
            worktree::kept_as_is(
                rec,
                format!(
                    "the worktree {} was kept as the agent left it (not committed: {e})",
                    rec.path.display()
                ),
            )
        }
    }
}
