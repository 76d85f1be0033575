//! The shared queue (pull model): priorities, one running task per key, fair
//! scheduling across keys, and a global cap on running agents (DESIGN.md section 5).
//!
//! A pending task is a file in `queue/pending/` named so that it sorts by priority,
//! then submit order: `<9-priority>~<submit ns, 20 digits>~<key>~<id>.json` (`~` can
//! appear in neither a key nor an id). Idle workers claim the best eligible entry by
//! renaming it into their own `running.json`; whoever loses that race gets ENOENT and
//! moves on. No dispatcher runs anywhere.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::bounded;
use serde::Serialize;

use crate::config::Config;
use crate::dirlock::{self, Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{parse_result, Outcome, Task, TaskId, TaskResult, SCHEMA};
use crate::watch::{DirWatcher, Interest, WatchMode};

/// The `origin` of a task that came through the queue.
pub const ORIGIN_QUEUE: &str = "queue";

/// A waiting task's effective priority rises by one for every this much waiting, so
/// a low priority is never starved.
pub const AGING_STEP: Duration = Duration::from_secs(60);

const DEFAULT_PRIORITY: u8 = 5;
const SEP: char = '~';

/// A pending entry as its file name describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTask {
    pub id: Option<TaskId>,
    pub priority: u8,
    /// Raised by waiting ([`AGING_STEP`]), at most 9.
    pub effective_priority: u8,
    pub key: Option<String>,
    pub submitted_at: SystemTime,
    pub path: PathBuf,
    /// Why it is not running yet, when [`Queue::pending`] can tell.
    pub waiting: Option<String>,
}

/// Global running cap use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotUse {
    pub max: Option<u32>,
    pub used: u32,
    pub available: Option<u32>,
}

/// One key's load.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyUse {
    pub running: u32,
    pub pending: u32,
}

/// Pending tasks by priority.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCount {
    pub by_priority: BTreeMap<u8, u32>,
    pub total: u32,
}

/// A key or slot lock and its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockInfo {
    pub kind: String,
    pub name: String,
    pub holder_pid: Option<u32>,
    pub host: Option<String>,
    pub acquired_at: Option<String>,
    pub alive: bool,
}

/// The capacity view (`conductor status --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    pub slots: SlotUse,
    pub by_key: BTreeMap<String, KeyUse>,
    pub pending: PendingCount,
    pub locks: Vec<LockInfo>,
}

/// The shared queue of one root.
#[derive(Debug, Clone)]
pub struct Queue {
    root: Root,
}

