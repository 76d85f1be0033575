//! The shared queue (pull model): priorities, one running task per key, fair
//! scheduling across keys, and a global cap on running agents (docs/ARCHITECTURE.md, "Claim from the queue").
//!
//! A pending task is a file in `queue/pending/` named so that it sorts by priority,
//! then submit order: `<9-priority>~<submit ns, 20 digits>~<key>~<id>.json` (`~` can
//! appear in neither a key nor an id). Idle workers claim the best eligible entry by
//! renaming it into their own `running.json`; whoever loses that race gets ENOENT and
//! moves on. No dispatcher runs anywhere.

pub mod budgets;
mod claim;
mod deps;
pub mod groups;
mod held;
pub mod limits;
mod order;
pub mod pause;
mod retry_ids;
mod waits;

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Config;
use crate::dirlock;
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::ids::{self, Place};
use crate::layout::Root;
use crate::protocol::{id_list, Outcome, Task, TaskId, TaskResult, SCHEMA};
use crate::wait::{Awaited, OnDeath, Vigil, Wait};
use crate::watch::{Interest, WatchMode};

pub(crate) use claim::claim_next_seeing;
pub use claim::{
    claim_next, publish_queue_result, reject_in_hand, requeue, take_run_slot, Claim, QueueClaim,
    RunSlot, Serve,
};
pub use deps::{check_known, dep_state, dependency_state, readiness, DepState, Readiness};
use held::is_held;
use order::DEFAULT_PRIORITY;
pub use order::{effective, next_to_run, order, PendingName, PendingTask, AGING_STEP};
use retry_ids::{retry_base, retry_number};
pub(crate) use waits::root_wide_wait;

/// The `origin` of a task that came through the queue.
pub const ORIGIN_QUEUE: &str = "queue";

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
    /// The pauses in force ("slot 2", "key alice", "group batch", "everything").
    pub paused: Vec<String>,
    /// Each group's cap and load.
    pub groups: Vec<groups::GroupUse>,
}

/// The shared queue of one root.
#[derive(Debug, Clone)]
pub struct Queue {
    root: Root,
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
    /// return. Assigns an id if absent; an id already used anywhere on the root is
    /// refused ([`Error::IdTaken`], naming where it went), so is a dependency (`after`)
    /// the root has no record of ([`Error::UnknownDependency`]) and a `dir` that is no
    /// directory of ours ([`Error::BadTaskDir`]), and a group the root does not have
    /// ([`Error::UnknownGroup`], naming the ones it has).
    /// The root must exist ([`Error::NoRoot`] otherwise): submitting never makes one.
    pub fn submit(&self, task: &Task) -> Result<TaskId> {
        self.root.require_existing()?;
        crate::trust::verify_shared(&self.root)?;
        let mut task = task.clone();
        task.schema = SCHEMA;
        task.origin = Some(ORIGIN_QUEUE.to_string());
        if task.id.is_none() {
            task.id = Some(ids::fresh(&self.root)?);
        }
        let id = task.id.clone().expect("given or made above");
        let bytes = task.to_bytes_checked(self.config()?.max_task_bytes())?;
        if let Some(dir) = &task.dir {
            crate::workdir::check(dir)?;
        }
        if let Some(g) = &task.group {
            groups::require(&self.root, g)?;
        }
        // Before our own id is reserved: that order is what rules out cycles.
        deps::check_known(&self.root, &task, &id)?;
        let name = PendingName::for_task(&task, &id, SystemTime::now()).file_name();
        for dir in [self.root.queue_tmp(), self.root.queue_pending()] {
            fsio::ensure_dir(&dir)?;
        }
        ids::reserve(&self.root, &id, Place::Queue)?;
        if let Err(e) = fsio::write_new_via_grouped(
            &self.root.queue_tmp(),
            &self.root.queue_pending().join(name),
            &bytes,
        ) {
            // Not accepted: the id stays free for a retry of this submit.
            if let Err(undo) = ids::release(&self.root, &id, Place::Queue) {
                tracing::warn!("giving back task id {id}: {undo}");
            }
            return Err(e);
        }
        Ok(id)
    }

