//! Keeping a root tidy and healthy: cancelling a running task, removing stale locks
//! (`conductor locks clean`), garbage-collecting old files (`conductor gc`) and
//! checking the setup (`conductor doctor`).
//!
//! Every removal is planned first and only applied on request; nothing here ever
//! touches a live holder's lock or a file of a task that is running.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::agent::AgentCommand;
use crate::config::Config;
use crate::dirlock::{self, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability, RESULT_SIZE_LIMIT, SMALL_FILE_LIMIT, TASK_SIZE_LIMIT};
use crate::gate;
use crate::inspect::{self, secs, LockEntry, LockKind, LockStatus};
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{parse_result, parse_status, Task, TaskId, WorkerState};
use crate::watch::{DirWatcher, WatchMode, WatcherKind};

// ---------------------------------------------------------------------------------
// cancel

/// What [`request_cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// `cancel` now names the running task; its worker stops the agent.
    Requested { id: TaskId },
    /// Nothing is running on the slot (a task may wait in the inbox).
    NothingRunning { inbox: Option<TaskId> },
    /// Another task than the one asked for is running; nothing was written.
    OtherTaskRunning { running: TaskId },
    /// A task is in hand but no live worker serves the slot; nothing was written.
    NoLiveWorker { id: Option<TaskId> },
}

/// Ask the worker serving `slot` to cancel its running task, by writing the task's id
/// into `workers/<N>/cancel` (atomically). With `only`, only if that task is the one
/// running. The id is always written (never an empty file), so a request that arrives
/// after the task ended cannot cancel the next one.
pub fn request_cancel(root: &Root, slot: Slot, only: Option<&TaskId>) -> Result<CancelOutcome> {
    let paths = inspect::require_slot(root, slot)?;
    let running = inspect::read_task_file(&paths.running());
    let worker_live = gate::probe(&paths.worker_gate())?.is_some();
    let Some(running) = running else {
        let inbox = inspect::read_task_file(&paths.task()).and_then(|f| f.task_id);
        return Ok(CancelOutcome::NothingRunning { inbox });
    };
    // running.json without a readable id: the status names what the worker runs.
    let id = running.task_id.or_else(|| {
        fsio::read_bounded(&paths.status(), SMALL_FILE_LIMIT)
            .ok()
            .flatten()
            .and_then(|b| parse_status(&paths.status(), &b).ok())
            .filter(|s| s.status == WorkerState::Working)
            .and_then(|s| s.task_id)
    });
    if !worker_live {
        return Ok(CancelOutcome::NoLiveWorker { id });
    }
    let Some(id) = id else {
        return Err(Error::Usage(format!(
            "worker {slot} has a task in hand whose id cannot be read yet; try again in a moment"
        )));
    };
    if let Some(want) = only {
        if *want != id {
            return Ok(CancelOutcome::OtherTaskRunning { running: id });
        }
    }
    fsio::write_replace(
        &paths.cancel(),
        format!("{id}\n").as_bytes(),
        Durability::Atomic,
    )?;
    Ok(CancelOutcome::Requested { id })
}

// ---------------------------------------------------------------------------------
// locks clean

/// What happened (or would happen) to one stale lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CleanAction {
    /// Dry run: it would be removed.
    WouldRemove,
    Removed,
    /// Judged again under its guard, it was no longer stale (or already gone).
    LeftAlone,
}

impl fmt::Display for CleanAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CleanAction::WouldRemove => "would remove",
            CleanAction::Removed => "removed",
            CleanAction::LeftAlone => "left alone",
        })
    }
}

/// One stale lock found by [`clean_locks`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanedLock {
    #[serde(flatten)]
    pub lock: LockEntry,
    pub action: CleanAction,
}

