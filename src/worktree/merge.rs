//! A task's branch taken into the checked-out branch (merge, squash or rebase), undone exactly on a conflict.

use std::path::Path;

use super::git::{command_error, git, git_as_committer, git_output, succeeds};
use super::remove::remove_forced;
use super::repo::Repo;
use crate::error::{Error, Result};
use crate::protocol::{TaskId, WorktreeChange};

/// How a task's branch goes into the checked-out branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeHow {
    /// A merge commit (`git merge --no-ff`).
    Merge,
    /// The branch rebased onto the checked-out branch, then fast-forwarded.
    Rebase,
    /// One commit with the branch's whole change (`git merge --squash`).
    Squash,
}

/// Merge task `id`'s branch into the branch checked out in its repository. Refused
/// with a detached HEAD or uncommitted changes there; on a conflict everything is
/// undone (the repository exactly as before) and [`Error::MergeConflict`] lists the
/// files. On success the worktree and branch are removed; returns the new HEAD.
pub fn merge(id: &TaskId, change: &WorktreeChange, how: MergeHow, message: &str) -> Result<String> {
    let (repo, into) = ready_to_merge(id, change)?;
    let top = &repo.top;
    let branch = change.branch.as_str();
    let conflict = |files: Vec<String>| Error::MergeConflict {
        id: id.to_string(),
        branch: branch.to_string(),
        into: into.clone(),
        repo: top.clone(),
        files,
    };
    match how {
        MergeHow::Merge => merge_commit(top, branch, message, conflict)?,
        MergeHow::Squash => squash(top, branch, message, conflict)?,
        MergeHow::Rebase => rebase(top, change, conflict)?,
    }
    let head = git(top, &["rev-parse", "HEAD"])?.trim().to_string();
    // Its change is in now, even when a squash left its commits on no other branch.
    remove_forced(top, &change.path, Some(branch));
    Ok(head)
}

/// The repository and the branch checked out there, when `change` can be merged into
/// it: its branch there, a branch (not a detached HEAD) checked out, nothing uncommitted.
pub fn ready_to_merge(id: &TaskId, change: &WorktreeChange) -> Result<(Repo, String)> {
    let repo = Repo::of(&change.repo)?;
    if !repo.branch_exists(&change.branch)? {
        return Err(Error::BranchGone {
            id: id.to_string(),
            branch: change.branch.clone(),
            repo: repo.top,
        });
    }
    let into = repo.current_branch()?.ok_or_else(|| Error::DetachedHead {
        repo: repo.top.clone(),
    })?;
    let dirty = repo.uncommitted()?;
    if !dirty.is_empty() {
        let mut files: Vec<&str> = dirty.iter().map(|l| l.get(3..).unwrap_or(l)).collect();
        files.truncate(5);
        return Err(Error::RepoDirty {
            repo: repo.top,
            files: files.join(", "),
        });
    }
    Ok((repo, into))
}

/// A merge commit (`git merge --no-ff`), aborted on a conflict.
fn merge_commit(
    top: &Path,
    branch: &str,
    message: &str,
    conflict: impl Fn(Vec<String>) -> Error,
) -> Result<()> {
    let args = [
        "merge",
        "--no-ff",
        "--no-verify",
        "--quiet",
        "-m",
        message,
        branch,
    ];
    let out = git_as_committer(top, &args)?;
    if !out.status.success() {
        let files = conflicted(top);
        let merging = succeeds(top, &["rev-parse", "--quiet", "--verify", "MERGE_HEAD"])?;
        if merging {
            git(top, &["merge", "--abort"])?;
        }
        return Err(if files.is_empty() {
            command_error(top, &args, &out)
        } else {
            conflict(files)
        });
    }
    Ok(())
}

/// One commit with the branch's whole change (`git merge --squash`), reset on a conflict.
fn squash(
    top: &Path,
    branch: &str,
    message: &str,
    conflict: impl Fn(Vec<String>) -> Error,
) -> Result<()> {
    let args = ["merge", "--squash", "--quiet", branch];
    let out = git_output(top, &args)?;
    if !out.status.success() {
        let files = conflicted(top);
        // A squash leaves no MERGE_HEAD to abort; the checkout was clean, so
        // resetting what the merge touched puts it back exactly.
        git(top, &["reset", "--merge"])?;
        return Err(if files.is_empty() {
            command_error(top, &args, &out)
        } else {
            conflict(files)
        });
    }
    if !succeeds(top, &["diff", "--cached", "--quiet"])? {
        let args = ["commit", "--no-verify", "--quiet", "-m", message];
        let out = git_as_committer(top, &args)?;
        if !out.status.success() {
            git(top, &["reset", "--merge"])?;
            return Err(command_error(top, &args, &out));
        }
    }
    Ok(())
}

/// The branch rebased onto the checked-out branch, then fast-forwarded; the rebase
/// aborted on a conflict.
fn rebase(
    top: &Path,
    change: &WorktreeChange,
    conflict: impl Fn(Vec<String>) -> Error,
) -> Result<()> {
    let branch = change.branch.as_str();
    let onto = git(top, &["rev-parse", "HEAD"])?.trim().to_string();
    // Rebased where the branch is checked out: its own worktree (made again if
    // gc took it), so the repository's checkout is touched only by the
    // fast-forward at the end.
    let wt = &change.path;
    if !wt.exists() {
        let p = wt.to_string_lossy();
        git(top, &["worktree", "prune"])?;
        git(top, &["worktree", "add", "--quiet", &p, branch])?;
    }
    let args = ["rebase", "--quiet", &onto];
    let out = git_as_committer(wt, &args)?;
    if !out.status.success() {
        let files = conflicted(wt);
        let _ = git_output(wt, &["rebase", "--abort"]);
        return Err(if files.is_empty() {
            command_error(wt, &args, &out)
        } else {
            conflict(files)
        });
    }
    git(top, &["merge", "--ff-only", "--quiet", branch])?;
    Ok(())
}

/// Files with unresolved conflicts in the worktree at `dir`.
fn conflicted(dir: &Path) -> Vec<String> {
    git(dir, &["diff", "--name-only", "--diff-filter=U"])
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The range `git diff` shows for a task: `base...branch` (or its recorded head once
/// the branch is gone).
pub fn diff_range(change: &WorktreeChange) -> Result<String> {
    let repo = Repo::of(&change.repo)?;
    let tip = if repo.branch_exists(&change.branch)? {
        change.branch.clone()
    } else {
        change.head_commit.clone()
    };
    Ok(format!("{}...{tip}", change.base_commit))
}
