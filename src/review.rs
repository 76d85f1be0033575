//! Review of a task's worktree change — its diff, its merge into the checked-out branch, or its discard — as `conductor diff|merge|discard` and the MCP tools of those names do it.
//!
//! A task run with `--worktree` ends with its work on branch `conductor/<id>` (see
//! [`crate::worktree`]). Each operation here takes a typed request and gives a typed
//! answer; the front ends only print or serialize it.
//!
//! `merge` of every finished task ([`MergeTarget::All`]) goes through them in the
//! order they finished, oldest first, and does not stop at a conflict: each task is
//! merged, found conflicting (the merge aborted, the repository exactly as it was, the
//! branch kept) or left (refused or failed for another reason, with the reason).

pub mod check;
mod facts;
mod state;
pub use state::{annotate, annotated, state_of, summary, ReviewState, ReviewSummary};

use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::protocol::{TaskId, WorktreeChange};
use crate::tasks::{ListOptions, TaskState};
use crate::worktree::{self, MergeHow, Repo};
use crate::Client;

/// How much of a patch [`diff`] returns when not told, in bytes.
pub const DIFF_DEFAULT_BYTES: usize = 64 * 1024;
/// The most of a patch [`diff`] ever returns, in bytes.
pub const DIFF_MAX_BYTES: usize = 1024 * 1024;

/// The worktree change task `id`'s result records: [`Error::NoSuchTask`],
/// [`Error::TaskUnfinished`] or [`Error::NoWorktree`] when there is none (yet).
pub fn change(client: &Client, id: &TaskId) -> Result<WorktreeChange> {
    let Some(r) = client.result_of(id)? else {
        return Err(match client.find_task(id)? {
            Some(loc) => Error::TaskUnfinished {
                id: id.to_string(),
                state: loc.state.to_string(),
            },
            None => Error::NoSuchTask {
                id: id.to_string(),
                root: client.root().path().to_path_buf(),
            },
        });
    };
    r.worktree
        .ok_or_else(|| Error::NoWorktree { id: id.to_string() })
}

/// What [`diff`] is asked.
#[derive(Debug, Clone)]
pub struct DiffRequest {
    pub id: TaskId,
    /// The most of the patch to return, in bytes (at most [`DIFF_MAX_BYTES`]); the
    /// patch is clipped at the last whole line that fits.
    pub max_bytes: usize,
}

/// A task's change as `git diff BASE...BRANCH` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDiff {
    pub id: TaskId,
    pub repo: PathBuf,
    pub branch: String,
    /// The commit the branch was made from.
    pub base: String,
    /// The branch's tip (its recorded head once the branch is gone).
    pub head: String,
    /// Whether the branch is still there (not merged or discarded yet).
    pub branch_exists: bool,
    /// False when the task changed nothing (its branch was removed at its end).
    pub kept: bool,
    pub files_changed: u64,
    pub insertions: u64,
    pub deletions: u64,
    /// `+I -D in N files`.
    pub diffstat: String,
    /// `git diff --stat` of the change.
    pub stat: String,
    /// The patch (`git diff`), clipped to the request's `max_bytes`.
    pub patch: String,
    /// The whole patch's size in bytes.
    pub patch_bytes: u64,
    /// Whether `patch` is only the start of it.
    pub truncated: bool,
}

/// Task `id`'s change: its diffstat and patch (clipped as the request says).
pub fn diff(client: &Client, req: &DiffRequest) -> Result<TaskDiff> {
    diff_of(&req.id, &change(client, &req.id)?, req.max_bytes)
}