/// Find stale directory locks (each worker's `.lock`, `keys/`, `slots/`) and parked
/// spares of dead processes; with `apply`, remove them. Locks are removed only through
/// [`dirlock::break_if_stale`], which judges them again under their guard, so a live
/// holder's lock is never touched. Gates are flocks and never stale.
pub fn clean_locks(root: &Root, opts: &LockOptions, apply: bool) -> Result<Vec<CleanedLock>> {
    let mut out = Vec::new();
    for entry in inspect::list_locks(root, opts)? {
        if entry.status != LockStatus::Stale {
            continue;
        }
        let action = if !apply {
            CleanAction::WouldRemove
        } else if entry.kind == LockKind::Spare {
            // clear_spares removes only spares of dead pids; see whether ours went.
            if let Some(base) = spare_base(&entry.path) {
                dirlock::clear_spares(&base)?;
            }
            if entry.path.exists() {
                CleanAction::LeftAlone
            } else {
                CleanAction::Removed
            }
        } else {
            match dirlock::break_if_stale(&entry.path, opts)? {
                Some(_) => CleanAction::Removed,
                None => CleanAction::LeftAlone,
            }
        };
        out.push(CleanedLock {
            lock: entry,
            action,
        });
    }
    Ok(out)
}

/// `<dir>/<base>.spare.<pid>` → `<dir>/<base>`.
fn spare_base(spare: &Path) -> Option<PathBuf> {
    let name = spare.file_name()?.to_str()?;
    let (base, _) = name.rsplit_once(".spare.")?;
    Some(spare.with_file_name(base))
}

// ---------------------------------------------------------------------------------
// gc

/// Temp files (`.NAME.<nonce>.tmp`) younger than this may still be being written.
pub const TEMP_FILE_AGE: Duration = Duration::from_secs(10 * 60);

/// What `conductor gc` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Results, task records, logs and rejected files older than this (by mtime).
    pub older_than: Duration,
    /// Temp files older than this.
    pub temp_older_than: Duration,
}

impl GcOptions {
    pub fn new(older_than: Duration) -> GcOptions {
        GcOptions {
            older_than,
            temp_older_than: TEMP_FILE_AGE,
        }
    }
}

/// Why a file is on the gc list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcKind {
    /// `results/<id>.json`.
    Result,
    /// `tasks/<id>.json`: the task as it ran.
    TaskRecord,
    /// `tasks/<id>.log`: the run's full stdout.
    TaskLog,
    /// A file in `rejected/`.
    Rejected,
    /// A leftover `.NAME.<nonce>.tmp` from an interrupted write.
    TempFile,
    /// A parked file in `.trash/` of a slot no live worker serves.
    Trash,
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
}

/// What `gc` would remove, and what it kept on purpose.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcPlan {
    pub items: Vec<GcItem>,
    pub bytes: u64,
    /// Task ids whose files are kept because the task is running or waiting.
    pub protected: Vec<String>,
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
const NEVER_REMOVED: [&str; 6] = [
    "result.json",
    "status.json",
    "running.json",
    "task.json",
    "output.log",
    "cancel",
];

fn file_age(meta: &fs::Metadata) -> Option<Duration> {
    meta.modified().ok().map(inspect::age_since)
}

/// Bytes freed by unlinking this name: nothing while other names keep the data.
fn freed_bytes(meta: &fs::Metadata) -> u64 {
    if meta.nlink() > 1 {
        0
    } else {
        meta.len()
    }
}

/// Regular files in `dir`, sorted by name; a missing directory has none.
fn regular_files(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let mut all = crate::inspect::sorted_entries(dir)?;
    all.retain(|(_, _, meta)| meta.file_type().is_file());
    Ok(all)
}

fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > ".tmp".len() + 1
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
            let age = file_age(&meta);
            if age.is_some_and(|a| a > older_than) {
                out.push(GcItem {
                    path,
                    kind: GcKind::TempFile,
                    bytes: freed_bytes(&meta),
                    age,
                });
            }
        }
    }
    Ok(())
}

/// Ids of the tasks a slot has in hand or waiting: their files are never collected.
fn busy_ids(paths: &WorkerPaths) -> HashSet<String> {
    let mut ids = HashSet::new();
    for f in [paths.running(), paths.task()] {
        if let Some(id) = inspect::read_task_file(&f).and_then(|t| t.task_id) {
            ids.insert(id.to_string());
        }
    }
    let status = fsio::read_bounded(&paths.status(), SMALL_FILE_LIMIT)
        .ok()
        .flatten()
        .and_then(|b| parse_status(&paths.status(), &b).ok());
    if let Some(s) = status.filter(|s| s.status == WorkerState::Working) {
        if let Some(id) = s.task_id {
            ids.insert(id.to_string());
        }
    }
    ids
}

