//! The review state of a worktree task — unmerged, merged, conflicting, discarded or unchanged — read from git each time, so it stays true when branches are merged or deleted by hand.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

pub use crate::protocol::ReviewState;

use crate::protocol::WorktreeChange;
use crate::tasks::TaskSummary;
use crate::worktree::merge_tree::{is_ancestor, tree_of, try_merge, Trial};
use crate::worktree::Repo;

use super::facts::RepoFacts;

/// The review state of `change`, from its repository as it is now. A repository that
/// is gone counts as discarded; one git cannot read leaves the branch unmerged.
pub fn state_of(change: &WorktreeChange) -> ReviewState {
    if !change.kept {
        return ReviewState::Unchanged;
    }
    let Ok(repo) = Repo::of(&change.repo) else {
        return ReviewState::Discarded;
    };
    let branch = repo.branch_exists(&change.branch).unwrap_or(true);
    let tip = if branch {
        repo.resolve(&change.branch).ok().flatten()
    } else {
        repo.resolve(&change.head_commit).ok().flatten()
    };
    let Some(tip) = tip else {
        return if branch {
            ReviewState::Unmerged
        } else {
            ReviewState::Discarded
        };
    };
    match against_head(&repo, &tip) {
        Some(Against::In) => ReviewState::Merged,
        Some(Against::Conflict) if branch => ReviewState::Conflicting,
        _ if branch => ReviewState::Unmerged,
        _ => ReviewState::Discarded,
    }
}

enum Against {
    /// The change is in `HEAD` already.
    In,
    /// Merging it would change `HEAD` cleanly.
    Clean,
    Conflict,
}

/// Where commit `tip` stands against `HEAD`: in it (an ancestor, or merging it would
/// change nothing, as after a squash or rebase), mergeable, or conflicting. `None`
/// when git cannot tell (no `HEAD` yet, a git older than 2.38).
fn against_head(repo: &Repo, tip: &str) -> Option<Against> {
    let top = &repo.top;
    let head = repo.resolve("HEAD").ok().flatten()?;
    if is_ancestor(top, tip, &head).ok()? {
        return Some(Against::In);
    }
    match try_merge(top, &head, tip).ok()? {
        Trial::Clean { tree } if tree_of(top, &head).ok()? == tree => Some(Against::In),
        Trial::Clean { .. } => Some(Against::Clean),
        Trial::Conflict { .. } => Some(Against::Conflict),
    }
}

/// Fill in the review state of each listed task that ran in a worktree. Each
/// repository's branches and `HEAD` are read once for the whole listing
/// ([`RepoFacts`]); a repository git cannot list is judged task by task.
pub fn annotate(tasks: &mut [TaskSummary]) {
    let mut repos: HashMap<PathBuf, Option<Option<RepoFacts>>> = HashMap::new();
    for t in tasks {
        let Some(change) = &t.worktree else { continue };
        if !change.kept {
            t.review = Some(ReviewState::Unchanged);
            continue;
        }
        let facts = repos
            .entry(change.repo.clone())
            .or_insert_with(|| RepoFacts::read(&change.repo).ok());
        t.review = Some(match facts {
            Some(Some(facts)) => facts.state_of(change),
            Some(None) => ReviewState::Discarded,
            None => state_of(change),
        });
    }
}

/// [`annotate`] of a listing, handed back.
pub fn annotated(mut tasks: Vec<TaskSummary>) -> Vec<TaskSummary> {
    annotate(&mut tasks);
    tasks
}

/// `status --json`'s `review`: how many worktree tasks are in each review state, and
/// the ids of those left to review (oldest submitted first).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewSummary {
    pub unmerged: usize,
    pub conflicting: usize,
    pub merged: usize,
    pub discarded: usize,
    pub unchanged: usize,
    /// The unmerged and conflicting tasks: what `conductor merge --all` would take.
    pub left: Vec<crate::protocol::TaskId>,
}

/// The [`ReviewSummary`] of every task on the root that ran in a worktree.
pub fn summary(client: &crate::Client) -> crate::error::Result<ReviewSummary> {
    let mut tasks = client.list_tasks(&crate::tasks::ListOptions {
        limit: None,
        ..Default::default()
    })?;
    tasks.retain(|t| t.worktree.is_some());
    annotate(&mut tasks);
    let mut s = ReviewSummary::default();
    for t in tasks.iter().rev() {
        let Some(r) = t.review else { continue };
        *match r {
            ReviewState::Unmerged => &mut s.unmerged,
            ReviewState::Conflicting => &mut s.conflicting,
            ReviewState::Merged => &mut s.merged,
            ReviewState::Discarded => &mut s.discarded,
            ReviewState::Unchanged => &mut s.unchanged,
        } += 1;
        if r.left_to_review() {
            s.left.push(t.id.clone());
        }
    }
    Ok(s)
}