/// [`diff`] of a change already found (on a root, or from the repository's branch alone).
pub fn diff_of(id: &TaskId, change: &WorktreeChange, max_bytes: usize) -> Result<TaskDiff> {
    let repo = Repo::of(&change.repo)?;
    let branch_exists = repo.branch_exists(&change.branch)?;
    let head = if branch_exists {
        repo.resolve(&change.branch)?
            .unwrap_or_else(|| change.head_commit.clone())
    } else {
        change.head_commit.clone()
    };
    let (stat, patch) = if change.kept {
        let range = worktree::diff_range(change)?;
        (
            worktree::git(&repo.top, &["diff", "--no-color", "--stat", &range])?,
            worktree::git(&repo.top, &["diff", "--no-color", &range])?,
        )
    } else {
        (String::new(), String::new())
    };
    let patch_bytes = patch.len() as u64;
    let clipped = clip(&patch, max_bytes.min(DIFF_MAX_BYTES));
    Ok(TaskDiff {
        id: id.clone(),
        repo: change.repo.clone(),
        branch: change.branch.clone(),
        base: change.base_commit.clone(),
        head,
        branch_exists,
        kept: change.kept,
        files_changed: change.files_changed,
        insertions: change.insertions,
        deletions: change.deletions,
        diffstat: change.diffstat(),
        stat,
        truncated: clipped.len() < patch.len(),
        patch: clipped.to_string(),
        patch_bytes,
    })
}

/// The start of `text` within `max` bytes, ended after its last whole line (or at a
/// character boundary when not even one line fits).
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    match text[..cut].rfind('\n') {
        Some(nl) => &text[..=nl],
        None => &text[..cut],
    }
}

/// Which tasks [`merge`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeTarget {
    One(TaskId),
    /// Every finished, successful task whose branch is still there, in the order they
    /// finished (oldest first).
    All,
}

/// What [`merge`] is asked.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    pub target: MergeTarget,
    pub how: MergeHow,
    /// A shell command run on each merged result in a scratch worktree first
    /// (`--check`, else config.json's `mergeCheck`); only what passes is merged.
    pub check: Option<String>,
}

/// What became of one task's branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum MergeResult {
    /// Merged into `into`, now at `head`; the task's worktree and branch are removed.
    Merged { into: String, head: String },
    /// Conflicts in `files`: the merge was aborted, the repository is exactly as it
    /// was, the branch is kept to resolve by hand.
    Conflict { into: String, files: Vec<String> },
    /// Merged onto `into` in a scratch worktree, the check failed (`exit`; `None`
    /// when killed or stopped at its bound): not merged, the repository as it was.
    CheckFailed {
        into: String,
        exit: Option<i32>,
        /// The end of the check's output.
        #[serde(rename = "outputTail")]
        output_tail: String,
    },
    /// Not merged for another reason (uncommitted changes, a detached HEAD, the branch
    /// gone, git failing); the repository is as it was.
    Left { reason: String },
}

/// One task's merge.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeOutcome {
    pub id: TaskId,
    pub repo: PathBuf,
    pub branch: String,
    /// `+I -D in N files`.
    pub diffstat: String,
    #[serde(flatten)]
    pub result: MergeResult,
}

/// Every task [`merge`] took, in the order it took them.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeReport {
    pub tasks: Vec<MergeOutcome>,
}

impl MergeReport {
    /// Whether every task taken was merged (true of none).
    pub fn all_merged(&self) -> bool {
        self.tasks
            .iter()
            .all(|t| matches!(t.result, MergeResult::Merged { .. }))
    }
}

/// The check `merge` runs when not given one: config.json's `mergeCheck`.
pub fn configured_check(client: &Client) -> Result<Option<String>> {
    Ok(crate::Config::load(&client.root().config_file())?.merge_check)
}

/// Merge the request's task(s) into the branch checked out in each one's repository.
///
/// One task: a conflict is its report's [`MergeResult::Conflict`]; anything else that
/// keeps it from merging (no such task, unfinished, no worktree, branch gone, a dirty
/// checkout, a detached HEAD, git failing) is the error. Every task: nothing stops the
/// run; each is reported merged, conflicting or left, in the order they finished.
pub fn merge(client: &Client, req: &MergeRequest) -> Result<MergeReport> {
    match &req.target {
        MergeTarget::One(id) => merge_of(id, &change(client, id)?, req.how, req.check.as_deref()),
        MergeTarget::All => {
            let mut report = MergeReport::default();
            for (id, change) in mergeable(client)? {
                let result = merge_change(&id, &change, req.how, req.check.as_deref())
                    .unwrap_or_else(|e| MergeResult::Left {
                        reason: e.to_string(),
                    });
                report.tasks.push(outcome(&id, &change, result));
            }
            Ok(report)
        }
    }
}

