//! One repository's facts read once for a whole listing (its branches' heads, `HEAD`, the branches `HEAD` holds), so judging many worktree tasks costs four git calls a repository and one or two a task left to merge, not five to seven a task.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::error::Result;
use crate::protocol::{ReviewState, WorktreeChange};
use crate::worktree::git;
use crate::worktree::merge_tree::{is_ancestor, tree_of, try_merge, Trial};
use crate::worktree::Repo;

/// What a listing needs to know of one repository, read once.
pub(crate) struct RepoFacts {
    repo: Repo,
    /// `HEAD`'s commit (`None`: an unborn branch).
    head: Option<String>,
    /// `HEAD`'s tree, read the first time a trial merge needs it.
    head_tree: Option<Option<String>>,
    /// Every local branch's head commit.
    heads: HashMap<String, String>,
    /// The local branches whose head `HEAD` already contains.
    merged: HashSet<String>,
}

impl RepoFacts {
    /// The facts of the repository `dir` is in; `Ok(None)` when it is gone (not a
    /// repository any more: its tasks count as discarded).
    pub(crate) fn read(dir: &Path) -> Result<Option<RepoFacts>> {
        let Ok(repo) = Repo::of(dir) else {
            return Ok(None);
        };
        let head = repo.resolve("HEAD")?;
        let format = "--format=%(objectname) %(refname:strip=2)";
        let heads = git(&repo.top, &["for-each-ref", format, "refs/heads/"])?
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(commit, name)| (name.to_string(), commit.to_string()))
            .collect();
        let merged = match &head {
            Some(head) => {
                let merged = format!("--merged={head}");
                let names = "--format=%(refname:strip=2)";
                git(&repo.top, &["for-each-ref", &merged, names, "refs/heads/"])?
                    .lines()
                    .map(str::to_string)
                    .collect()
            }
            None => HashSet::new(),
        };
        Ok(Some(RepoFacts {
            repo,
            head,
            head_tree: None,
            heads,
            merged,
        }))
    }

    /// The review state of `change` (kept, in this repository), as
    /// [`super::state_of`] would judge it.
    pub(crate) fn state_of(&mut self, change: &WorktreeChange) -> ReviewState {
        if let Some(tip) = self.heads.get(&change.branch).cloned() {
            if self.merged.contains(&change.branch) {
                return ReviewState::Merged;
            }
            return match self.against_head(&tip) {
                Some(Against::In) => ReviewState::Merged,
                Some(Against::Conflict) => ReviewState::Conflicting,
                Some(Against::Clean) | None => ReviewState::Unmerged,
            };
        }
        // The branch is gone: merged if `HEAD` holds its last commit, else discarded.
        let Some(tip) = self.repo.resolve(&change.head_commit).ok().flatten() else {
            return ReviewState::Discarded;
        };
        let Some(head) = self.head.clone() else {
            return ReviewState::Discarded;
        };
        if is_ancestor(&self.repo.top, &tip, &head).unwrap_or(false) {
            return ReviewState::Merged;
        }
        match self.against_head(&tip) {
            Some(Against::In) => ReviewState::Merged,
            _ => ReviewState::Discarded,
        }
    }

    /// Where `tip`, not an ancestor of `HEAD`, stands against it: in it all the same
    /// (merging it would leave `HEAD`'s tree as it is, as after a squash or a rebase by
    /// hand), mergeable, or conflicting; `None` when git cannot tell (no `HEAD`).
    fn against_head(&mut self, tip: &str) -> Option<Against> {
        let head = self.head.clone()?;
        match try_merge(&self.repo.top, &head, tip).ok()? {
            Trial::Conflict { .. } => Some(Against::Conflict),
            Trial::Clean { tree } => {
                let head_tree = self
                    .head_tree
                    .get_or_insert_with(|| tree_of(&self.repo.top, &head).ok());
                if head_tree.as_ref() == Some(&tree) {
                    Some(Against::In)
                } else {
                    Some(Against::Clean)
                }
            }
        }
    }
}

enum Against {
    In,
    Clean,
    Conflict,
}