fn since_epoch_ns(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Parse `<9-p>~<ns>~<key>~<id>.json`; `None` for names not written by `submit`.
fn parse_name(name: &str) -> Option<(u8, SystemTime, Option<String>, TaskId)> {
    let stem = name.strip_suffix(".json")?;
    let mut parts = stem.splitn(4, SEP);
    let inv: u8 = parts.next()?.parse().ok()?;
    let ns: u64 = parts.next()?.parse().ok()?;
    let key = parts.next()?;
    let id = TaskId::parse(parts.next()?).ok()?;
    let priority = 9u8.checked_sub(inv)?;
    let key = (!key.is_empty()).then(|| key.to_string());
    Some((priority, UNIX_EPOCH + Duration::from_nanos(ns), key, id))
}

fn effective(priority: u8, submitted: SystemTime, now: SystemTime) -> u8 {
    let waited = now.duration_since(submitted).unwrap_or_default();
    let raise = (waited.as_secs() / AGING_STEP.as_secs()).min(9) as u8;
    priority.saturating_add(raise).min(9)
}

impl Queue {
    pub fn new(root: Root) -> Queue {
        Queue { root }
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    fn config(&self) -> Result<Config> {
        Config::load(&self.root.config_file())
    }

    /// Accept a task: staged in `queue/tmp/`, linked into `queue/pending/`, durable on
    /// return. Assigns an id if absent; refuses an id that is pending or has a result.
    pub fn submit(&self, task: &Task) -> Result<TaskId> {
        crate::trust::verify_root(&self.root)?;
        let mut task = task.clone();
        task.schema = SCHEMA;
        task.origin = Some(ORIGIN_QUEUE.to_string());
        let id = task.id.get_or_insert_with(TaskId::generate).clone();
        task.validate()
            .map_err(|reason| Error::InvalidTask { reason })?;
        let bytes = fsio::to_json_bytes(&task);
        let limit = self.config()?.max_task_bytes();
        if bytes.len() as u64 > limit {
            return Err(Error::InvalidTask {
                reason: format!(
                    "task {id} is {} bytes, over the {limit}-byte task limit",
                    bytes.len()
                ),
            });
        }
        let priority = task.priority.unwrap_or(DEFAULT_PRIORITY);
        let name = format!(
            "{}{SEP}{:020}{SEP}{}{SEP}{id}.json",
            9 - priority,
            since_epoch_ns(SystemTime::now()),
            task.key.as_deref().unwrap_or("")
        );
        for dir in [self.root.queue_tmp(), self.root.queue_pending()] {
            fsio::ensure_dir(&dir)?;
        }
        self.reserve_id(&id)?;
        let reservation = self.root.queue_ids().join(id.to_string());
        if let Err(e) = fsio::write_new_via(
            &self.root.queue_tmp(),
            &self.root.queue_pending().join(name),
            &bytes,
        ) {
            // Not accepted: the id stays free for a retry of this submit.
            let _ = fs::remove_file(&reservation);
            return Err(e);
        }
        Ok(id)
    }

    /// Claim `id` for good (`queue/ids/<id>`, created exclusively): an id is used once,
    /// so its result can never be confused with another task's.
    fn reserve_id(&self, id: &TaskId) -> Result<()> {
        let dir = self.root.queue_ids();
        fsio::ensure_dir(&dir)?;
        let path = dir.join(id.to_string());
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => fsio::fsync_dir(&dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(Error::InvalidTask {
                reason: format!(
                    "task id {id} was already submitted to this queue; submit it with a new id"
                ),
            }),
            Err(e) => Err(Error::io("reserve task id", path, e)),
        }
    }

    /// Every pending entry, unordered. Names not written by `submit` (a file dropped in
    /// by hand) count as priority 5, submitted at their mtime, key unknown.
    fn scan(&self) -> Result<Vec<PendingTask>> {
        let dir = self.root.queue_pending();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", &dir, e)),
        };
        let now = SystemTime::now();
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let (priority, submitted_at, key, id) = match parse_name(&name) {
                Some((p, t, k, id)) => (p, t, k, Some(id)),
                None => {
                    let mtime = fs::symlink_metadata(entry.path())
                        .and_then(|m| m.modified())
                        .unwrap_or(now);
                    (DEFAULT_PRIORITY, mtime, None, None)
                }
            };
            out.push(PendingTask {
                id,
                priority,
                effective_priority: effective(priority, submitted_at, now),
                key,
                submitted_at,
                path: entry.path(),
                waiting: None,
            });
        }
        Ok(out)
    }

    /// Pending entries in the order workers would take them: highest effective
    /// priority; among equals the key served least recently; then oldest.
    fn ordered(&self) -> Result<Vec<PendingTask>> {
        let mut all = self.scan()?;
        let served = self.served_times(&all);
        all.sort_by(|a, b| {
            b.effective_priority
                .cmp(&a.effective_priority)
                .then_with(|| served_of(&served, a).cmp(&served_of(&served, b)))
                .then_with(|| a.submitted_at.cmp(&b.submitted_at))
                .then_with(|| a.path.cmp(&b.path))
        });
        Ok(all)
    }

    fn served_times(&self, tasks: &[PendingTask]) -> HashMap<String, SystemTime> {
        let mut map = HashMap::new();
        for key in tasks.iter().filter_map(|t| t.key.as_deref()) {
            if map.contains_key(key) {
                continue;
            }
            let t = fs::metadata(self.root.queue_served().join(key))
                .and_then(|m| m.modified())
                .unwrap_or(UNIX_EPOCH);
            map.insert(key.to_string(), t);
        }
        map
    }

    /// Pending tasks in run order, each with why it waits (if it can be told).
    pub fn pending(&self) -> Result<Vec<PendingTask>> {
        let config = self.config()?;
        let opts = config.lock_options();
        let mut tasks = self.ordered()?;
        let mut free_slots = match config.max_running {
            Some(max) => {
                let used = (0..max)
                    .filter(|i| is_held(&self.root.slot_lock(*i), &opts))
                    .count() as u32;
                Some(max.saturating_sub(used))
            }
            None => None,
        };
        let mut idle = idle_workers(&self.root)?;
        let mut taken_keys: Vec<String> = Vec::new();
        for t in &mut tasks {
            let key_busy = config.per_key_serialization()
                && t.key.as_ref().is_some_and(|k| {
                    taken_keys.contains(k) || is_held(&self.root.key_lock(k), &opts)
                });
            t.waiting = if key_busy {
                Some(format!("key {} busy", t.key.as_deref().unwrap_or("")))
            } else if free_slots == Some(0) {
                Some(format!(
                    "no free slot (maxRunning {})",
                    config.max_running.unwrap_or(0)
                ))
            } else if idle == 0 {
                Some("no idle worker".to_string())
            } else {
                idle -= 1;
                if let Some(f) = free_slots.as_mut() {
                    *f -= 1;
                }
                if let Some(k) = &t.key {
                    taken_keys.push(k.clone());
                }
                None
            };
        }
        Ok(tasks)
    }

    fn result_path(&self, id: &TaskId) -> PathBuf {
        self.root.queue_results().join(format!("{id}.json"))
    }

    /// The result of a submitted task, whichever worker ran it.
    pub fn read_result(&self, id: &TaskId) -> Result<Option<TaskResult>> {
        let path = self.result_path(id);
        match fsio::read_bounded(&path, fsio::RESULT_SIZE_LIMIT)? {
            None => Ok(None),
            Some(b) => parse_result(&path, &b).map(Some),
        }
    }

    /// Wait for a submitted task's result (woken by file events, not a sleep loop).
    pub fn wait_for_result(&self, id: &TaskId, timeout: Duration) -> Result<TaskResult> {
        let dir = self.root.queue_results();
        fsio::ensure_dir(&dir)?;
        let (tx, rx) = bounded(1);
        let want = format!("{id}.json");
        let interest: Interest =
            Arc::new(move |p: &Path| p.file_name().and_then(|n| n.to_str()) == Some(want.as_str()));
        let _watcher = DirWatcher::new(std::slice::from_ref(&dir), WatchMode::Auto, interest, tx)?;
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(r) = self.read_result(id)? {
                return Ok(r);
            }
            let left = deadline.map_or(Duration::from_secs(1), |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return Err(Error::Timeout {
                    what: format!("the result of queued task {id}"),
                    after: timeout,
                });
            }
            let _ = rx.recv_timeout(left.min(Duration::from_secs(1)));
        }
    }

    /// Cancel a task: a pending one is removed and answered `cancelled`; a running one
    /// gets its worker's `cancel` file. `Ok(false)` if the id is unknown.
    pub fn cancel(&self, id: &TaskId) -> Result<bool> {
        crate::trust::verify_root(&self.root)?;
        if let Some(p) = self.scan()?.into_iter().find(|p| p.id.as_ref() == Some(id)) {
            // Move it aside first (this wins or loses the race with a claim in one
            // step), then answer it: the task is never gone without its result.
            fsio::ensure_dir(&self.root.queue_rejected())?;
            let name = p
                .path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            let aside = self.root.queue_rejected().join(name);
            match fs::rename(&p.path, &aside) {
                Ok(()) => {
                    fsio::fsync_dir(&self.root.queue_pending())?;
                    let r = TaskResult::failed(
                        id.clone(),
                        Outcome::Cancelled,
                        "cancelled before it started",
                    );
                    fsio::ensure_dir(&self.root.queue_results())?;
                    fsio::write_new(
                        &self.result_path(id),
                        &fsio::to_json_bytes(&r),
                        Durability::Durable,
                    )?;
                    let mut reason = aside.into_os_string();
                    reason.push(".reason");
                    fsio::write_replace(
                        Path::new(&reason),
                        b"cancelled before it started (conductor queue cancel)\n",
                        Durability::Atomic,
                    )?;
                    return Ok(true);
                }
                // A worker claimed it just now: cancel it where it runs.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", &p.path, e)),
            }
        }
        for slot in crate::client::Client::new(self.root.clone()).list_workers()? {
            let w = self.root.worker(slot);
            let running = fsio::read_bounded(&w.running(), fsio::TASK_SIZE_LIMIT)
                .ok()
                .flatten()
                .and_then(|b| Task::salvage_id(&b));
            if running.is_some_and(|r| r.to_string() == id.to_string()) {
                fsio::write_replace(
                    &w.cancel(),
                    format!("{id}\n").as_bytes(),
                    Durability::Atomic,
                )?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Submit a finished task again under a new id (`<id>-r1`, `-r2` …).
    pub fn retry(&self, id: &TaskId) -> Result<TaskId> {
        let client = crate::client::Client::new(self.root.clone());
        let record = client
            .list_workers()?
            .into_iter()
            .map(|s| self.root.worker(s).task_record(id))
            .find(|p| p.exists())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "no worker has a record of task {id}; only tasks that ran can be retried"
                ))
            })?;
        let bytes = fsio::read_bounded(&record, fsio::TASK_SIZE_LIMIT)?
            .ok_or_else(|| Error::Usage(format!("{} vanished", record.display())))?;
        let mut task = Task::from_bytes(&record, &bytes)?;
        let new_id = id
            .retries()
            .find(|c| !self.root.queue_ids().join(c.to_string()).exists())
            .expect("a free retry id");
        task.id = Some(new_id);
        task.attempt = None;
        self.submit(&task)
    }

    /// Running cap, per-key load, pending counts and the key/slot locks.
    pub fn capacity(&self) -> Result<Capacity> {
        let config = self.config()?;
        let opts = config.lock_options();
        let mut locks = Vec::new();
        let mut by_key: BTreeMap<String, KeyUse> = BTreeMap::new();
        let mut used = 0;
        for (kind, dir) in [
            ("slot", self.root.slots_dir()),
            ("key", self.root.keys_dir()),
        ] {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(base) = name.strip_suffix(".lock") else {
                    continue;
                };
                let Some(h) = dirlock::inspect(&entry.path(), &opts)? else {
                    continue;
                };
                let alive = !h.liveness.is_stale();
                if alive && kind == "slot" {
                    used += 1;
                }
                if alive && kind == "key" {
                    by_key.entry(base.to_string()).or_default().running += 1;
                }
                locks.push(LockInfo {
                    kind: kind.to_string(),
                    name: base.to_string(),
                    holder_pid: h.pid,
                    host: h.owner.as_ref().map(|o| o.host.clone()),
                    acquired_at: h.owner.as_ref().map(|o| o.acquired_at.clone()),
                    alive,
                });
            }
        }
        let mut pending = PendingCount::default();
        for p in self.scan()? {
            pending.total += 1;
            *pending.by_priority.entry(p.priority).or_default() += 1;
            if let Some(k) = p.key {
                by_key.entry(k).or_default().pending += 1;
            }
        }
        if config.max_running.is_none() {
            // No run slots are taken without a cap: count the tasks in hand instead.
            let client = crate::client::Client::new(self.root.clone());
            used = client
                .list_workers()?
                .into_iter()
                .filter(|s| self.root.worker(*s).running().exists())
                .count() as u32;
        }
        Ok(Capacity {
            slots: SlotUse {
                max: config.max_running,
                used,
                available: config.max_running.map(|m| m.saturating_sub(used)),
            },
            by_key,
            pending,
            locks,
        })
    }
}

