//! Garbage collection (`conductor gc`): which old results, task records, logs,
//! rejected inputs, temp files and trash go, and removing them. Files of running or
//! waiting tasks and the files a slot lives by are never on the list.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fsio::{is_temp_name, regular_files};
use crate::gate;
use crate::inspect::read_task_file;
use crate::inspect::task_files::status_task;
use crate::layout::{Root, WorkerPaths};
use crate::text::{age_since, secs};

/// Temp files (`.NAME.<nonce>.tmp`) younger than this may still be being written.
pub const TEMP_FILE_AGE: Duration = Duration::from_secs(10 * 60);

/// What `conductor gc` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Results, task records, logs and rejected files older than this (by mtime).
    pub older_than: Duration,
    /// Temp files older than this.
    pub temp_older_than: Duration,
    /// Task worktrees of tasks that finished longer ago than this (config.json's
    /// `worktreeRetentionSecs`); `None`: worktrees are left alone.
    pub worktrees_older_than: Option<Duration>,
}

impl GcOptions {
    pub fn new(older_than: Duration) -> GcOptions {
        GcOptions {
            older_than,
            temp_older_than: TEMP_FILE_AGE,
            worktrees_older_than: None,
        }
    }
}

/// Why a file is on the gc list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum GcKind {
    /// `results/<id>.json`.
    Result,
    /// `tasks/<id>.json`: the task as it ran.
    TaskRecord,
    /// `tasks/<id>.log`: the run's log (and `tasks/<id>.jsonl`, a stream's raw lines,
    /// `tasks/<id>.setup.log`, its worktree setup's output).
    TaskLog,
    /// A file in `rejected/`.
    Rejected,
    /// A leftover `.NAME.<nonce>.tmp` from an interrupted write.
    TempFile,
    /// A parked file in `.trash/` of a slot no live worker serves.
    Trash,
    /// A finished task's git worktree (`git worktree remove`; its branch stays, and so
    /// does its result while the branch is unmerged).
    Worktree,
}

impl fmt::Display for GcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GcKind::Result => "result",
            GcKind::TaskRecord => "task record",
            GcKind::TaskLog => "task log",
            GcKind::Rejected => "rejected input",
            GcKind::TempFile => "temp file",
            GcKind::Trash => "trash",
            GcKind::Worktree => "task worktree",
        })
    }
}

/// One file `gc` would remove.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcItem {
    pub path: PathBuf,
    pub kind: GcKind,
    /// What removing it frees: 0 for a file with other names (hard links).
    pub bytes: u64,
    #[serde(rename = "ageSecs", serialize_with = "secs")]
    pub age: Option<Duration>,
    /// For a task worktree: the repository it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
}

/// What `gc` would remove, and what it kept on purpose.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcPlan {
    pub items: Vec<GcItem>,
    pub bytes: u64,
    /// Task ids whose files are kept because the task is running or waiting.
    pub protected: Vec<String>,
    /// Finished tasks whose files are kept, old as they are, because their branch is
    /// neither merged nor discarded: `diff` and `merge` read the result.
    pub unmerged: Vec<UnmergedBranch>,
}

/// A task's branch gc keeps the result of (see [`GcPlan::unmerged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnmergedBranch {
    pub id: String,
    pub branch: String,
    pub repo: PathBuf,
    /// Whether its worktree is still there (gc removes it past the retention period;
    /// the branch stays).
    pub worktree: bool,
}

/// The outcome of [`apply_gc`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    pub removed: Vec<GcItem>,
    pub bytes: u64,
    /// Files that could not be removed, with the reason.
    pub errors: Vec<String>,
}

/// Files gc never removes, whatever directory they are found in.
const NEVER_REMOVED: [&str; 6] = {
    let [task, cancel] = WorkerPaths::WAKE_NAMES;
    [
        "result.json",
        "status.json",
        "running.json",
        task,
        "output.log",
        cancel,
    ]
};

impl GcItem {
    fn new(path: PathBuf, kind: GcKind, meta: &fs::Metadata) -> GcItem {
        GcItem {
            path,
            kind,
            bytes: freed_bytes(meta),
            age: meta.modified().ok().map(age_since),
            repo: None,
        }
    }

    fn older_than(&self, limit: Duration) -> bool {
        self.age.is_some_and(|a| a > limit)
    }
}

