//! No work lost: whether a branch holds commits no other branch has, which conductor never deletes (nor the worktree it is checked out in) unless told `--force`.

use std::path::Path;

use super::git::git_output;
use crate::error::Result;

/// How many commits of `branch` no other local or remote-tracking branch has (0 when
/// the branch is gone). A repository git cannot read counts as holding work, so nothing
/// is deleted on a doubt.
pub fn unique_commits(repo: &Path, branch: &str) -> Result<u64> {
    let full = format!("refs/heads/{branch}");
    let exists = git_output(repo, &["show-ref", "--verify", "--quiet", &full])?;
    if !exists.status.success() {
        return Ok(0);
    }
    let exclude = format!("--exclude={branch}");
    let args = [
        "rev-list",
        "--count",
        &full,
        "--not",
        &exclude,
        "--branches",
        "--remotes",
    ];
    let out = git_output(repo, &args)?;
    if !out.status.success() {
        return Ok(u64::MAX);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(u64::MAX))
}

/// Whether the worktree at `path` has changes not committed (tracked or untracked
/// files); a worktree git cannot read counts as having them.
pub fn has_uncommitted(path: &Path) -> bool {
    if !path.is_dir() {
        return false;
    }
    match git_output(path, &["status", "--porcelain"]) {
        Ok(out) if out.status.success() => !out.stdout.is_empty(),
        _ => true,
    }
}

/// Whether removing a task's worktree and `branch` would lose commits: logged, so the
/// caller keeps both.
pub(super) fn holds_work(repo: &Path, branch: &str) -> bool {
    match unique_commits(repo, branch) {
        Ok(0) => false,
        Ok(n) => {
            tracing::warn!(
                "kept the branch {branch} of {} and its worktree: it holds {} no other \
                 branch has (merge it, or discard it with --force)",
                repo.display(),
                if n == u64::MAX {
                    "commits".to_string()
                } else {
                    format!("{n} commit(s)")
                }
            );
            true
        }
        Err(e) => {
            tracing::warn!("kept the branch {branch}: {e}");
            true
        }
    }
}