fn served_of(served: &HashMap<String, SystemTime>, t: &PendingTask) -> SystemTime {
    t.key
        .as_ref()
        .and_then(|k| served.get(k).copied())
        .unwrap_or(UNIX_EPOCH)
}

fn is_held(lock: &Path, opts: &LockOptions) -> bool {
    matches!(dirlock::inspect(lock, opts), Ok(Some(h)) if !h.liveness.is_stale())
}

/// Workers with a live gate and nothing in hand.
fn idle_workers(root: &Root) -> Result<u32> {
    let client = crate::client::Client::new(root.clone());
    let mut n = 0;
    for slot in client.list_workers()? {
        let w = root.worker(slot);
        if crate::gate::probe(&w.worker_gate())?.is_some() && !w.running().exists() {
            n += 1;
        }
    }
    Ok(n)
}

/// What a worker holds while it runs a queued task.
#[derive(Debug)]
pub struct QueueClaim {
    pub task_bytes: Vec<u8>,
    /// The worker's own `.lock` (from the `take_slot_lock` callback).
    pub slot_lock: DirLock,
    pub key_lock: Option<DirLock>,
    pub run_slot: Option<DirLock>,
}

/// Take a run slot when the root caps running agents: `Ok(None)` = no cap,
/// `Err(Refused)` = all slots busy.
pub fn take_run_slot(root: &Root, config: &Config) -> Result<Option<DirLock>> {
    let Some(max) = config.max_running else {
        return Ok(None);
    };
    let opts = config.lock_options();
    for i in 0..max {
        if let Acquire::Acquired(l) = DirLock::try_acquire(&root.slot_lock(i), &opts)? {
            return Ok(Some(l));
        }
    }
    Err(Error::Refused(format!(
        "all {max} run slots are busy (maxRunning {max})"
    )))
}

