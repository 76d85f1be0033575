//! `worktrees`: task worktrees (`--worktree`) that nothing accounts for any more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::Check;
use crate::fsio::regular_files;
use crate::layout::Root;
use crate::protocol::{TaskId, TaskResult};
use crate::worktree;

/// Most result files read to find the repositories tasks ran in.
const MAX_RESULTS_READ: usize = 5000;

/// Every repository a task of this root made a worktree in (from the slots' records and
/// the results), and in each the task worktrees git lists: one is orphaned when git
/// calls it prunable (its directory is gone) or when no task of this root accounts for
/// it (no result says it was kept, no slot is running it).
pub(super) fn check_worktrees(root: &Root) -> Check {
    let mut repos = BTreeSet::new();
    let mut accounted: BTreeSet<PathBuf> = BTreeSet::new();
    let Ok(slots) = root.slots() else {
        return Check::ok("worktrees", "no slots");
    };
    let mut read = 0;
    for slot in slots {
        let paths = root.worker(slot);
        if let Ok(Some(rec)) = crate::fsio::read_json::<crate::protocol::WorktreeRecord>(
            &worktree::record_path(&paths.dir),
            crate::fsio::SMALL_FILE_LIMIT,
        ) {
            repos.insert(rec.repo.clone());
            accounted.insert(rec.path.clone());
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
                    }
                }
            }
        }
    }
    let mut orphans: BTreeMap<PathBuf, String> = BTreeMap::new();
    for repo in &repos {
        let Ok(listed) = worktree::task_worktrees(repo) else {
            continue;
        };
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
                "{} repositor(ies) with task worktrees; none orphaned",
                repos.len()
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
        format!("{} orphaned task worktree(s): {detail}", orphans.len()),
        "`git worktree remove --force PATH` (and `git branch -D conductor/ID`), or \
         `git worktree prune` for one whose directory is gone",
    )
}