/// Bytes freed by unlinking this name: nothing while other names keep the data.
fn freed_bytes(meta: &fs::Metadata) -> u64 {
    if meta.nlink() > 1 {
        0
    } else {
        meta.len()
    }
}

/// Old `.*.tmp` files under `dir`, recursively (symlinks are not followed).
fn temp_files(dir: &Path, older_than: Duration, depth: u32, out: &mut Vec<GcItem>) -> Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if meta.is_dir() && depth < 8 {
            temp_files(&path, older_than, depth + 1, out)?;
        } else if meta.file_type().is_file() && is_temp_name(&name) {
            let item = GcItem::new(path, GcKind::TempFile, &meta);
            if item.older_than(older_than) {
                out.push(item);
            }
        }
    }
    Ok(())
}

/// Ids of the tasks a slot has in hand or waiting: their files are never collected.
fn busy_ids(paths: &WorkerPaths) -> HashSet<String> {
    [paths.running(), paths.task()]
        .iter()
        .filter_map(|f| read_task_file(f).and_then(|t| t.task_id))
        .chain(status_task(paths))
        .map(|id| id.to_string())
        .collect()
}

/// Ids that a task waiting in `queue/pending/` depends on (`after`): their results decide
/// whether it runs, so they are never collected while it waits.
fn depended_on(root: &Root) -> Result<HashSet<String>> {
    let mut ids = HashSet::new();
    for (name, path, _) in regular_files(&root.queue_pending())? {
        if is_temp_name(&name) {
            continue;
        }
        if let Ok(Some(task)) = crate::protocol::Task::read(&path, crate::fsio::TASK_SIZE_LIMIT) {
            ids.extend(task.after.iter().map(|d| d.to_string()));
        }
    }
    Ok(ids)
}

/// Old `results/<id>.json` of tasks not busy; returns the ids collected. A task whose
/// branch is neither merged nor discarded keeps its result however old (`diff` and
/// `merge` need it; gc never deletes a branch): it goes to `unmerged` instead, and its
/// worktree goes once the retention period has passed.
fn old_results(
    paths: &WorkerPaths,
    busy: &HashSet<String>,
    opts: &GcOptions,
    items: &mut Vec<GcItem>,
    unmerged: &mut Vec<UnmergedBranch>,
) -> Result<HashSet<String>> {
    let mut collected = HashSet::new();
    for (name, path, meta) in regular_files(&paths.results_dir())? {
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if is_temp_name(&name) || busy.contains(id) {
            continue;
        }
        let item = GcItem::new(path, GcKind::Result, &meta);
        let old = item.older_than(opts.older_than);
        let past_retention = opts
            .worktrees_older_than
            .is_some_and(|limit| item.older_than(limit));
        if !old && !past_retention {
            continue;
        }
        let change = crate::protocol::TaskResult::read(&item.path)
            .ok()
            .flatten()
            .and_then(|r| r.worktree)
            .filter(|w| w.kept);
        let mut keep = false;
        if let Some(w) = change {
            let worktree = w.path.is_dir();
            if past_retention && worktree {
                items.push(GcItem {
                    path: w.path.clone(),
                    kind: GcKind::Worktree,
                    bytes: 0,
                    age: item.age,
                    repo: Some(w.repo.clone()),
                });
            }
            if old && branch_unmerged(&w.repo, &w.branch) {
                keep = true;
                unmerged.push(UnmergedBranch {
                    id: id.to_string(),
                    branch: w.branch,
                    repo: w.repo,
                    worktree: worktree && !past_retention,
                });
            }
        }
        if old && !keep {
            collected.insert(id.to_string());
            items.push(item);
        }
    }
    Ok(collected)
}

/// Whether `branch` is still in the repository at `repo`: neither merged nor discarded
/// (both delete it). A repository that is gone has none; one git cannot read counts as
/// having it, so nothing `merge` may still need is collected on a doubt.
fn branch_unmerged(repo: &Path, branch: &str) -> bool {
    if !repo.exists() {
        return false;
    }
    crate::worktree::Repo::of(repo)
        .and_then(|r| r.branch_exists(branch))
        .unwrap_or(true)
}