/// Plan a gc of the root: old results with their task records and logs, old rejected
/// inputs, old temp files under `workers/` and `queue/tmp/`, and `.trash/` of slots no
/// live worker serves. Files of running or waiting tasks are never on the list, nor
/// are `result.json`, `status.json`, `running.json`, `task.json` or `output.log`.
pub fn plan_gc(root: &Root, opts: &GcOptions) -> Result<GcPlan> {
    let mut items = Vec::new();
    let mut protected = BTreeSet::new();
    for slot in inspect::list_slots(root)? {
        let paths = root.worker(slot);
        let busy = busy_ids(&paths);
        protected.extend(busy.iter().cloned());
        let mut collected_ids = HashSet::new();

        for (name, path, meta) in regular_files(&paths.results_dir())? {
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if is_temp_name(&name) || busy.contains(id) {
                continue;
            }
            let age = file_age(&meta);
            if age.is_some_and(|a| a > opts.older_than) {
                collected_ids.insert(id.to_string());
                items.push(GcItem {
                    path,
                    kind: GcKind::Result,
                    bytes: freed_bytes(&meta),
                    age,
                });
            }
        }
        // Task records and logs go with their result; ones whose result is already
        // gone go once they are old themselves.
        let results_dir = paths.results_dir();
        for (name, path, meta) in regular_files(&paths.tasks_dir())? {
            let (id, kind) = if let Some(id) = name.strip_suffix(".json") {
                (id, GcKind::TaskRecord)
            } else if let Some(id) = name.strip_suffix(".log") {
                (id, GcKind::TaskLog)
            } else {
                continue;
            };
            if is_temp_name(&name) || busy.contains(id) {
                continue;
            }
            let age = file_age(&meta);
            let with_result = collected_ids.contains(id);
            let orphan_and_old = !results_dir.join(format!("{id}.json")).exists()
                && age.is_some_and(|a| a > opts.older_than);
            if with_result || orphan_and_old {
                items.push(GcItem {
                    path,
                    kind,
                    bytes: freed_bytes(&meta),
                    age,
                });
            }
        }
        for (_, path, meta) in regular_files(&paths.rejected_dir())? {
            let age = file_age(&meta);
            if age.is_some_and(|a| a > opts.older_than) {
                items.push(GcItem {
                    path,
                    kind: GcKind::Rejected,
                    bytes: freed_bytes(&meta),
                    age,
                });
            }
        }
        if gate::probe(&paths.worker_gate())?.is_none() {
            for (_, path, meta) in regular_files(&paths.trash_dir())? {
                items.push(GcItem {
                    path,
                    kind: GcKind::Trash,
                    bytes: freed_bytes(&meta),
                    age: file_age(&meta),
                });
            }
        }
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
    })
}

/// Remove what `plan` lists. A file already gone is fine; other failures are reported
/// and the rest carries on.
pub fn apply_gc(plan: &GcPlan) -> GcReport {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for item in &plan.items {
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

// ---------------------------------------------------------------------------------
// doctor

/// How a doctor check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        })
    }
}

/// One doctor check: what was looked at, what was found, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub name: String,
    pub status: CheckStatus,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &str, status: CheckStatus, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_string(),
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    fn ok(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Ok, detail)
    }

    fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Warn, detail).with_fix(fix)
    }

    fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Fail, detail).with_fix(fix)
    }

    fn with_fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// What `doctor` checks beyond the root itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorOptions {
    /// The agent command line workers will run (`--agent`).
    pub agent: String,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            agent: "claude -p".to_string(),
        }
    }
}

/// inotify limits below these are worth raising (one instance per worker and per
/// waiting client, one watch per watched directory).
const LOW_INOTIFY_INSTANCES: u64 = 256;
const LOW_INOTIFY_WATCHES: u64 = 16_384;

/// Run every check. None of them changes anything.
pub fn doctor(root: &Root, opts: &DoctorOptions) -> Vec<Check> {
    let mut checks = Vec::new();
    let root_ok = check_root(root, &mut checks);
    if root_ok {
        checks.push(check_permissions(root));
        checks.push(check_config(root));
        checks.push(check_json_files(root));
        checks.push(check_locks(root));
        checks.push(check_slots(root));
        checks.push(check_watcher(root));
        checks.push(check_filesystem(root.path()));
    }
    checks.push(check_inotify_limits());
    checks.push(check_tmux());
    checks.push(check_agent(&opts.agent));
    checks
}

