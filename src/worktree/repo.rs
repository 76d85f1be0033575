//! The git repository a directory is in: its top, its shared git directory, and what its checkout holds.

use std::path::{Path, PathBuf};

use super::git::{git, git_output, succeeds};
use super::place;
use crate::error::{Error, Result};
use crate::protocol::TaskId;

/// The git repository (working tree) a directory is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The top directory of the working tree `dir` is in.
    pub top: PathBuf,
    /// The repository's shared git directory (the same from every worktree).
    pub common_dir: PathBuf,
    /// `dir` relative to `top`.
    pub prefix: PathBuf,
}

impl Repo {
    /// The repository `dir` is in: [`Error::NotARepository`] when none,
    /// [`Error::BareRepository`] when it has no working tree.
    pub fn of(dir: &Path) -> Result<Repo> {
        let args = [
            "rev-parse",
            "--git-common-dir",
            "--show-toplevel",
            "--show-prefix",
        ];
        let out = git_output(dir, &args)?;
        if !out.status.success() {
            let bare = git_output(dir, &["rev-parse", "--is-bare-repository"])?;
            if bare.status.success() && String::from_utf8_lossy(&bare.stdout).trim() == "true" {
                return Err(Error::BareRepository {
                    dir: dir.to_path_buf(),
                });
            }
            return Err(Error::NotARepository {
                dir: dir.to_path_buf(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let common = PathBuf::from(lines.next().unwrap_or_default());
        let top = PathBuf::from(lines.next().unwrap_or_default());
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

    /// The commit `rev` names, if any.
    pub fn resolve(&self, rev: &str) -> Result<Option<String>> {
        let spec = format!("{rev}^{{commit}}");
        let out = git_output(&self.top, &["rev-parse", "--verify", "--quiet", &spec])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    pub fn branch_exists(&self, branch: &str) -> Result<bool> {
        succeeds(
            &self.top,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
    }

    /// The branch checked out here; `None` with a detached HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let out = git_output(&self.top, &["symbolic-ref", "--quiet", "--short", "HEAD"])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// Tracked files with staged or unstaged changes (`git status --porcelain`, lines).
    pub fn uncommitted(&self) -> Result<Vec<String>> {
        let text = git(
            &self.top,
            &["status", "--porcelain", "--untracked-files=no"],
        )?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// Where task `id`'s worktree goes: under `folder` if given, else next to the
    /// repository ([`place::folder`]).
    pub fn task_worktree_path(&self, id: &TaskId, folder: Option<&Path>) -> PathBuf {
        place::folder(&self.top, &self.common_dir, folder).join(id.to_string())
    }

    /// The worktree at `path` is one of this repository's, with `branch` checked out.
    pub(crate) fn has_worktree_on(&self, path: &Path, branch: &str) -> bool {
        let Ok(other) = Repo::of(path) else {
            return false;
        };
        let same_repo = other.common_dir == self.common_dir
            && path.canonicalize().is_ok_and(|p| p == other.top);
        same_repo && other.current_branch().ok().flatten().as_deref() == Some(branch)
    }
}