    /// Every pending entry, unordered. Names not written by `submit` (a file dropped in
    /// by hand) count as priority 5, submitted at their mtime, key unknown.
    pub(crate) fn scan(&self) -> Result<Vec<PendingTask>> {
        let dir = self.root.queue_pending();
        let Some(entries) = fsio::read_dir_if_exists(&dir)? else {
            return Ok(Vec::new());
        };
        let now = SystemTime::now();
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let (priority, submitted_at, key, id) = match PendingName::parse(&name) {
                Some(n) => (n.priority, n.submitted_at(), n.key, Some(n.id)),
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
                after: Vec::new(),
            });
        }
        Ok(out)
    }

    /// Pending entries in the order workers would take them (see [`order`]).
    fn ordered(&self) -> Result<Vec<PendingTask>> {
        let mut all = self.scan()?;
        let served = self.served_times(&all);
        order(&mut all, &served, SystemTime::now());
        Ok(all)
    }

    pub(crate) fn served_times(&self, tasks: &[PendingTask]) -> HashMap<String, SystemTime> {
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
        let mut free_slots = self.free_run_slots(&config, &opts);
        let paused = pause::Paused::load(&self.root);
        let (mut idle, paused_idle) = idle_workers(&self.root, &paused)?;
        let mut taken_keys: Vec<String> = Vec::new();
        // Per group: its cap, and how many of it run or would be taken by this pass.
        let mut group_load: HashMap<String, (u32, u32)> = HashMap::new();
        for t in &mut tasks {
            // A file that is no task (yet) is claimed, and rejected, as it comes.
            let task = Task::read(&t.path, config.max_task_bytes()).ok().flatten();
            let task_group = task.as_ref().and_then(|t| t.group.clone());
            if let Some(task) = &task {
                let why = paused
                    .task_reason(task.key.as_deref(), task.group.as_deref())
                    .or_else(|| budgets::hold_reason(&self.root, &config, task.group.as_deref()))
                    .or_else(|| self.dependency_wait(t, task));
                if why.is_some() {
                    t.waiting = why;
                    continue;
                }
            }
            let group = task_group.as_deref().map(|g| {
                let load = group_load.entry(g.to_string()).or_insert_with(|| {
                    let cap = groups::read(&self.root, g)
                        .ok()
                        .flatten()
                        .map(|x| x.parallel);
                    (cap.unwrap_or(0), groups::running(&self.root, g, &opts))
                });
                (g, load)
            });
            if let Some((g, (cap, load))) = &group {
                if load >= cap {
                    t.waiting = Some(match cap {
                        0 => groups::unknown(g),
                        _ => groups::at_limit(g, *cap),
                    });
                    continue;
                }
            }
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
            } else if idle == 0 && !paused_idle.is_empty() {
                Some(format!(
                    "paused (slot {}; no other idle worker)",
                    paused_idle.join(", ")
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
                if let Some(g) = &task_group {
                    if let Some((_, load)) = group_load.get_mut(g) {
                        *load += 1;
                    }
                }
                None
            };
        }
        Ok(tasks)
    }

    /// How many of the root's run slots are free (`None`: no `maxRunning`).
    fn free_run_slots(&self, config: &Config, opts: &crate::dirlock::LockOptions) -> Option<u32> {
        let max = config.max_running?;
        let used = (0..max)
            .filter(|i| is_held(&self.root.slot_lock(*i), opts))
            .count() as u32;
        Some(max.saturating_sub(used))
    }

    /// Why pending task `id` is held back root-wide, if it is ([`root_wide_wait`]): a pause, its agent's
    /// usage limit, or its group's cap ("group batch at its limit (parallel 1)").
    /// `None` when it is not pending or nothing holds it.
    pub fn held_reason(&self, id: &TaskId) -> Result<Option<String>> {
        let Some(path) = self.root.pending_entry(id)? else {
            return Ok(None);
        };
        let config = self.config()?;
        let Some(task) = Task::read(&path, config.max_task_bytes()).ok().flatten() else {
            return Ok(None);
        };
        let paused = pause::Paused::load(&self.root);
        Ok(root_wide_wait(&self.root, &task, None, &paused, &config))
    }

    /// Fill in `t.after` from its file; why it waits for its dependencies, if it does.
    fn dependency_wait(&self, t: &mut PendingTask, task: &Task) -> Option<String> {
        t.after = task.after.clone();
        let limited = limits::waiting_reason(&self.root, task.not_before(), task.agent.as_deref());
        if limited.is_some() {
            return limited;
        }
        match readiness(&self.root, task) {
            Readiness::Ready => None,
            Readiness::Wait(ids) => Some(format!("waiting for {}", id_list(&ids))),
            Readiness::Failed { reason, .. } => {
                Some(format!("{reason}: cancelled at the next queue scan"))
            }
        }
    }

    fn result_path(&self, id: &TaskId) -> PathBuf {
        self.root.queue_results().join(format!("{id}.json"))
    }

    /// The result of a submitted task, whichever worker ran it.
    pub fn read_result(&self, id: &TaskId) -> Result<Option<TaskResult>> {
        TaskResult::read(&self.result_path(id))
    }

    /// Wait for a submitted task's result (woken by file events, not a sleep loop).
    /// Never blocks for nothing: ends with [`Error::NobodyServes`] when no live worker
    /// serves the root. If the worker that took the task dies with it, waits on for
    /// recovery's result while someone can recover it, else ends with
    /// [`Error::WorkerDied`] (see [`Queue::wait_for_result_with`] to hear of it at once).
    pub fn wait_for_result(&self, id: &TaskId, timeout: Duration) -> Result<TaskResult> {
        self.wait_for_result_with(id, timeout, OnDeath::AwaitRecovery)
    }

    /// [`Queue::wait_for_result`], doing `on_death` if the worker dies with the task.
    pub fn wait_for_result_with(
        &self,
        id: &TaskId,
        timeout: Duration,
        on_death: OnDeath,
    ) -> Result<TaskResult> {
        self.result_wait(id, timeout, on_death)?.run()
    }

    /// [`Queue::wait_for_result_with`] as a [`Wait`] not yet driven.
    pub fn result_wait(
        &self,
        id: &TaskId,
        timeout: Duration,
        on_death: OnDeath,
    ) -> Result<Wait<'static, TaskResult>> {
        self.root.require_existing()?;
        let dir = self.root.queue_results();
        fsio::ensure_dir(&dir)?;
        let want = format!("{id}.json");
        let interest: Interest =
            Arc::new(move |p: &Path| p.file_name().and_then(|n| n.to_str()) == Some(want.as_str()));
        let vigil = Vigil::new(
            self.root.clone(),
            Awaited::Queue,
            Some(id.clone()),
            on_death,
        );
        let queue = self.clone();
        let id = id.clone();
        Ok(Wait::new(
            vec![dir],
            WatchMode::Auto,
            interest,
            timeout,
            format!("the result of task {id}"),
            vigil,
            move || queue.read_result(&id),
        ))
    }

    /// Cancel a task: a pending one is removed and answered `cancelled`; a running one
    /// gets its worker's `cancel` file. `Ok(false)` if the id is unknown.
    pub fn cancel(&self, id: &TaskId) -> Result<bool> {
        crate::trust::verify_root(&self.root)?;
        if self.withdraw_pending(id)? {
            return Ok(true);
        }
        for slot in self.root.slots()? {
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

    /// Withdraw task `id` if it is pending: moved aside into `queue/rejected/` first (the
    /// rename wins or loses the race with a worker's claim in one step), then answered
    /// `cancelled` in `queue/results/`, so the task is never gone without its result.
    /// `Ok(false)` when it is not pending (never was, or a worker claimed it just now).
    pub(crate) fn withdraw_pending(&self, id: &TaskId) -> Result<bool> {
        // By text: a pending name gives digits back as a number.
        let wanted = Some(id.to_string());
        let Some(p) = self
            .scan()?
            .into_iter()
            .find(|p| p.id.as_ref().map(TaskId::to_string) == wanted)
        else {
            return Ok(false);
        };
        self.withdraw(
            &p,
            Some(id),
            "cancelled before it started",
            "(conductor cancel)",
        )
    }

    /// Take a pending entry out of `pending/` and answer it `cancelled` with `why` (when
    /// its id is known). Moved aside first — one rename that wins or loses the race with
    /// a claim — then answered, so the task is never gone without its result. `false`:
    /// a worker claimed it first.
    pub(crate) fn withdraw(
        &self,
        p: &PendingTask,
        id: Option<&TaskId>,
        why: &str,
        note: &str,
    ) -> Result<bool> {
        fsio::ensure_dir(&self.root.queue_rejected())?;
        let name = p
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let aside = self.root.queue_rejected().join(name);
        match fs::rename(&p.path, &aside) {
            Ok(()) => {}
            // A worker claimed it just now.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("remove", &p.path, e)),
        }
        fsio::fsync_dir(&self.root.queue_pending())?;
        if let Some(id) = id {
            let r = TaskResult::failed(id.clone(), Outcome::Cancelled, why);
            fsio::ensure_dir(&self.root.queue_results())?;
            // Never replacing: an existing answer belongs to the task that holds the id.
            match fsio::write_new(
                &self.result_path(id),
                &fsio::to_json_bytes(&r),
                Durability::Durable,
            ) {
                Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                    tracing::warn!("not answering withdrawn queue task {id}: {e}");
                }
                other => other?,
            }
        }
        let mut reason = aside.into_os_string();
        reason.push(".reason");
        fsio::write_replace(
            Path::new(&reason),
            format!("{why} {note}\n").as_bytes(),
            Durability::Atomic,
        )?;
        Ok(true)
    }

    /// Submit a finished task again under a new id (`<id>-r1`, `-r2` …).
    pub fn retry(&self, id: &TaskId) -> Result<TaskId> {
        self.retry_as(id, None, |_| {})
    }

    /// Where finished task `id` is recorded: the record of the worker that ran it, else,
    /// for a queued task that never ran (cancelled, or its dependency failed), the file
    /// it was put aside as (`queue/rejected/…~<id>.json`).
    pub fn task_record(&self, id: &TaskId) -> Result<Option<PathBuf>> {
        if let Some(p) = self
            .root
            .slots()?
            .into_iter()
            .map(|s| self.root.worker(s).task_record(id))
            .find(|p| p.exists())
        {
            return Ok(Some(p));
        }
        let want = format!("{id}.json");
        let found = fs::read_dir(self.root.queue_rejected())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains('~') && n.rsplit('~').next() == Some(&want))
            });
        Ok(found)
    }

    /// Submit finished task `id` again, as `new_id` (default: the first free `<id>-rN`),
    /// changed by `edit` (a new prompt, rewired dependencies).
    pub fn retry_as(
        &self,
        id: &TaskId,
        new_id: Option<TaskId>,
        edit: impl FnOnce(&mut Task),
    ) -> Result<TaskId> {
        // A record that vanishes between the two looks is no record either.
        let no_record = || Error::NoTaskRecord { id: id.to_string() };
        let record = self.task_record(id)?.ok_or_else(no_record)?;
        let mut task = Task::read(&record, fsio::TASK_SIZE_LIMIT)?.ok_or_else(no_record)?;
        task.id = Some(new_id.unwrap_or_else(|| self.free_retry_id(id)));
        task.attempt = None;
        task.resume = None;
        edit(&mut task);
        self.submit(&task)
    }

    /// The first `<id>-rN` no task on the root holds.
    fn free_retry_id(&self, id: &TaskId) -> TaskId {
        id.retries()
            .find(|c| matches!(ids::lookup(&self.root, c), Ok(None)))
            .expect("a free retry id")
    }

    /// Retry `id` (changed by `edit`) and re-queue the tasks its end cancelled down its
    /// chains: every queued task that never ran, was cancelled, and waits (directly or
    /// through others of them) for `id`. Each goes back under a new id, waiting for the
    /// new ids of what it waited for, in an order where a task's dependencies are
    /// submitted before it. Returns each old id with its new one, `id`'s first.
    pub fn retry_with_dependents(
        &self,
        id: &TaskId,
        edit: impl FnOnce(&mut Task),
    ) -> Result<Vec<(TaskId, TaskId)>> {
        let first = self.retry_as(id, None, edit)?;
        let mut renamed: Vec<(TaskId, TaskId)> = vec![(id.clone(), first)];
        // The cancelled tasks that never ran, as put aside.
        let mut withdrawn: Vec<Task> = Vec::new();
        for entry in fs::read_dir(self.root.queue_rejected())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Ok(Some(task)) = Task::read(&path, fsio::TASK_SIZE_LIMIT) else {
                continue;
            };
            let Some(tid) = task.id.clone() else {
                continue;
            };
            let cancelled = matches!(
                self.read_result(&tid),
                Ok(Some(r)) if r.outcome == Some(Outcome::Cancelled)
            );
            if cancelled && !task.after.is_empty() {
                withdrawn.push(task);
            }
        }
        // Those that wait, through the chain, for `id`.
        let mut chosen: Vec<TaskId> = vec![id.clone()];
        loop {
            let before = chosen.len();
            for t in &withdrawn {
                let tid = t.id.clone().expect("read with an id");
                if !chosen.contains(&tid) && t.after.iter().any(|d| chosen.contains(d)) {
                    chosen.push(tid);
                }
            }
            if chosen.len() == before {
                break;
            }
        }
        // A task and its earlier retries (`t`, `t-r1`) are one task: only the latest
        // goes back, and what waited for any of them waits for it.
        let mut left: Vec<Task> = Vec::new();
        let mut same: Vec<(TaskId, TaskId)> = Vec::new();
        let mut picked: Vec<Task> = withdrawn
            .into_iter()
            .filter(|t| t.id.as_ref().is_some_and(|i| chosen[1..].contains(i)))
            .collect();
        picked.sort_by_key(|t| retry_number(t.id.as_ref().expect("read with an id")));
        for t in picked.into_iter().rev() {
            let tid = t.id.clone().expect("read with an id");
            let base = retry_base(&tid);
            match left
                .iter()
                .find(|l| retry_base(l.id.as_ref().expect("read with an id")) == base)
            {
                Some(latest) => same.push((tid, latest.id.clone().expect("read with an id"))),
                None => left.push(t),
            }
        }
        left.reverse();
        let alias = |d: &TaskId| {
            same.iter()
                .find(|(o, _)| o == d)
                .map_or_else(|| d.clone(), |(_, l)| l.clone())
        };
        // Submit each once all of its chosen dependencies have their new ids.
        while !left.is_empty() {
            let new_of = |d: &TaskId| {
                let d = alias(d);
                renamed
                    .iter()
                    .find(|(o, _)| *o == d)
                    .map(|(_, n)| n.clone())
            };
            let ready = left.iter().position(|t| {
                t.after
                    .iter()
                    .all(|d| !chosen.contains(d) || new_of(d).is_some())
            });
            let Some(i) = ready else {
                // A cycle cannot be submitted (submit refuses unknown ids): leave it.
                break;
            };
            let t = left.remove(i);
            let old = t.id.clone().expect("read with an id");
            let after: Vec<TaskId> = t
                .after
                .iter()
                .map(|d| new_of(d).unwrap_or_else(|| d.clone()))
                .collect();
            let new = self.retry_as(&old, None, |task| task.after = after)?;
            renamed.push((old, new));
        }
        Ok(renamed)
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
            used = self
                .root
                .slots()?
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
            paused: pause::Paused::load(&self.root)
                .entries
                .iter()
                .map(|(t, _)| t.to_string())
                .collect(),
            groups: groups::usage(&self.root)?,
        })
    }
}

