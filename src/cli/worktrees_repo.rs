//! A task's worktree change found on a root, or else from the repository's branches alone
//! (`conductor/<id>`): what `diff`, `merge` and `discard` act on after `run --worktree`,
//! whose private root is gone.

use std::path::Path;

use super::args::RootArg;
use crate::protocol::{TaskId, TaskResult, WorktreeChange};
use crate::worktree::{self, Repo};
use crate::Error;

/// Task `id`'s worktree change, and its id as resolved: from its result on the root;
/// when there is no root or the root does not know the task, from branch
/// `conductor/<id>` of the repository at `dir` (default: the current directory). The
/// root's error stands when that branch is not there either.
pub fn locate(
    root: &RootArg,
    id: &TaskId,
    dir: Option<&Path>,
) -> anyhow::Result<(TaskId, WorktreeChange)> {
    // No root at all, or one that does not know the task: look in the repository.
    let on_root = match root.client() {
        Err(e) => Err((e, true)),
        Ok(client) => crate::ids::resolve(client.root(), id)
            .map_err(anyhow::Error::from)
            .and_then(|id| Ok((id.clone(), crate::review::change(&client, &id)?)))
            .map_err(|e| {
                let unknown = matches!(e.downcast_ref::<Error>(), Some(Error::NoSuchTask { .. }));
                (e, unknown)
            }),
    };
    match on_root {
        Ok(found) => Ok(found),
        Err((e, false)) => Err(e),
        Err((e, true)) => {
            let cwd;
            let dir = match dir {
                Some(d) => d,
                None => {
                    cwd = std::env::current_dir()?;
                    &cwd
                }
            };
            match from_branch(id, dir) {
                Some(change) => Ok((id.clone(), change)),
                None => Err(e),
            }
        }
    }
}

/// The change on branch `conductor/<id>` of the repository at `dir`, measured from where
/// it left the checked-out branch (`git merge-base HEAD conductor/<id>`). `None` when
/// `dir` is in no repository or it has no such branch.
pub fn from_branch(id: &TaskId, dir: &Path) -> Option<WorktreeChange> {
    let repo = Repo::of(dir).ok()?;
    let branch = worktree::task_branch(id);
    if !repo.branch_exists(&branch).ok()? {
        return None;
    }
    let top = &repo.top;
    let head = repo.resolve(&branch).ok()??;
    let base = worktree::git(top, &["merge-base", "HEAD", &branch]).ok()?;
    let base = base.trim().to_string();
    let stat = worktree::git(top, &["diff", "--shortstat", &format!("{base}..{branch}")])
        .unwrap_or_default();
    let (files_changed, insertions, deletions) = worktree::shortstat(&stat);
    let path = worktree::task_worktrees(top)
        .unwrap_or_default()
        .into_iter()
        .find(|(_, b)| b.as_deref() == Some(branch.as_str()))
        .map(|(p, _)| p)
        .unwrap_or_else(|| repo.task_worktree_path(id, None));
    Some(WorktreeChange {
        repo: top.clone(),
        path,
        branch,
        base_commit: base,
        head_commit: head,
        files_changed,
        insertions,
        deletions,
        kept: true,
        committed_for_agent: false,
        note: Some(
            "found from the repository's branch alone: no conductor root knows the task".into(),
        ),
    })
}

/// The commands that review and take in a task's kept branch from its repository.
pub fn commands(id: &TaskId, change: &WorktreeChange) -> String {
    let repo = shell_word(&change.repo.display().to_string());
    format!(
        "cd {repo} && conductor diff {id} && conductor merge {id}  (or: git merge {})",
        change.branch
    )
}

/// `s` as one shell word: as is when plain, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The kept branches of a run's results: (task, change).
fn kept(results: &[TaskResult]) -> impl Iterator<Item = (&TaskId, &WorktreeChange)> {
    results
        .iter()
        .filter_map(|r| Some((&r.task_id, r.worktree.as_ref().filter(|w| w.kept)?)))
}

/// `branch conductor/t1 · +3 -1 in 2 files`: a run summary's line for a task whose
/// worktree branch was kept.
pub fn branch_line(r: &TaskResult) -> Option<String> {
    let w = r.worktree.as_ref().filter(|w| w.kept)?;
    Some(format!("branch {} · {}", w.branch, w.diffstat()))
}

/// For each kept branch of a run, the line saying how to review and merge it.
pub fn next_steps(results: &[TaskResult]) -> Vec<String> {
    kept(results)
        .map(|(id, w)| format!("task {id}: {}", commands(id, w)))
        .collect()
}

/// `run --json`'s `branches`: each kept branch with its diffstat and the commands.
pub fn branches_json(results: &[TaskResult]) -> Option<serde_json::Value> {
    let all: Vec<serde_json::Value> = kept(results)
        .map(|(id, w)| {
            serde_json::json!({
                "taskId": id,
                "repo": w.repo,
                "branch": w.branch,
                "diffstat": w.diffstat(),
                "filesChanged": w.files_changed,
                "insertions": w.insertions,
                "deletions": w.deletions,
                "next": commands(id, w),
            })
        })
        .collect();
    (!all.is_empty()).then_some(serde_json::Value::Array(all))
}