/// The worker's side: claim the best eligible pending task into `worker`'s
/// `running.json`. `take_slot_lock` takes the worker's own `.lock`; it is called only
/// once an eligible task is found (most wake-ups find none: every lock change on the
/// root wakes every idle worker). `Ok(None)` when nothing is eligible now.
pub fn claim_next(
    root: &Root,
    worker: &WorkerPaths,
    config: &Config,
    take_slot_lock: impl FnOnce() -> Result<Option<DirLock>>,
) -> Result<Option<QueueClaim>> {
    let queue = Queue::new(root.clone());
    let candidates = queue.ordered()?;
    let opts = config.lock_options();
    // Look before taking anything: taking (and dropping) a run slot or a lock is an
    // event that wakes every idle worker, and a scan that finds every key busy must
    // not set off another.
    let per_key = config.per_key_serialization();
    let mut key_free: HashMap<&str, bool> = HashMap::new();
    let any_eligible = candidates.iter().any(|c| match (&c.key, per_key) {
        (Some(k), true) => *key_free
            .entry(k.as_str())
            .or_insert_with(|| !is_held(&root.key_lock(k), &opts)),
        _ => true,
    });
    if !any_eligible {
        return Ok(None);
    }
    let run_slot = match take_run_slot(root, config) {
        Ok(s) => s,
        Err(Error::Refused(why)) => {
            tracing::debug!("not pulling from the queue: {why}");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // One lock attempt per key per scan, however many of its tasks wait.
    let mut busy: Vec<String> = Vec::new();
    let mut take_slot_lock = Some(take_slot_lock);
    let mut slot_lock: Option<DirLock> = None;
    for c in candidates {
        let key_lock = match (&c.key, config.per_key_serialization()) {
            (Some(k), true) if busy.contains(k) => continue,
            (Some(k), true) => match DirLock::try_acquire(&root.key_lock(k), &opts)? {
                Acquire::Acquired(l) => Some(l),
                // Busy key: skip to another key's task, never wait on it.
                Acquire::Held(_) => {
                    busy.push(k.clone());
                    continue;
                }
            },
            _ => None,
        };
        if slot_lock.is_none() {
            let take = take_slot_lock.take().expect("taken once");
            match take()? {
                Some(l) => slot_lock = Some(l),
                // Our slot is busy (a recovery is at it): try again later.
                None => return Ok(None),
            }
        }
        match fs::rename(&c.path, worker.running()) {
            Ok(()) => {}
            // Another worker won the race for it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("claim (rename to running.json)", &c.path, e)),
        }
        if let Some(k) = &c.key {
            mark_served(root, k);
        }
        let task_bytes = match fsio::read_bounded(&worker.running(), config.max_task_bytes()) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                reject_claimed(root, worker, &c, &e.to_string(), c.id.clone())?;
                continue;
            }
        };
        if let Err(e) = Task::from_bytes(&worker.running(), &task_bytes) {
            let id = Task::salvage_id(&task_bytes).or(c.id.clone());
            reject_claimed(root, worker, &c, &e.to_string(), id)?;
            continue;
        }
        return Ok(Some(QueueClaim {
            task_bytes,
            slot_lock: slot_lock.expect("taken before the rename"),
            key_lock,
            run_slot,
        }));
    }
    Ok(None)
}