/// [`merge`] of one task whose change is already found (on a root, or from the
/// repository's branch alone).
pub fn merge_of(
    id: &TaskId,
    change: &WorktreeChange,
    how: MergeHow,
    check: Option<&str>,
) -> Result<MergeReport> {
    let result = merge_change(id, change, how, check)?;
    Ok(MergeReport {
        tasks: vec![outcome(id, change, result)],
    })
}

fn outcome(id: &TaskId, change: &WorktreeChange, result: MergeResult) -> MergeOutcome {
    MergeOutcome {
        id: id.clone(),
        repo: change.repo.clone(),
        branch: change.branch.clone(),
        diffstat: change.diffstat(),
        result,
    }
}

/// One task's merge: first its conflicts found without touching any work tree (`git
/// merge-tree`), then `check` run on the merged result in a scratch worktree, then the
/// merge itself; merged, conflicting, check failed, or the error that kept it from trying.
fn merge_change(
    id: &TaskId,
    change: &WorktreeChange,
    how: MergeHow,
    check: Option<&str>,
) -> Result<MergeResult> {
    let (repo, into) = worktree::ready_to_merge(id, change)?;
    if let Some(head) = repo.resolve("HEAD")? {
        use worktree::merge_tree::{try_merge, Trial};
        match try_merge(&repo.top, &head, &change.branch) {
            Ok(Trial::Conflict { files }) => return Ok(MergeResult::Conflict { into, files }),
            Ok(Trial::Clean { .. }) => {}
            // A git before 2.38 has no `merge-tree --write-tree`: the merge itself
            // finds the conflicts (and is undone), but a check needs the trial.
            Err(e) if check.is_some() => return Err(e),
            Err(_) => {}
        }
        if let Some(cmd) = check {
            let v = check::run(&repo, &head, &change.branch, cmd)?;
            if !v.passed {
                return Ok(MergeResult::CheckFailed {
                    into,
                    exit: v.exit,
                    output_tail: v.tail,
                });
            }
        }
    }
    let message = merge_message(id, change, how);
    match worktree::merge(id, change, how, &message) {
        Ok(head) => {
            let into = Repo::of(&change.repo)
                .and_then(|r| r.current_branch())
                .ok()
                .flatten()
                .unwrap_or_else(|| "HEAD".into());
            Ok(MergeResult::Merged { into, head })
        }
        Err(Error::MergeConflict { into, files, .. }) => Ok(MergeResult::Conflict { into, files }),
        Err(e) => Err(e),
    }
}

/// Finished, successful tasks whose branch is still there, in the order they finished
/// (oldest first; the same moment by id).
pub fn mergeable(client: &Client) -> Result<Vec<(TaskId, WorktreeChange)>> {
    let opts = ListOptions {
        states: vec![TaskState::Done],
        limit: None,
        ..ListOptions::default()
    };
    let mut found: Vec<_> = client
        .list_tasks(&opts)?
        .into_iter()
        .filter_map(|t| {
            let w = t.worktree.filter(|w| w.kept)?;
            Some((t.finished_at.unwrap_or_default(), t.id, w))
        })
        .filter(|(_, _, w)| {
            Repo::of(&w.repo)
                .and_then(|r| r.branch_exists(&w.branch))
                .unwrap_or(false)
        })
        .collect();
    found.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.to_string().cmp(&b.1.to_string()))
    });
    Ok(found.into_iter().map(|(_, id, w)| (id, w)).collect())
}

