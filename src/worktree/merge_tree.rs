//! A merge tried without touching any work tree (`git merge-tree --write-tree`, git 2.38 or later): clean with its tree, or the files that conflict.

use std::path::Path;

use super::git::{command_error, git, git_output};
use crate::error::Result;

/// What merging `theirs` into `ours` would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trial {
    /// No conflict: the merged tree.
    Clean { tree: String },
    /// These files conflict.
    Conflict { files: Vec<String> },
}

/// Merge `theirs` into `ours` in the object store only: nothing in the repository's
/// checkout, index or refs changes (git writes the merged tree's objects, which are
/// unreferenced and pruned by git's own gc).
pub fn try_merge(repo: &Path, ours: &str, theirs: &str) -> Result<Trial> {
    let args = [
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        ours,
        theirs,
    ];
    let out = git_output(repo, &args)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let tree = lines.next().unwrap_or_default().trim().to_string();
    match out.status.code() {
        Some(0) => Ok(Trial::Clean { tree }),
        Some(1) => {
            let mut files: Vec<String> = lines
                .take_while(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            files.dedup();
            Ok(Trial::Conflict { files })
        }
        _ => Err(command_error(repo, &args, &out)),
    }
}

/// Whether commit `a` is an ancestor of (or is) `b`.
pub fn is_ancestor(repo: &Path, a: &str, b: &str) -> Result<bool> {
    let out = git_output(repo, &["merge-base", "--is-ancestor", a, b])?;
    Ok(out.status.success())
}

/// The tree of commit `rev`.
pub fn tree_of(repo: &Path, rev: &str) -> Result<String> {
    Ok(git(repo, &["rev-parse", &format!("{rev}^{{tree}}")])?
        .trim()
        .to_string())
}
