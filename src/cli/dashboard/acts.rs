//! The dashboard's acts on the selected worker's task: merge (`m`), discard (`D`), retry (`r`) and redo on top (`R`) after a y/n question, pause/resume the worker (`p`) or everything (`P`).

use crate::queue::pause::{self, Target};
use crate::review::{MergeRequest, MergeResult, MergeTarget};
use crate::worktree::MergeHow;
use crate::{Root, Slot, TaskId};

use super::model::{SlotRow, SlotState};

/// One act a key asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Merge the task's branch into the branch checked out in its repository.
    Merge(TaskId),
    /// Remove the task's worktree and delete its branch (the work is lost).
    Discard(TaskId),
    /// Run the ended task again under a new id, where it ran.
    Retry(TaskId),
    /// Redo the ended worktree task on top of the current branch (`conductor retry ID
    /// --rebase`): a new task in a new worktree, its prompt carrying the old diff.
    Redo(TaskId),
    /// Pause the worker slot, or resume it if it is paused; `None`: everything.
    Pause(Option<Slot>),
}

impl Act {
    /// The y/n question asked before it (pausing and resuming ask nothing: they undo
    /// each other and destroy nothing).
    pub fn question(&self) -> Option<String> {
        match self {
            Act::Merge(id) => Some(format!("Merge task {id}'s branch into its repository?")),
            Act::Discard(id) => Some(format!(
                "Discard task {id}: delete its worktree and branch, and the work on it?"
            )),
            Act::Retry(id) => Some(format!("Run task {id} again under a new id?")),
            Act::Redo(id) => Some(format!(
                "Redo task {id} on top of the current branch, in a new worktree?"
            )),
            Act::Pause(..) => None,
        }
    }
}

/// Letters that are acts, for the list's key handler.
pub const KEYS: [char; 6] = ['m', 'D', 'r', 'R', 'p', 'P'];

/// The act key `c` asks for on the selected worker (`row`; `None`: a queued task or
/// nothing is selected), or why there is none.
pub fn act_for(c: char, row: Option<&SlotRow>) -> Result<Act, String> {
    if c == 'P' {
        return Ok(Act::Pause(None));
    }
    let Some(row) = row else {
        return Err("select a worker first (the acts are on its task)".into());
    };
    if c == 'p' {
        return Ok(Act::Pause(Some(row.slot)));
    }
    let ended = row.state != SlotState::Working;
    let id = row.task_id.clone().filter(|_| ended).ok_or_else(|| {
        format!(
            "worker {} has no ended task to {}",
            row.slot,
            match c {
                'r' => "retry",
                'R' => "redo",
                _ => "review",
            }
        )
    })?;
    match c {
        'r' => Ok(Act::Retry(id)),
        _ if row.worktree.is_none() => Err(format!(
            "task {id} ran in no worktree of its own: nothing to merge, discard or redo"
        )),
        'm' => Ok(Act::Merge(id)),
        'R' => Ok(Act::Redo(id)),
        _ => Ok(Act::Discard(id)),
    }
}

/// Do `act` on `root`; the one line that says how it went.
pub fn run(root: &Root, act: &Act) -> String {
    let client = crate::Client::new(root.clone());
    match act {
        Act::Merge(id) => {
            // The root's `mergeCheck` holds here as in `conductor merge`.
            let check = match crate::review::configured_check(&client) {
                Ok(c) => c,
                Err(e) => return format!("cannot merge task {id}: {e}"),
            };
            let req = MergeRequest {
                target: MergeTarget::One(id.clone()),
                how: MergeHow::Merge,
                check,
            };
            match crate::review::merge(&client, &req) {
                Ok(report) => match report.tasks.first().map(|t| &t.result) {
                    Some(MergeResult::Merged { into, head }) => {
                        let head = &head[..head.len().min(10)];
                        format!("merged task {id} into {into} (now at {head})")
                    }
                    Some(MergeResult::Conflict { files, .. }) => format!(
                        "task {id} conflicts in {}: nothing merged (`conductor merge {id}` \
                         to see, or D to discard)",
                        files.join(", ")
                    ),
                    Some(MergeResult::CheckFailed { exit, .. }) => format!(
                        "task {id} not merged: its check failed (exit {}); `conductor merge \
                         {id}` shows the output, `conductor retry {id} --rebase` redoes it",
                        exit.map_or("by a signal".to_string(), |c| c.to_string())
                    ),
                    Some(MergeResult::Left { reason }) => {
                        format!("task {id} not merged: {reason}")
                    }
                    None => format!("task {id}: nothing to merge"),
                },
                Err(e) => format!("cannot merge task {id}: {e}"),
            }
        }
        // The question said the work goes too: the y was the --force.
        Act::Discard(id) => match crate::review::discard(&client, id, true) {
            Ok(d) if d.already_gone => format!("task {id}'s branch and worktree were gone already"),
            Ok(d) => format!("discarded task {id}: {} deleted", d.branch),
            Err(e) => format!("cannot discard task {id}: {e}"),
        },
        Act::Retry(id) => {
            match crate::verbs::retry::again(&client, id.clone(), Default::default()) {
                Ok(new) => match new.warning {
                    Some(w) => format!("task {id} runs again as {}: {w}", new.id),
                    None => format!("task {id} runs again as {}", new.id),
                },
                Err(e) => format!("cannot retry task {id}: {e}"),
            }
        }
        Act::Redo(id) => {
            match crate::verbs::redo::again_on_top(&client, id.clone(), Default::default()) {
                Ok(new) => format!("task {id} is redone on top as {}", new.id),
                Err(e) => format!("cannot redo task {id}: {e}"),
            }
        }
        Act::Pause(slot) => {
            let target = slot.map_or(Target::All, |s| Target::Slot(s.0));
            // Toggled on what is on disk now, not on what the screen showed.
            let on = !pause::Paused::load(root).has(&target);
            let done = if on {
                pause::pause(root, &target, false)
            } else {
                pause::resume(root, &target)
            };
            match done {
                Ok(_) if on => format!(
                    "paused {target}: it starts no new task ({} resumes)",
                    if slot.is_some() { "p" } else { "P" }
                ),
                Ok(_) => format!("resumed {target}"),
                Err(e) => format!("cannot change the pause of {target}: {e}"),
            }
        }
    }
}
