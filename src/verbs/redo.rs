//! The redo on top (`conductor retry ID --rebase`, MCP `retry` with `rebase`): redo an unmerged or conflicting worktree task on top of the current branch — a new task in a new worktree from `HEAD`, its prompt the original with the conflict and the old diff.

use super::retry::{again_from, Again, Ran, Retried};
use crate::protocol::{TaskId, WorktreeChange};
use crate::review;
use crate::worktree::merge_tree::{try_merge, Trial};
use crate::worktree::Repo;
use crate::{fsio, Error, Task};

/// How much of the old diff the new prompt carries, in bytes.
const DIFF_BYTES: usize = 32 * 1024;

/// Run finished worktree task `id` again on top of the current branch: a new task (in a
/// new worktree from `HEAD`) whose prompt is [`prompt`]'s; `how.prompt` is replaced.
pub fn again_on_top(client: &crate::Client, id: TaskId, how: Again) -> crate::Result<Retried> {
    again_on_top_from(client, super::retry::locate(client, id)?, how)
}

/// [`again_on_top`] of a task already located.
pub fn again_on_top_from(
    client: &crate::Client,
    ran: Ran,
    mut how: Again,
) -> crate::Result<Retried> {
    match &ran {
        Ran::Slot(_, old, _) => how.prompt = Some(prompt(client, old)?),
        Ran::NeverRan(old) => {
            return Err(Error::NotRetryable {
                why: format!("task {old} never ran: no branch to redo"),
            })
        }
    }
    again_from(client, ran, how)
}

/// The prompt that redoes task `id` on top of the current branch; refused unless its
/// branch is unmerged or conflicting, or when it ran from a `--base` of its own.
pub fn prompt(client: &crate::Client, id: &TaskId) -> crate::Result<String> {
    let change = review::change(client, id)?;
    let state = review::state_of(&change);
    if !state.left_to_review() {
        return Err(Error::NotRetryable {
            why: format!(
                "task {id} is {state}: retry --rebase redoes a task whose branch is unmerged \
                 or conflicting"
            ),
        });
    }
    let task = record(client, id)?;
    if let Some(base) = &task.base {
        return Err(Error::NotRetryable {
            why: format!(
                "task {id} ran from its own base {base}; retry --rebase starts from HEAD, so \
                 submit it again without --base instead"
            ),
        });
    }
    let diff = review::diff_of(id, &change, DIFF_BYTES)?;
    Ok(format!(
        "{}\n\n---\nThis task was done before on branch {} (task {id}), but that work {} \
         the branch it must go into ({}), which has moved on since. Do the task again on \
         top of the current code, keeping what landed meanwhile.\n\n{}The earlier \
         attempt's diff{}:\n\n```diff\n{}```\n",
        task.prompt.trim_end(),
        change.branch,
        if state == review::ReviewState::Conflicting {
            "conflicts with"
        } else {
            "was not merged into"
        },
        into_name(&change),
        conflict_text(&change),
        if diff.truncated { " (its start)" } else { "" },
        diff.patch
    ))
}

/// The task record its slot kept (its prompt and spec).
fn record(client: &crate::Client, id: &TaskId) -> crate::Result<Task> {
    let missing = |why: String| Error::RetryMissing { why };
    let loc = client
        .find_task(id)?
        .ok_or_else(|| missing(format!("no task {id}")))?;
    let slot = loc
        .slot
        .ok_or_else(|| missing(format!("task {id} never ran on a slot")))?;
    let path = client.worker(slot).task_record(id);
    let bytes = fsio::read_bounded(&path, fsio::TASK_SIZE_LIMIT)?
        .ok_or_else(|| missing(format!("worker {slot} has no record of task {id}")))?;
    Task::from_bytes(&path, &bytes)
}

fn into_name(change: &WorktreeChange) -> String {
    Repo::of(&change.repo)
        .and_then(|r| r.current_branch())
        .ok()
        .flatten()
        .unwrap_or_else(|| "HEAD".into())
}

/// `Merging it now conflicts in: a.txt, b.txt.` (empty when it does not).
fn conflict_text(change: &WorktreeChange) -> String {
    let files = Repo::of(&change.repo).ok().and_then(|r| {
        let head = r.resolve("HEAD").ok()??;
        match try_merge(&r.top, &head, &change.branch).ok()? {
            Trial::Conflict { files } => Some(files),
            Trial::Clean { .. } => None,
        }
    });
    match files {
        Some(f) if !f.is_empty() => format!("Merging it now conflicts in: {}.\n\n", f.join(", ")),
        _ => String::new(),
    }
}