/// Task records and logs go with their result; ones whose result is already gone go
/// once they are old themselves.
fn task_files(
    paths: &WorkerPaths,
    busy: &HashSet<String>,
    collected: &HashSet<String>,
    opts: &GcOptions,
    items: &mut Vec<GcItem>,
) -> Result<()> {
    let results_dir = paths.results_dir();
    for (name, path, meta) in regular_files(&paths.tasks_dir())? {
        let (id, kind) = if let Some(id) = name.strip_suffix(".json") {
            (id, GcKind::TaskRecord)
        } else if let Some(id) = name
            .strip_suffix(".setup.log")
            .or(name.strip_suffix(".log"))
            .or(name.strip_suffix(".jsonl"))
        {
            (id, GcKind::TaskLog)
        } else {
            continue;
        };
        if is_temp_name(&name) || busy.contains(id) {
            continue;
        }
        let item = GcItem::new(path, kind, &meta);
        let orphan_and_old =
            !results_dir.join(format!("{id}.json")).exists() && item.older_than(opts.older_than);
        if collected.contains(id) || orphan_and_old {
            items.push(item);
        }
    }
    Ok(())
}

/// Everything gc would take from one slot whose busy task ids are `busy`.
fn plan_slot(
    paths: &WorkerPaths,
    busy: &HashSet<String>,
    opts: &GcOptions,
    items: &mut Vec<GcItem>,
    unmerged: &mut Vec<UnmergedBranch>,
) -> Result<()> {
    let collected = old_results(paths, busy, opts, items, unmerged)?;
    task_files(paths, busy, &collected, opts, items)?;
    for (_, path, meta) in regular_files(&paths.rejected_dir())? {
        let item = GcItem::new(path, GcKind::Rejected, &meta);
        if item.older_than(opts.older_than) {
            items.push(item);
        }
    }
    if gate::probe(&paths.worker_gate())?.is_none() {
        for (_, path, meta) in regular_files(&paths.trash_dir())? {
            items.push(GcItem::new(path, GcKind::Trash, &meta));
        }
    }
    Ok(())
}

/// Plan a gc of the root: old results with their task records and logs, old rejected
/// inputs, old temp files under `workers/` and `queue/tmp/`, and `.trash/` of slots no
/// live worker serves. Files of running or waiting tasks are never on the list, nor
/// are `result.json`, `status.json`, `running.json`, `task.json` or `output.log`.
pub fn plan_gc(root: &Root, opts: &GcOptions) -> Result<GcPlan> {
    let mut items = Vec::new();
    let mut protected = BTreeSet::new();
    let mut unmerged = Vec::new();
    let depended_on = depended_on(root)?;
    for slot in root.slots()? {
        let paths = root.worker(slot);
        let mut busy = busy_ids(&paths);
        busy.extend(depended_on.iter().cloned());
        plan_slot(&paths, &busy, opts, &mut items, &mut unmerged)?;
        protected.extend(busy);
    }
    let already: HashSet<PathBuf> = items.iter().map(|i| i.path.clone()).collect();
    let mut temps = Vec::new();
    temp_files(&root.workers_dir(), opts.temp_older_than, 0, &mut temps)?;
    temp_files(&root.queue_tmp(), opts.temp_older_than, 0, &mut temps)?;
    items.extend(temps.into_iter().filter(|t| !already.contains(&t.path)));
    items.retain(|i| {
        i.path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !NEVER_REMOVED.contains(&n))
    });
    let bytes = items.iter().map(|i| i.bytes).sum();
    Ok(GcPlan {
        items,
        bytes,
        protected: protected.into_iter().collect(),
        unmerged,
    })
}

/// Remove what `plan` lists. A file already gone is fine; other failures are reported
/// and the rest carries on.
pub fn apply_gc(plan: &GcPlan) -> GcReport {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for item in &plan.items {
        if let (GcKind::Worktree, Some(repo)) = (item.kind, &item.repo) {
            // Changes made there since the task ended are on no branch: kept.
            if crate::worktree::keep::has_uncommitted(&item.path) {
                errors.push(format!(
                    "kept the task worktree {}: it has uncommitted changes",
                    item.path.display()
                ));
                continue;
            }
            crate::worktree::remove(repo, &item.path, None);
            if item.path.exists() {
                errors.push(format!(
                    "cannot remove the task worktree {} of {}",
                    item.path.display(),
                    repo.display()
                ));
            } else {
                removed.push(item.clone());
            }
            continue;
        }
        match fs::remove_file(&item.path) {
            Ok(()) => removed.push(item.clone()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => errors.push(Error::io("remove", &item.path, e).to_string()),
        }
    }
    let bytes = removed.iter().map(|i| i.bytes).sum();
    GcReport {
        removed,
        bytes,
        errors,
    }
}