fn check_root(root: &Root, checks: &mut Vec<Check>) -> bool {
    let path = root.path();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            checks.push(Check::fail(
                "root",
                format!("{} does not exist", path.display()),
                format!(
                    "`conductor init 1 --dir {}` (or point --root / CONDUCTOR_HOME at your root)",
                    path.display()
                ),
            ));
            return false;
        }
        Err(e) => {
            checks.push(Check::fail(
                "root",
                Error::io("stat", path, e).to_string(),
                "check the path and its permissions",
            ));
            return false;
        }
    };
    if !meta.is_dir() {
        checks.push(Check::fail(
            "root",
            format!("{} is not a directory", path.display()),
            "point --root / CONDUCTOR_HOME at a directory",
        ));
        return false;
    }
    let mode = meta.permissions().mode() & 0o7777;
    checks.push(if mode & 0o077 != 0 {
        Check::warn(
            "root",
            format!(
                "{} is mode {mode:04o}; others can read tasks and results",
                path.display()
            ),
            format!("chmod 700 {}", path.display()),
        )
    } else {
        Check::ok(
            "root",
            format!("{} exists, mode {mode:04o}", path.display()),
        )
    });
    if !root.workers_dir().is_dir() {
        checks.push(Check::warn(
            "slots",
            "no workers/ directory: no slot was ever created",
            "`conductor init N` creates slots 0..N-1",
        ));
    }
    true
}

/// Files should be 0600 and directories 0700: tasks and results are private.
fn check_permissions(root: &Root) -> Check {
    let mut loose = Vec::new();
    let mut count = 0usize;
    walk(root.path(), 0, &mut |path, meta| {
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            count += 1;
            if loose.len() < 5 {
                loose.push(format!("{} ({mode:04o})", path.display()));
            }
        }
    });
    if count == 0 {
        Check::ok(
            "permissions",
            "every file is 0600 and every directory 0700 (or tighter)",
        )
    } else {
        Check::warn(
            "permissions",
            format!(
                "{count} files or directories are open to other users: {}{}",
                loose.join(", "),
                if count > loose.len() { ", …" } else { "" }
            ),
            format!("chmod -R go-rwx {}", root.path().display()),
        )
    }
}

/// Visit everything under `dir` (not following symlinks; bounded depth).
fn walk(dir: &Path, depth: u32, f: &mut dyn FnMut(&Path, &fs::Metadata)) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for entry in rd.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        f(&path, &meta);
        if meta.is_dir() && depth < 8 {
            walk(&path, depth + 1, f);
        }
    }
}

fn check_config(root: &Root) -> Check {
    let path = root.config_file();
    match Config::load(&path) {
        Ok(_) if !path.exists() => Check::ok("config", "no config.json: all defaults"),
        Ok(_) => Check::ok("config", format!("{} parses", path.display())),
        Err(e) => Check::fail(
            "config",
            e.to_string(),
            format!("fix or remove {}", path.display()),
        ),
    }
}

/// What a JSON file under `workers/` should parse as.
#[derive(Debug, Clone, Copy)]
enum JsonKind {
    Status,
    Result,
    Task,
}

impl JsonKind {
    fn parse(self, path: &Path, bytes: &[u8]) -> Result<()> {
        match self {
            JsonKind::Status => parse_status(path, bytes).map(drop),
            JsonKind::Result => parse_result(path, bytes).map(drop),
            JsonKind::Task => Task::from_bytes(path, bytes).map(drop),
        }
    }
}

