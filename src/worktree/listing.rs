//! The task branches and worktrees a repository holds (`git branch`, `git worktree
//! list`): what doctor, gc and recovery look through.

use std::path::{Path, PathBuf};

use super::plan::BRANCH_PREFIX;
use super::{git, place};
use crate::error::Result;

/// The `conductor/*` branches of the repository at `repo`, but `conductor-launch`'s
/// per-worker `conductor/worker-N`.
pub fn task_branches(repo: &Path) -> Result<Vec<String>> {
    let text = git(
        repo,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/conductor/",
        ],
    )?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .filter(|b| {
            !b.strip_prefix("conductor/worker-")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        })
        .map(String::from)
        .collect())
}

/// Task worktrees registered in the repository at `repo` (`git worktree list`), as
/// (path, branch) — those on a `conductor/` branch or in a folder of task worktrees
/// (`*.conductor-worktrees` next to the repository, or the earlier
/// `.git/conductor-worktrees`).
pub fn task_worktrees(repo: &Path) -> Result<Vec<(PathBuf, Option<String>)>> {
    let text = git(repo, &["worktree", "list", "--porcelain"])?;
    let mut out = Vec::new();
    let mut path: Option<PathBuf> = None;
    let mut branch: Option<String> = None;
    for line in text.lines().chain(std::iter::once("")) {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = Some(PathBuf::from(p));
        } else if let Some(b) = line.strip_prefix("branch refs/heads/") {
            branch = Some(b.to_string());
        } else if line.is_empty() {
            if let Some(p) = path.take() {
                let ours = branch
                    .as_deref()
                    .is_some_and(|b| b.starts_with(BRANCH_PREFIX))
                    || p.components().any(|c| place::is_task_folder(c.as_os_str()));
                if ours {
                    out.push((p, branch.take()));
                }
            }
            branch = None;
        }
    }
    Ok(out)
}
