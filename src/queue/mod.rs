//! The shared queue (pull model): priorities, one running task per key, fair
//! scheduling across keys, and a global cap on running agents (docs/ARCHITECTURE.md, "Claim from the queue").
//!
//! A pending task is a file in `queue/pending/` named so that it sorts by priority,
//! then submit order: `<9-priority>~<submit ns, 20 digits>~<key>~<id>.json` (`~` can
//! appear in neither a key nor an id). Idle workers claim the best eligible entry by
//! renaming it into their own `running.json`; whoever loses that race gets ENOENT and
//! moves on. No dispatcher runs anywhere.

pub mod budgets;
mod cancel;
mod capacity;
mod claim;
mod deps;
mod handle;
pub mod groups;
mod held;
pub mod limits;
mod order;
mod publish_claimed;
pub mod pause;
pub(crate) use publish_claimed::publish_claimed_result;
mod retry;
mod retry_ids;
mod submitter;
mod waits;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Config;
use crate::error::Result;
use crate::fsio;
use crate::layout::Root;
use crate::protocol::{id_list, Task, TaskId, TaskResult};
use crate::wait::{Awaited, OnDeath, Vigil, Wait};
use crate::watch::{Interest, WatchMode};

pub use capacity::{Capacity, KeyUse, LockInfo, PendingCount, SlotUse};
pub(crate) use claim::claim_next_seeing;
// The benches time a claim on its own; the worker claims through `claim_next_seeing`.
#[cfg(any(test, feature = "internals"))]
pub use claim::claim_next;
pub use claim::{
    publish_queue_result, reject_in_hand, requeue, take_run_slot, Claim, RunSlot, Serve,
};
pub use deps::{check_known, readiness, Readiness};
pub use handle::{Queue, ORIGIN_QUEUE};
use held::is_held;
use order::DEFAULT_PRIORITY;
pub use order::{effective, order, PendingName, PendingTask};
pub(crate) use submitter::Submitter;
pub(crate) use waits::root_wide_wait;

impl Queue {
    /// The shared queue of the root at `root`.
    pub fn new(root: Root) -> Queue {
        Queue { root }
    }

    /// Its root.
    pub fn root(&self) -> &Root {
        &self.root
    }

    fn config(&self) -> Result<Config> {
        Config::load(&self.root.config_file())
    }

    /// Accept a task: staged in `queue/tmp/`, linked into `queue/pending/`, durable on
    /// return. Assigns an id if absent; an id already used anywhere on the root is refused
    /// ([`Error::IdTaken`](crate::error::Error::IdTaken), naming where it went), so is a
    /// dependency (`after`) the root has no record of
    /// ([`Error::UnknownDependency`](crate::error::Error::UnknownDependency)) and a `dir`
    /// that is no directory of ours
    /// ([`Error::BadTaskDir`](crate::error::Error::BadTaskDir)), and a group the root does
    /// not have ([`Error::UnknownGroup`](crate::error::Error::UnknownGroup), naming the
    /// ones it has). The root must exist ([`Error::NoRoot`](crate::error::Error::NoRoot)
    /// otherwise): submitting never makes one.
    pub fn submit(&self, task: &Task) -> Result<TaskId> {
        Submitter::open(self.root.clone())?.submit(task)
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

    /// Wait for a submitted task's result (woken by file events, not a sleep loop). Never
    /// blocks for nothing: ends with
    /// [`Error::NobodyServes`](crate::error::Error::NobodyServes) when no live worker
    /// serves the root. If the worker that took the task dies with it, waits on for
    /// recovery's result while someone can recover it, else ends with
    /// [`Error::WorkerDied`](crate::error::Error::WorkerDied) (see
    /// [`Queue::wait_for_result_with`] to hear of it at once).
    pub fn wait_for_result(&self, id: &TaskId, timeout: Duration) -> Result<TaskResult> {
        self.wait_for_result_with(id, timeout, OnDeath::AwaitRecovery)
    }

    /// [`Queue::wait_for_result`], doing `on_death` if the worker dies with the task.
    pub(crate) fn wait_for_result_with(
        &self,
        id: &TaskId,
        timeout: Duration,
        on_death: OnDeath,
    ) -> Result<TaskResult> {
        self.result_wait(id, timeout, on_death)?.run()
    }

    /// [`Queue::wait_for_result_with`] as a [`Wait`] not yet driven.
    pub(crate) fn result_wait(
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
}

/// Create the root and its shared directories (0700): what workers, the queue, the id
/// registry and the locks need. Idempotent.
pub fn init_root(root: &Root) -> Result<()> {
    root.require_accessible()?;
    crate::trust::verify_root(root)?;
    fsio::ensure_dir(root.path())?;
    // `queue/ids/` is a legacy root's, read only: not made.
    let legacy = root.queue_ids();
    for dir in root.shared_dirs().iter().filter(|d| **d != legacy) {
        fsio::ensure_dir(dir)?;
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
