//! Git worktrees for the workers: one per worker, on its own branch, made or reused.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::Result;
use crate::error::{Error, Result as CoreResult};
use crate::fsio;
use crate::layout::{Root, Slot};

use super::{LaunchError, LaunchProblem};

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

/// Run git in `dir`; its stdout, or [`Error::Command`] with its stderr.
fn git(dir: &Path, args: &[&str]) -> CoreResult<String> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let dir = dir.to_string_lossy();
        let mut all = vec!["-C", &dir];
        all.extend(args);
        Err(Error::command("git", &all, &out))
    }
}

fn git_output(dir: &Path, args: &[&str]) -> CoreResult<Output> {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            let source = if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "git is not installed or not on PATH; worktrees need it",
                )
            } else {
                e
            };
            Error::io("run", "git", source)
        })
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
        let path = self.path.to_string_lossy();
        if let Err(e) = git(&self.top, &["worktree", "remove", "--force", &path]) {
            tracing::warn!("cannot remove the worktree {path}: {e}");
        }
        if let Some(b) = self.new_branch {
            if let Err(e) = git(&self.top, &["branch", "-D", &b]) {
                tracing::warn!("cannot delete the branch {b}: {e}");
            }
        }
    }
}

/// The git repository holding DIR.
pub(super) struct Repo {
    /// The main worktree's top directory.
    top: PathBuf,
    /// The repository's shared `.git` directory (the same from every worktree).
    common_dir: PathBuf,
    /// DIR relative to `top` (workers run in the same place inside their worktree).
    prefix: PathBuf,
}

impl Repo {
    /// The repository `dir` is in, with at least one commit to branch from.
    pub fn for_workers(dir: &Path) -> Result<Repo> {
        let repo = Repo::of(dir).map_err(|e| match e {
            Error::Command { stderr, .. } => LaunchProblem::NoRepository {
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
        Ok(repo)
    }

    /// The repository `dir` is in ([`Error::Command`] when it is in none).
    fn of(dir: &Path) -> CoreResult<Repo> {
        let args = [
            "rev-parse",
            "--show-toplevel",
            "--git-common-dir",
            "--show-prefix",
        ];
        let text = git(dir, &args)?;
        let mut lines = text.lines();
        let top = PathBuf::from(lines.next().unwrap_or_default());
        let common = PathBuf::from(lines.next().unwrap_or_default());
        let prefix = PathBuf::from(lines.next().unwrap_or_default());
        let common = if common.is_absolute() {
            common
        } else {
            dir.join(common)
        };
        let common_dir = common
            .canonicalize()
            .map_err(|e| Error::io("resolve the git directory", &common, e))?;
        let top = top
            .canonicalize()
            .map_err(|e| Error::io("resolve the repository", &top, e))?;
        Ok(Repo {
            top,
            common_dir,
            prefix,
        })
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
        let inside = top.join(&self.prefix);
        let dir = if self.prefix.as_os_str().is_empty() {
            top
        } else if inside.is_dir() {
            inside
        } else {
            tracing::warn!(
                "{} is not in worker {slot}'s worktree (not committed?); it runs at the top",
                self.prefix.display()
            );
            top
        };
        Ok(Worktree { dir, branch, made })
    }

    /// A worktree from an earlier launch is reused only if it belongs to this repository.
    fn check_ours(&self, path: &Path) -> Result<()> {
        let other = Repo::of(path).ok();
        let same = other.as_ref().is_some_and(|o| {
            o.common_dir == self.common_dir && path.canonicalize().is_ok_and(|p| p == o.top)
        });
        if same {
            return Ok(());
        }
        Err(LaunchProblem::ForeignWorktree {
            path: path.to_path_buf(),
            repo: self.top.clone(),
        }
        .into())
    }

    /// `git worktree add` at `path` on `branch` (made from HEAD if it does not exist).
    fn add(&self, path: &Path, branch: &str) -> Result<Made> {
        if let Some(parent) = path.parent() {
            fsio::ensure_dir(parent)?;
        }
        // A worktree deleted by hand is still registered; forget it so `add` works.
        git(&self.top, &["worktree", "prune"])?;
        let path_str = super::utf8(path)?;
        let branch_ref = format!("refs/heads/{branch}");
        let branch_exists =
            git_output(&self.top, &["show-ref", "--verify", "--quiet", &branch_ref])?
                .status
                .success();
        if branch_exists {
            git(&self.top, &["worktree", "add", path_str, branch])?;
        } else {
            git(
                &self.top,
                &["worktree", "add", "-b", branch, path_str, "HEAD"],
            )?;
        }
        Ok(Made {
            top: self.top.clone(),
            path: path.to_path_buf(),
            new_branch: (!branch_exists).then(|| branch.to_string()),
        })
    }
}