/// `Merge conductor/t1 (task t1): <the branch's first line>`; a squash takes the
/// branch's first line as its subject.
pub fn merge_message(id: &TaskId, change: &WorktreeChange, how: MergeHow) -> String {
    let subject = worktree::git(&change.repo, &["log", "-1", "--format=%s", &change.branch])
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match how {
        MergeHow::Squash => format!(
            "{subject}\n\nConductor-Task: {id} (squashed {})\n",
            change.branch
        ),
        _ => format!("Merge {} (task {id}): {subject}\n", change.branch),
    }
}

/// What [`discard`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Discarded {
    pub id: TaskId,
    pub repo: PathBuf,
    pub branch: String,
    /// The worktree directory removed.
    pub path: PathBuf,
    /// True when branch and worktree were both gone already (nothing was done).
    pub already_gone: bool,
}

/// Remove task `id`'s worktree and delete its branch; its result stays. Without
/// `force`, work not in the checked-out branch (commits no other branch has, or
/// uncommitted changes in its worktree) is refused with [`Error::WorkNotMerged`].
pub fn discard(client: &Client, id: &TaskId, force: bool) -> Result<Discarded> {
    discard_of(id, change(client, id)?, force)
}

/// [`discard`] of a change already found (on a root, or from the repository's branch
/// alone).
pub fn discard_of(id: &TaskId, change: WorktreeChange, force: bool) -> Result<Discarded> {
    let repo = Repo::of(&change.repo)?;
    let had_branch = repo.branch_exists(&change.branch)?;
    let had_tree = change.path.exists();
    let done = Discarded {
        id: id.clone(),
        repo: change.repo.clone(),
        branch: change.branch.clone(),
        path: change.path.clone(),
        already_gone: !had_branch && !had_tree,
    };
    if done.already_gone {
        return Ok(done);
    }
    if !force {
        refuse_losing_work(id, &repo, &change)?;
    }
    worktree::remove_forced(&repo.top, &change.path, Some(&change.branch));
    if repo.branch_exists(&change.branch)? || change.path.exists() {
        return Err(Error::NotDiscarded {
            id: id.to_string(),
            branch: change.branch,
            path: change.path,
        });
    }
    Ok(done)
}

/// [`Error::WorkNotMerged`] when removing `change`'s branch and worktree would lose
/// work: commits no other branch has whose change is not in `HEAD`, or uncommitted
/// changes in its worktree.
fn refuse_losing_work(id: &TaskId, repo: &Repo, change: &WorktreeChange) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::WorkNotMerged {
            id: id.to_string(),
            branch: change.branch.clone(),
            why,
        })
    };
    if worktree::keep::has_uncommitted(&change.path) {
        return refuse(format!(
            "has uncommitted changes in its worktree {}",
            change.path.display()
        ));
    }
    let unique = worktree::keep::unique_commits(&repo.top, &change.branch)?;
    if unique > 0 && state_of(change) != ReviewState::Merged {
        return refuse(if unique == u64::MAX {
            "may hold commits no other branch has".into()
        } else {
            format!("holds {unique} commit(s) no other branch has, not merged")
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_clipped_after_its_last_whole_line() {
        assert_eq!(clip("ab\ncd\nef\n", 100), "ab\ncd\nef\n");
        assert_eq!(clip("ab\ncd\nef\n", 7), "ab\ncd\n");
        assert_eq!(clip("abcdef", 3), "abc");
        // Never inside a character.
        assert_eq!(clip("ééé", 3), "é");
    }

    #[test]
    fn outcomes_serialize_with_their_kind() {
        let o = MergeOutcome {
            id: TaskId::from("t1"),
            repo: PathBuf::from("/r"),
            branch: "conductor/t1".into(),
            diffstat: "+1 -0 in 1 file".into(),
            result: MergeResult::Conflict {
                into: "main".into(),
                files: vec!["a.txt".into()],
            },
        };
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["outcome"], "conflict");
        assert_eq!(v["files"][0], "a.txt");
        assert_eq!(v["id"], "t1");
    }
}