fn mark_served(root: &Root, key: &str) {
    let path = root.queue_served().join(key);
    let stamp = crate::protocol::now_rfc3339();
    if let Err(e) = fsio::overwrite_padded(&path, stamp.as_bytes()).and_then(|()| {
        let f = fs::File::options()
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        f.set_modified(SystemTime::now())
            .map_err(|e| Error::io("touch", &path, e))
    }) {
        tracing::debug!("recording that key {key} was served: {e}");
    }
}

/// A claimed queue entry that is no task: keep it in `queue/rejected/` with a reason,
/// and answer it when its id can be read.
fn reject_claimed(
    root: &Root,
    worker: &WorkerPaths,
    c: &PendingTask,
    reason: &str,
    id: Option<TaskId>,
) -> Result<()> {
    let name = c
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(fsio::nonce);
    let reason = format!(
        "{} (claimed as {}): {reason}",
        c.path.display(),
        worker.running().display()
    );
    reject_in_hand(root, worker, &name, &reason, id)
}

/// Refuse the queued task now in `worker`'s `running.json`: answered in
/// `queue/results/` (when its id is known), kept in `queue/rejected/NAME` with a reason.
pub fn reject_in_hand(
    root: &Root,
    worker: &WorkerPaths,
    name: &str,
    reason: &str,
    id: Option<TaskId>,
) -> Result<()> {
    let dir = root.queue_rejected();
    fsio::ensure_dir(&dir)?;
    if let Some(id) = id {
        let r = TaskResult::failed(id.clone(), Outcome::Rejected, format!("rejected: {reason}"));
        fsio::ensure_dir(&root.queue_results())?;
        let path = root.queue_results().join(format!("{id}.json"));
        if let Err(e) = fsio::write_new(&path, &fsio::to_json_bytes(&r), Durability::Durable) {
            tracing::warn!("answering rejected queue entry {id}: {e}");
        }
    }
    fsio::write_replace(
        &dir.join(format!("{name}.reason")),
        format!("{reason}\n").as_bytes(),
        Durability::Durable,
    )?;
    fs::rename(worker.running(), dir.join(name))
        .map_err(|e| Error::io("move to queue/rejected/", worker.running(), e))?;
    tracing::warn!("rejected queue entry {name}: {reason}");
    Ok(())
}

