//! `worktrees`: task worktrees (`--worktree`) that nothing accounts for any more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::check::Check;
use crate::fsio::regular_files;
use crate::layout::Root;
use crate::protocol::{TaskId, TaskResult};
use crate::worktree;

/// Most result files read to find the repositories tasks ran in.
const MAX_RESULTS_READ: usize = 5000;

/// Every repository a task of this root made a worktree in (from the slots' records and
/// the results), and in each the task worktrees git lists: one is orphaned when git
/// calls it prunable (its directory is gone) or when no task of this root accounts for
/// it (no result says it was kept, no slot is running it). Likewise a `conductor/<id>`
/// branch with no worktree that no result or slot record accounts for (its result was
/// deleted, or another tool made it); `conductor-launch`'s `conductor/worker-N` are not
/// tasks' and are left out.
pub(super) fn check_worktrees(root: &Root) -> Check {
    let Ok(slots) = root.slots() else {
        return Check::ok("worktrees", "no slots");
    };
    let Known {
        repos,
        accounted,
        branches,
    } = known(root, slots);
    let mut orphans: BTreeMap<PathBuf, String> = BTreeMap::new();
    for repo in &repos {
        let Ok(listed) = worktree::task_worktrees(repo) else {
            continue;
        };
        orphan_branches(root, repo, &listed, &branches, &mut orphans);
        for (path, branch) in listed {
            let known_id = path
                .file_name()
                .and_then(|n| TaskId::parse(&n.to_string_lossy()).ok())
                .is_some_and(|id| crate::ids::lookup(root, &id).ok().flatten().is_some());
            let why = if !path.exists() {
                "its directory is gone (git worktree prune removes the entry)"
            } else if accounted.contains(&path) {
                continue;
            } else if known_id {
                "its task's result does not keep it"
            } else {
                "no task of this root made it"
            };
            orphans.insert(
                path,
                format!(
                    "{} in {}: {why}",
                    branch.unwrap_or_default(),
                    repo.display()
                ),
            );
        }
    }
    if orphans.is_empty() {
        return Check::ok(
            "worktrees",
            format!(
                "{} with task worktrees; none orphaned",
                crate::text::count(repos.len(), "repository", "repositories")
            ),
        );
    }
    let detail = orphans
        .iter()
        .map(|(p, why)| format!("{} ({why})", p.display()))
        .collect::<Vec<_>>()
        .join("; ");
    Check::warn(
        "worktrees",
        format!(
            "{} orphaned: {detail}",
            crate::text::count(
                orphans.len(),
                "task worktree or branch",
                "task worktrees or branches"
            )
        ),
        "`git worktree remove --force PATH` (and `git branch -D conductor/ID`), \
         `git worktree prune` for one whose directory is gone; an orphaned branch: `git \
         merge` it or `git branch -D` it",
    )
}

/// What the slots' records and the results tell of task worktrees.
struct Known {
    /// Every repository a task made a worktree in.
    repos: BTreeSet<PathBuf>,
    /// Worktrees a running task or a result that kept it accounts for.
    accounted: BTreeSet<PathBuf>,
    /// (repository, branch) of those worktrees.
    branches: BTreeSet<(PathBuf, String)>,
}

/// Reads the slots' worktree records and (at most [`MAX_RESULTS_READ`]) their results.
fn known(root: &Root, slots: Vec<crate::Slot>) -> Known {
    let mut repos = BTreeSet::new();
    let mut accounted: BTreeSet<PathBuf> = BTreeSet::new();
    let mut branches: BTreeSet<(PathBuf, String)> = BTreeSet::new();
    let mut read = 0;
    for slot in slots {
        let paths = root.worker(slot);
        if let Ok(Some(rec)) = crate::fsio::read_json::<crate::protocol::WorktreeRecord>(
            &worktree::record_path(&paths.dir),
            crate::fsio::SMALL_FILE_LIMIT,
        ) {
            repos.insert(rec.repo.clone());
            accounted.insert(rec.path.clone());
            branches.insert((rec.repo.clone(), rec.branch.clone()));
        }
        for (name, path, _) in regular_files(&paths.results_dir()).unwrap_or_default() {
            if read >= MAX_RESULTS_READ || !name.ends_with(".json") {
                continue;
            }
            read += 1;
            if let Ok(Some(r)) = TaskResult::read(&path) {
                if let Some(w) = r.worktree {
                    repos.insert(w.repo.clone());
                    if w.kept {
                        accounted.insert(w.path);
                        branches.insert((w.repo, w.branch));
                    }
                }
            }
        }
    }
    Known {
        repos,
        accounted,
        branches,
    }
}

/// The `conductor/<id>` branches of `repo` on no worktree that no result or slot record
/// accounts for, into `orphans` with why.
fn orphan_branches(
    root: &Root,
    repo: &Path,
    listed: &[(PathBuf, Option<String>)],
    branches: &BTreeSet<(PathBuf, String)>,
    orphans: &mut BTreeMap<PathBuf, String>,
) {
    let on_worktrees: BTreeSet<String> = listed.iter().filter_map(|(_, b)| b.clone()).collect();
    for branch in worktree::task_branches(repo).unwrap_or_default() {
        if on_worktrees.contains(&branch)
            || branches.contains(&(repo.to_path_buf(), branch.clone()))
        {
            continue;
        }
        let known_id = branch
            .strip_prefix("conductor/")
            .and_then(|id| TaskId::parse(id).ok())
            .is_some_and(|id| crate::ids::lookup(root, &id).ok().flatten().is_some());
        let why = if known_id {
            "a branch no result of its task records any more: `git merge` or `git branch -D` it"
        } else {
            "a branch no task of this root made"
        };
        orphans.insert(
            PathBuf::from(format!("branch {branch} of {}", repo.display())),
            why.to_string(),
        );
    }
}
