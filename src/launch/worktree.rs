//! Git worktrees for the workers: one per worker, on its own branch, made or reused.
//! The git plumbing (finding the repository, running git) is [`crate::worktree`]'s,
//! shared with task worktrees.

use std::path::{Path, PathBuf};

use super::problem::Result;
use crate::error::Error;
use crate::fsio;
use crate::layout::{Root, Slot};
use crate::worktree::{self as core, git, git_output};

use super::problem::{utf8, LaunchError, LaunchProblem};

/// Where worker `slot`'s worktree lives for `session` (with worktrees).
pub fn worktree_path(root: &Root, session: &str, slot: Slot) -> PathBuf {
    root.path()
        .join("worktrees")
        .join(session)
        .join(format!("worker-{slot}"))
}

/// The branch worker `slot` works on (with worktrees).
pub fn worktree_branch(slot: Slot) -> String {
    format!("conductor/worker-{slot}")
}

/// A worker's place in its worktree.
#[derive(Debug)]
pub(super) struct Worktree {
    /// Where the worker runs: DIR's counterpart inside the worktree.
    pub dir: PathBuf,
    pub branch: String,
    /// Set when this launch made the worktree, so a failed launch takes it away again.
    pub made: Option<Made>,
}

/// A worktree this launch made (and perhaps its branch too).
#[derive(Debug)]
pub(super) struct Made {
    top: PathBuf,
    path: PathBuf,
    new_branch: Option<String>,
}

impl Made {
    /// Remove the worktree (and the branch, if it was made with it); failures are logged.
    pub fn remove(self) {
        core::remove(&self.top, &self.path, self.new_branch.as_deref());
    }
}

/// The git repository holding DIR, as the workers' worktrees see it.
pub(super) struct Repo(core::Repo);

impl Repo {
    /// The repository `dir` is in, with at least one commit to branch from.
    pub fn for_workers(dir: &Path) -> Result<Repo> {
        let repo = core::Repo::of(dir).map_err(|e| match e {
            Error::NotARepository { stderr, .. } => LaunchProblem::NoRepository {
                dir: dir.to_path_buf(),
                stderr,
            }
            .into(),
            e => LaunchError::Core(e),
        })?;
        let head = ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"];
        if !git_output(&repo.top, &head)?.status.success() {
            return Err(LaunchProblem::NoCommit { repo: repo.top }.into());
        }
        Ok(Repo(repo))
    }

    /// Worker `slot`'s worktree: reused if it exists (and is ours), else made on
    /// `conductor/worker-i` (the branch made from HEAD unless it exists).
    pub fn worktree(&self, root: &Root, session: &str, slot: Slot) -> Result<Worktree> {
        let path = worktree_path(root, session, slot);
        let branch = worktree_branch(slot);
        let made = if path.symlink_metadata().is_ok() {
            self.check_ours(&path)?;
            None
        } else {
            Some(self.add(&path, &branch)?)
        };
        let top = path
            .canonicalize()
            .map_err(|e| Error::io("resolve the worktree", &path, e))?;
        let inside = top.join(&self.0.prefix);
        let dir = if self.0.prefix.as_os_str().is_empty() {
            top
        } else if inside.is_dir() {
            inside
        } else {
            tracing::warn!(
                "{} is not in worker {slot}'s worktree (not committed?); it runs at the top",
                self.0.prefix.display()
            );
            top
        };
        Ok(Worktree { dir, branch, made })
    }

    /// A worktree from an earlier launch is reused only if it belongs to this repository.
    fn check_ours(&self, path: &Path) -> Result<()> {
        let other = core::Repo::of(path).ok();
        let same = other.as_ref().is_some_and(|o| {
            o.common_dir == self.0.common_dir && path.canonicalize().is_ok_and(|p| p == o.top)
        });
        if same {
            return Ok(());
        }
        Err(LaunchProblem::ForeignWorktree {
            path: path.to_path_buf(),
            repo: self.0.top.clone(),
        }
        .into())
    }

    /// `git worktree add` at `path` on `branch` (made from HEAD if it does not exist).
    fn add(&self, path: &Path, branch: &str) -> Result<Made> {
        if let Some(parent) = path.parent() {
            fsio::ensure_dir(parent)?;
        }
        // A worktree deleted by hand is still registered; forget it so `add` works.
        let top = &self.0.top;
        git(top, &["worktree", "prune"])?;
        let path_str = utf8(path)?;
        let branch_ref = format!("refs/heads/{branch}");
        let branch_exists = git_output(top, &["show-ref", "--verify", "--quiet", &branch_ref])?
            .status
            .success();
        if branch_exists {
            git(top, &["worktree", "add", path_str, branch])?;
        } else {
            git(top, &["worktree", "add", "-b", branch, path_str, "HEAD"])?;
        }
        Ok(Made {
            top: top.clone(),
            path: path.to_path_buf(),
            new_branch: (!branch_exists).then(|| branch.to_string()),
        })
    }
}