/// Link a queued task's result into `queue/results/<id>.json` (never replacing one).
pub fn publish_queue_result(root: &Root, kept: &Path, id: &TaskId) -> Result<()> {
    let dir = root.queue_results();
    fsio::ensure_dir(&dir)?;
    let dest = dir.join(format!("{id}.json"));
    match fs::hard_link(kept, &dest) {
        Ok(()) => fsio::fsync_dir(&dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("link queue result", dest, e)),
    }
}

/// Put a dead worker's task back in the queue for another attempt, in one rename so
/// a crash part-way can never leave two copies: `running` is first rewritten with the
/// next attempt number, then moved into `queue/pending/`.
pub fn requeue(root: &Root, running: &Path, task: &Task) -> Result<()> {
    let mut t = task.clone();
    t.origin = Some(ORIGIN_QUEUE.into());
    let id = t.id.clone().unwrap_or_else(TaskId::generate);
    let priority = t.priority.unwrap_or(DEFAULT_PRIORITY);
    let name = format!(
        "{}{SEP}{:020}{SEP}{}{SEP}{id}.json",
        9 - priority,
        since_epoch_ns(SystemTime::now()),
        t.key.as_deref().unwrap_or("")
    );
    fsio::write_json(running, &t, Durability::Durable)?;
    fsio::ensure_dir(&root.queue_pending())?;
    let dest = root.queue_pending().join(name);
    fs::rename(running, &dest).map_err(|e| Error::io("requeue", running, e))?;
    fsio::fsync_dir(&root.queue_pending())?;
    if let Some(dir) = running.parent() {
        fsio::fsync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_priority_then_submit_order_and_parse_back() {
        let a = format!("{}~{:020}~alice~t-1.json", 9 - 9, 5u64);
        let b = format!("{}~{:020}~~t-2.json", 9 - 5, 1u64);
        let c = format!("{}~{:020}~bob~t-3.json", 9 - 5, 2u64);
        let mut names = vec![c.clone(), b.clone(), a.clone()];
        names.sort();
        assert_eq!(names, vec![a.clone(), b.clone(), c]);
        let (p, _, key, id) = parse_name(&a).unwrap();
        assert_eq!(
            (p, key.as_deref(), id),
            (9, Some("alice"), TaskId::from("t-1"))
        );
        assert_eq!(parse_name(&b).unwrap().2, None);
        assert_eq!(parse_name("random.json"), None);
    }

    #[test]
    fn waiting_raises_priority_up_to_nine() {
        let now = SystemTime::now();
        assert_eq!(effective(5, now, now), 5);
        assert_eq!(effective(5, now - AGING_STEP * 2, now), 7);
        assert_eq!(effective(5, now - AGING_STEP * 100, now), 9);
    }
}