/// Create the root and its shared directories (0700): what workers, the queue, the id
/// registry and the locks need. Idempotent.
pub fn init_root(root: &Root) -> Result<()> {
    root.require_accessible()?;
    crate::trust::verify_root(root)?;
    for dir in [
        root.path().to_path_buf(),
        root.workers_dir(),
        root.queue_tmp(),
        root.queue_pending(),
        root.queue_results(),
        root.queue_rejected(),
        root.queue_served(),
        root.keys_dir(),
        root.slots_dir(),
        root.agents_dir(),
        root.groups_dir(),
        root.paused_dir(),
        root.gates_dir(),
        root.ids_dir(),
    ] {
        fsio::ensure_dir(&dir)?;
    }
    crate::trust::verify_root(root)
}

/// How many workers have a live gate and nothing in hand, not paused; and the slots
/// of those that would be but are paused.
fn idle_workers(root: &Root, paused: &pause::Paused) -> Result<(u32, Vec<String>)> {
    let mut n = 0;
    let mut held = Vec::new();
    for slot in root.slots()? {
        let w = root.worker(slot);
        if crate::gate::probe(&w.worker_gate())?.is_some() && !w.running().exists() {
            if paused.slot(slot.0) {
                held.push(slot.to_string());
            } else {
                n += 1;
            }
        }
    }
    Ok((n, held))
}