/// Every JSON file under `workers/` parses as what it claims to be.
fn check_json_files(root: &Root) -> Check {
    let mut bad = Vec::new();
    let mut inbox_bad = Vec::new();
    let mut count = 0usize;
    let slots = match inspect::list_slots(root) {
        Ok(s) => s,
        Err(e) => return Check::fail("json", e.to_string(), "check the root's permissions"),
    };
    let check_file = |path: &Path, kind: JsonKind, count: &mut usize| -> Option<String> {
        let limit = match kind {
            JsonKind::Status => SMALL_FILE_LIMIT,
            JsonKind::Result => RESULT_SIZE_LIMIT,
            JsonKind::Task => TASK_SIZE_LIMIT,
        };
        match fsio::read_bounded(path, limit) {
            Ok(None) => None,
            Ok(Some(bytes)) => {
                *count += 1;
                kind.parse(path, &bytes).err().map(|e| e.to_string())
            }
            Err(e) => {
                *count += 1;
                Some(e.to_string())
            }
        }
    };
    for slot in slots {
        let w = root.worker(slot);
        let mut files = vec![
            (w.status(), JsonKind::Status),
            (w.result(), JsonKind::Result),
            (w.running(), JsonKind::Task),
        ];
        for (dir, kind) in [
            (w.results_dir(), JsonKind::Result),
            (w.tasks_dir(), JsonKind::Task),
        ] {
            if let Ok(list) = regular_files(&dir) {
                files.extend(
                    list.into_iter()
                        .filter(|(n, _, _)| n.ends_with(".json") && !is_temp_name(n))
                        .map(|(_, p, _)| (p, kind)),
                );
            }
        }
        for (path, kind) in files {
            if let Some(problem) = check_file(&path, kind, &mut count) {
                bad.push(problem);
            }
        }
        if let Some(problem) = check_file(&w.task(), JsonKind::Task, &mut count) {
            inbox_bad.push(problem);
        }
    }
    let show = |v: &[String]| {
        let mut s = v.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
        if v.len() > 5 {
            s.push_str(&format!("; and {} more", v.len() - 5));
        }
        s
    };
    if !bad.is_empty() {
        Check::fail(
            "json",
            format!(
                "{} of {count} files do not parse: {}",
                bad.len(),
                show(&bad)
            ),
            "move the named files aside (a worker restarted on the slot recovers what it can); \
             a result or status written by a newer conductor needs that conductor",
        )
    } else if !inbox_bad.is_empty() {
        Check::warn(
            "json",
            format!("an inbox task does not parse: {}", show(&inbox_bad)),
            "if it is not being written right now, the worker moves it to rejected/ with a reason; \
             fix the sender",
        )
    } else {
        Check::ok(
            "json",
            format!("all {count} task, status and result files parse"),
        )
    }
}

fn check_locks(root: &Root) -> Check {
    let opts = inspect::lock_options(root);
    match inspect::list_locks(root, &opts) {
        Err(e) => Check::fail("locks", e.to_string(), "check the root's permissions"),
        Ok(locks) => {
            let stale: Vec<String> = locks
                .iter()
                .filter(|l| l.status == LockStatus::Stale)
                .map(|l| format!("{} {} ({})", l.kind, l.name, l.reason))
                .collect();
            if stale.is_empty() {
                Check::ok(
                    "locks",
                    format!("{} locks and gates, none stale", locks.len()),
                )
            } else {
                Check::warn(
                    "locks",
                    format!("{} stale: {}", stale.len(), stale.join("; ")),
                    "`conductor locks clean --apply` (workers also clear their own on start)",
                )
            }
        }
    }
}

fn check_slots(root: &Root) -> Check {
    match inspect::slot_reports(root, None) {
        Err(e) => Check::fail("slots", e.to_string(), "check the root's permissions"),
        Ok(reports) => {
            let mut trouble = Vec::new();
            let mut fixes = Vec::new();
            for r in &reports {
                let serious: Vec<String> = r
                    .flags
                    .iter()
                    .filter(|f| {
                        matches!(f, inspect::Flag::DeadWorker | inspect::Flag::OrphanedTask)
                    })
                    .map(|f| f.to_string())
                    .collect();
                if !serious.is_empty() {
                    trouble.push(format!("worker {}: {}", r.slot, serious.join(", ")));
                    fixes.push(format!("conductor recover {}", r.slot));
                }
            }
            let live = reports.iter().filter(|r| r.worker_live).count();
            if trouble.is_empty() {
                Check::ok(
                    "slots",
                    format!("{} slots, {live} served by a live worker", reports.len()),
                )
            } else {
                Check::warn(
                    "slots",
                    trouble.join("; "),
                    format!("restart their workers or run `{}`", fixes.join("`, `")),
                )
            }
        }
    }
}

