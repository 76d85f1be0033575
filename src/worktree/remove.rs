//! Removing a task's worktree and its branch (never work no other branch has, unless
//! forced), under the lock that serializes changes to a folder of worktrees.

use std::io;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsio;

use super::git::{git, succeeds};
use super::keep;

/// Hold the lock that serializes changes to the worktrees kept in `folder` (the folder
/// holding them: per repository by default). git does not: a `git worktree add` reads
/// every registered worktree's files, and one half-made by a parallel `add` makes it
/// fail ("failed to read .git/worktrees/<name>/commondir"), as 20 tasks started at once
/// on one repository showed. The kernel drops the lock if its holder dies.
pub(super) fn folder_lock(folder: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    fsio::ensure_dir(folder)?;
    let path = folder.join(".conductor.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| Error::io("lock", &path, io::Error::from(errno)))
}

/// Remove a task's worktree and, if named, its branch; what is already gone is fine.
/// A branch holding commits no other branch has is kept with its worktree (no work is
/// ever lost: see [`keep`]); [`remove_forced`] removes them anyway. Failures are logged,
/// not returned: removing is tidying, and `doctor` lists what is left.
pub fn remove(repo: &Path, path: &Path, branch: Option<&str>) {
    if branch.is_some_and(|b| keep::holds_work(repo, b)) {
        return;
    }
    remove_forced(repo, path, branch);
}

/// [`remove`] even of a branch holding commits no other branch has (`discard --force`,
/// or a branch whose change was just merged by squash).
pub fn remove_forced(repo: &Path, path: &Path, branch: Option<&str>) {
    let lock = path.parent().map(folder_lock);
    if let Some(Err(e)) = &lock {
        tracing::warn!("{e}");
    }
    if path.exists() {
        let p = path.to_string_lossy();
        if let Err(e) = git(repo, &["worktree", "remove", "--force", "--force", &p]) {
            tracing::warn!("cannot remove the worktree {p}: {e}");
        }
    }
    // A worktree deleted by hand stays registered until pruned.
    if let Err(e) = git(repo, &["worktree", "prune"]) {
        tracing::warn!("git worktree prune in {}: {e}", repo.display());
    }
    if let Some(b) = branch {
        let exists = succeeds(
            repo,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}"),
            ],
        )
        .unwrap_or(false);
        if exists {
            if let Err(e) = git(repo, &["branch", "-D", b]) {
                tracing::warn!("cannot delete the branch {b}: {e}");
            }
        }
    }
}
