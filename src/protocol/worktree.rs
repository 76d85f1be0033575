//! A task's git worktree on disk: the slot's record of the one being used
//! (`workers/<N>/worktree.json`) and what a result says of it (`worktree` in the result).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::schema::schema_v1;
use super::task_id::TaskId;

/// `workers/<N>/worktree.json`: the worktree the slot's task in hand runs in, written
/// (durably) before the worktree is made and removed once the task's result is out, so
/// recovery can commit a dead worker's partial work and say where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeRecord {
    #[serde(default = "schema_v1")]
    pub schema: u32,
    pub task_id: TaskId,
    /// The repository's main worktree (its top directory).
    pub repo: PathBuf,
    /// The task's worktree.
    pub path: PathBuf,
    /// `conductor/<task id>`.
    pub branch: String,
    /// The commit the branch was made from.
    pub base_commit: String,
    /// Where the agent runs: the task's directory's counterpart inside the worktree.
    pub cwd: PathBuf,
    /// What a person should know about how it was made (uncommitted changes left out,
    /// submodules not checked out …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Paths (relative to its top) that config.json's `worktreeSetup` copied or linked
    /// in: never committed by conductor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup_paths: Vec<PathBuf>,
}

/// `worktree` in a result: the branch a task's change is on, and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeChange {
    /// The repository the worktree was made from.
    pub repo: PathBuf,
    /// The worktree's directory.
    pub path: PathBuf,
    /// The task's branch (`conductor/<id>`).
    pub branch: String,
    /// The commit the branch started from.
    pub base_commit: String,
    /// The branch's head when the task ended.
    pub head_commit: String,
    /// Files changed between the base and the head.
    pub files_changed: u64,
    /// Lines added between the base and the head.
    pub insertions: u64,
    /// Lines removed between the base and the head.
    pub deletions: u64,
    /// Whether the branch and worktree were kept (false: the task changed nothing,
    /// and both were removed).
    pub kept: bool,
    /// Whether the worker committed changes the agent left uncommitted.
    #[serde(default)]
    pub committed_for_agent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Anything the worker has to say of it (e.g. why the worktree was kept).
    pub note: Option<String>,
}

impl WorktreeChange {
    /// `+12 -3 in 2 files`, or `no change`.
    pub fn diffstat(&self) -> String {
        if self.files_changed == 0 && self.head_commit == self.base_commit {
            return "no change".to_string();
        }
        format!(
            "+{} -{} in {} file{}",
            self.insertions,
            self.deletions,
            self.files_changed,
            if self.files_changed == 1 { "" } else { "s" }
        )
    }
}

/// Where a worktree task's change stands against the branch checked out in its
/// repository (its `HEAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewState {
    /// Its branch is there and would merge cleanly: left to review.
    Unmerged,
    /// Its branch is there and would conflict with `HEAD`: left to review.
    Conflicting,
    /// Its change is in `HEAD` (merged, squashed or rebased in, by conductor or by
    /// hand), whether or not its branch is still there.
    Merged,
    /// Its branch is gone and its change is not in `HEAD`.
    Discarded,
    /// It changed nothing (no branch was kept).
    Unchanged,
}

impl ReviewState {
    /// Every state, in the order `--review` documents them.
    pub const ALL: [ReviewState; 5] = [
        ReviewState::Unmerged,
        ReviewState::Conflicting,
        ReviewState::Merged,
        ReviewState::Discarded,
        ReviewState::Unchanged,
    ];

    /// Whether a person still has to merge or discard it.
    pub fn left_to_review(self) -> bool {
        matches!(self, ReviewState::Unmerged | ReviewState::Conflicting)
    }

    /// The state's word, as every view prints it (`unmerged`, `merged` …).
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewState::Unmerged => "unmerged",
            ReviewState::Conflicting => "conflicting",
            ReviewState::Merged => "merged",
            ReviewState::Discarded => "discarded",
            ReviewState::Unchanged => "unchanged",
        }
    }

    /// The state named `s` (as [`ReviewState::as_str`] spells it).
    pub fn parse(s: &str) -> Option<ReviewState> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for ReviewState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