fn check_watcher(root: &Root) -> Check {
    let (tx, _rx) = crossbeam_channel::bounded(1);
    let ignore: crate::watch::Interest = Arc::new(|_: &Path| false);
    match DirWatcher::new(&[root.path().to_path_buf()], WatchMode::Auto, ignore, tx) {
        Ok(w) => match w.kind() {
            WatcherKind::Native => Check::ok(
                "watcher",
                "native file events (inotify): pickup in about a millisecond",
            ),
            k @ WatcherKind::Poll { .. } => Check::warn(
                "watcher",
                format!("workers would fall back to {k}"),
                "on a local filesystem, raise the inotify limits (see the inotify check); \
                 on a network filesystem polling is expected (slower pickup)",
            ),
        },
        Err(e) => Check::fail(
            "watcher",
            e.to_string(),
            "check that the root is readable; workers cannot watch it",
        ),
    }
}

#[cfg(target_os = "linux")]
fn check_filesystem(path: &Path) -> Check {
    match nix::sys::statfs::statfs(path) {
        Err(e) => Check::warn(
            "filesystem",
            Error::io("statfs", path, e.into()).to_string(),
            "nothing to do unless workers misbehave",
        ),
        Ok(st) => {
            // f_type's width differs between platforms.
            #[allow(clippy::unnecessary_cast)]
            let magic = st.filesystem_type().0 as i64;
            let (name, eventless) = crate::watch::filesystem_name(magic);
            if eventless {
                Check::warn(
                    "filesystem",
                    format!("{} is on {name}: no change events reach local watchers, so workers poll; locks and flocks depend on the server", path.display()),
                    "keep the root on a local filesystem (e.g. under /tmp or $HOME on a local disk) when you can",
                )
            } else {
                Check::ok("filesystem", format!("{} is on {name}", path.display()))
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn check_filesystem(path: &Path) -> Check {
    Check::ok(
        "filesystem",
        format!("{}: not checked on this platform", path.display()),
    )
}

fn read_proc_number(path: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn check_inotify_limits() -> Check {
    let watches = read_proc_number("/proc/sys/fs/inotify/max_user_watches");
    let instances = read_proc_number("/proc/sys/fs/inotify/max_user_instances");
    let (Some(watches), Some(instances)) = (watches, instances) else {
        return Check::ok("inotify", "no inotify limits to check on this system");
    };
    let detail = format!("max_user_instances={instances}, max_user_watches={watches}");
    let mut low = Vec::new();
    if instances < LOW_INOTIFY_INSTANCES {
        low.push(format!(
            "max_user_instances={instances} is low: every worker and every waiting client uses one, \
             shared with editors and other tools (when it runs out workers fall back to polling)"
        ));
    }
    if watches < LOW_INOTIFY_WATCHES {
        low.push(format!("max_user_watches={watches} is low"));
    }
    if low.is_empty() {
        Check::ok("inotify", detail)
    } else {
        Check::warn(
            "inotify",
            low.join("; "),
            "sudo sysctl fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288 \
             (add them to /etc/sysctl.d/ to keep them)",
        )
    }
}

fn check_tmux() -> Check {
    match std::process::Command::new("tmux")
        .arg("-V")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Check::ok(
            "tmux",
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ),
        Ok(out) => Check::warn(
            "tmux",
            format!(
                "`tmux -V` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            "reinstall tmux; it is needed only to launch workers in tmux sessions",
        ),
        Err(e) => Check::warn(
            "tmux",
            format!("tmux not found ({e})"),
            "install tmux (e.g. `apt install tmux`); it is needed only to launch workers in tmux sessions",
        ),
    }
}

fn check_agent(line: &str) -> Check {
    let cmd = match AgentCommand::parse(line) {
        Ok(c) => c,
        Err(e) => return Check::fail("agent", e.to_string(), "pass a valid --agent command line"),
    };
    let found = cmd.resolve().filter(|p| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    match found {
        Some(p) => Check::ok(
            "agent",
            format!("`{cmd}`: {} found at {}", cmd.program, p.display()),
        ),
        None => Check::fail(
            "agent",
            format!("`{cmd}`: {} is not an executable on PATH", cmd.program),
            format!(
                "install {} or give workers another agent with --agent CMD",
                cmd.program
            ),
        ),
    }
}
