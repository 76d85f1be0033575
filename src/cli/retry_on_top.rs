//! `conductor retry ID --rebase`: redo an unmerged or conflicting worktree task on top of the current branch — a new task in a new worktree from `HEAD`, its prompt the original with the conflict and the old diff.

use anyhow::Context as _;

use crate::cli::usage::CliError;
use crate::protocol::{TaskId, WorktreeChange};
use crate::review;
use crate::worktree::merge_tree::{try_merge, Trial};
use crate::worktree::Repo;
use crate::{fsio, Task};

/// How much of the old diff the new prompt carries, in bytes.
const DIFF_BYTES: usize = 32 * 1024;

/// The prompt that redoes task `id` on top of the current branch; refused unless its
/// branch is unmerged or conflicting, or when it ran from a `--base` of its own.
pub fn prompt(client: &crate::Client, id: &TaskId) -> anyhow::Result<String> {
    let change = review::change(client, id)?;
    let state = review::state_of(&change);
    if !state.left_to_review() {
        return Err(CliError::Usage(format!(
            "task {id} is {state}: retry --rebase redoes a task whose branch is unmerged or \
             conflicting"
        ))
        .into());
    }
    let task = record(client, id)?;
    if let Some(base) = &task.base {
        return Err(CliError::Usage(format!(
            "task {id} ran from its own base {base}; retry --rebase starts from HEAD, so \
             submit it again without --base instead"
        ))
        .into());
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
fn record(client: &crate::Client, id: &TaskId) -> anyhow::Result<Task> {
    let loc = client
        .find_task(id)?
        .with_context(|| format!("no task {id}"))?;
    let slot = loc
        .slot
        .with_context(|| format!("task {id} never ran on a slot"))?;
    let path = client.worker(slot).task_record(id);
    let bytes = fsio::read_bounded(&path, fsio::TASK_SIZE_LIMIT)?
        .with_context(|| format!("worker {slot} has no record of task {id}"))?;
    Ok(Task::from_bytes(&path, &bytes)?)
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
