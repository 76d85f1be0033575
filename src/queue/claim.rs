//! The worker's side of the queue: run slots, claiming the next task, answering it.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::Config;
use crate::dirlock::{Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::ids::{self, Place};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{Outcome, Task, TaskId, TaskResult};

use super::groups::{self, GroupSlot};
use super::held::is_held;
use super::held::take_one_of;
use super::order::{next_to_run, PendingName, PendingTask};
use super::pause::Paused;
use super::handle::{Queue, ORIGIN_QUEUE};

/// What a worker holds while it runs a queued task.
#[derive(Debug)]
pub struct QueueClaim {
    pub task_bytes: Vec<u8>,
    /// The worker's own `.lock` (from the `take_slot_lock` callback).
    pub slot_lock: DirLock,
    pub key_lock: Option<DirLock>,
    pub run_slot: Option<DirLock>,
    /// One of its group's run slots (`groups/<name>.<i>.lock`), when it has a group.
    pub group_slot: Option<DirLock>,
}

/// How long a pending file that does not parse must stay unchanged before it is
/// rejected: a non-atomic writer (truncate, then write) may still be at it.
pub const PENDING_QUIET: Duration = Duration::from_millis(500);

/// Whether a worker serves a task now (its agent preset, that preset's usage limit):
/// asked of every candidate [`claim_next`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Serve {
    Now,
    /// Not before then (the task's agent is usage-limited until then).
    Later(SystemTime),
    /// Never by this worker (it does not run the task's agent preset).
    Never,
}

/// What [`claim_next`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Claim {
    /// A task is in the worker's `running.json`, its locks held.
    Taken(Box<QueueClaim>),
    /// Nothing could run now: every pending task's key is busy, or it waits.
    Nothing,
    /// `queue/pending/` held nothing at all (no task, no file to reject) when listed.
    Empty,
    /// Tasks wait, but every run slot is taken (`maxRunning`).
    AllSlotsBusy,
    /// The worker's own `.lock` is held by someone else (a recovery is at it).
    SlotLocked,
    /// The best candidate does not parse yet and may still be being written by a
    /// non-atomic writer: look again after this long.
    NotYet(Duration),
}

/// The outcome of [`take_run_slot`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RunSlot {
    /// The root sets no `maxRunning`: nothing to take.
    Uncapped,
    /// One of the root's run slots, held until dropped.
    Held(Box<DirLock>),
    /// Every run slot is taken; says which cap.
    AllBusy(String),
}

/// Take a run slot when the root caps running agents.
pub fn take_run_slot(root: &Root, config: &Config) -> Result<RunSlot> {
    let Some(max) = config.max_running else {
        return Ok(RunSlot::Uncapped);
    };
    let opts = config.lock_options();
    if let Some(l) = take_one_of((0..max).map(|i| root.slot_lock(i)), &opts)? {
        return Ok(RunSlot::Held(Box::new(l)));
    }
    Ok(RunSlot::AllBusy(format!(
        "all {max} run slots are busy (maxRunning {max})"
    )))
}

/// One look at `queue/pending/`, as a claim sees it.
struct Scan<'a> {
    serve: &'a dyn Fn(&Task) -> Serve,
    root: &'a Root,
    config: &'a Config,
    queue: Queue,
    pending: Vec<PendingTask>,
    served: HashMap<String, SystemTime>,
    now: SystemTime,
    opts: LockOptions,
    paused: &'a Paused,
}

impl Scan<'_> {
    /// The locks candidate `c` takes besides a run slot: its key's (`None` without a
    /// key, or when keys do not serialize) and one of its group's run slots (`None`
    /// without a group). `None` when one is taken: skip to another task (a busy key is
    /// noted in `busy`: one lock attempt per key per scan, however many of its tasks
    /// wait).
    fn key_and_group_locks(
        &self,
        c: &PendingTask,
        group: &Option<String>,
        busy: &mut HashSet<String>,
    ) -> Result<Option<(Option<DirLock>, Option<DirLock>)>> {
        let key_lock = match self.key_of(c) {
            Some(k) => match DirLock::try_acquire(&self.root.key_lock(&k), &self.opts)? {
                Acquire::Acquired(l) => Some(l),
                // Busy key: skip to another key's task, never wait on it.
                Acquire::Held(_) => {
                    busy.insert(k);
                    return Ok(None);
                }
            },
            None => None,
        };
        // Its group's cap, held as the root's is: by one of the group's run slots.
        let group_slot = match group {
            Some(g) => match groups::take_slot(self.root, g, &self.opts)? {
                GroupSlot::Held(l) => Some(*l),
                GroupSlot::Full(why) | GroupSlot::Unknown(why) => {
                    tracing::trace!("{} waits: {why}", c.path.display());
                    return Ok(None);
                }
            },
            None => None,
        };
        Ok(Some((key_lock, group_slot)))
    }

    /// The key a task is serialized on, when keys serialize.
    fn key_of(&self, t: &PendingTask) -> Option<String> {
        t.key
            .clone()
            .filter(|_| self.config.per_key_serialization())
    }

    /// The best task that could run now, looked at before anything is taken: taking
    /// (and dropping) a run slot or a lock is an event that wakes every idle worker,
    /// and a scan that finds every key busy must not set off another. `Err` is what
    /// the claim comes to when there is none.
    fn first_eligible(&mut self) -> Result<std::result::Result<(PathBuf, Option<String>), Claim>> {
        let mut held = HashSet::new();
        let mut retry: Option<Duration> = None;
        loop {
            let Some(i) = next_to_run(&self.pending, &self.served, &held, self.now) else {
                return Ok(Err(retry.map_or(Claim::Nothing, Claim::NotYet)));
            };
            let key = self.key_of(&self.pending[i]);
            if let Some(k) = key.filter(|k| is_held(&self.root.key_lock(k), &self.opts)) {
                held.insert(k);
                continue;
            }
            match self.look_at(&self.pending[i])? {
                Candidate::Ready(group) => return Ok(Ok((self.pending[i].path.clone(), group))),
                Candidate::NotYet(wait) => {
                    retry = Some(retry.map_or(wait, |r| r.min(wait)));
                    self.pending.swap_remove(i);
                }
                Candidate::Skip => {
                    self.pending.swap_remove(i);
                }
            }
        }
    }

    fn look_at(&self, c: &PendingTask) -> Result<Candidate> {
        look_at(
            &self.queue,
            c,
            self.config,
            self.serve,
            self.paused,
            &self.opts,
        )
    }
}

/// The worker's side: claim the best eligible pending task into `worker`'s
/// `running.json`. `take_slot_lock` takes the worker's own `.lock`; it is called only
/// once an eligible task is found (most wake-ups find none: every lock change on the
/// root wakes every idle worker).
#[cfg(any(test, feature = "internals"))]
pub fn claim_next(
    root: &Root,
    worker: &WorkerPaths,
    config: &Config,
    serve: &dyn Fn(&Task) -> Serve,
    take_slot_lock: impl FnOnce() -> Result<Option<DirLock>>,
) -> Result<Claim> {
    let paused = Paused::load(root);
    claim_next_seeing(root, worker, config, serve, take_slot_lock, &paused)
}

/// The pending tasks; `None` when `queue/pending/` cannot be read now (an NFS
/// `ESTALE`, a directory being replaced): nothing to take this time, looked at again at
/// the next look, as the worker's own look at the queue did before the claim's listing
/// replaced it.
fn listed(queue: &Queue) -> Option<Vec<PendingTask>> {
    queue
        .scan()
        .map_err(|e| tracing::debug!("listing the queue: {e}"))
        .ok()
}

/// [`claim_next`] with the pauses as the caller's look read them (a worker reads
/// `paused/` once per look, for its inbox and the queue alike).
pub(crate) fn claim_next_seeing(
    root: &Root,
    worker: &WorkerPaths,
    config: &Config,
    serve: &dyn Fn(&Task) -> Serve,
    take_slot_lock: impl FnOnce() -> Result<Option<DirLock>>,
    paused: &Paused,
) -> Result<Claim> {
    let queue = Queue::new(root.clone());
    let pending = match listed(&queue) {
        Some(pending) if pending.is_empty() => return Ok(Claim::Empty),
        Some(pending) => pending,
        None => return Ok(Claim::Nothing),
    };
    let mut scan = Scan {
        serve,
        root,
        config,
        served: queue.served_times(&pending),
        queue,
        pending,
        now: SystemTime::now(),
        opts: config.lock_options(),
        paused,
    };
    let (verified, first_group) = match scan.first_eligible()? {
        Ok(found) => found,
        Err(nothing) => return Ok(nothing),
    };
    let run_slot = match take_run_slot(root, config)? {
        RunSlot::Uncapped => None,
        RunSlot::Held(l) => Some(*l),
        RunSlot::AllBusy(_) => return Ok(Claim::AllSlotsBusy),
    };
    // One lock attempt per key per scan, however many of its tasks wait.
    let mut busy = HashSet::new();
    let mut take_slot_lock = Some(take_slot_lock);
    let mut slot_lock: Option<DirLock> = None;
    while let Some(i) = next_to_run(&scan.pending, &scan.served, &busy, scan.now) {
        let c = scan.pending.swap_remove(i);
        // Only the first candidate was looked at before the run slot was taken.
        let group = if c.path == verified {
            first_group.clone()
        } else {
            match scan.look_at(&c)? {
                Candidate::Ready(group) => group,
                _ => continue,
            }
        };
        let Some((key_lock, group_slot)) = scan.key_and_group_locks(&c, &group, &mut busy)? else {
            continue;
        };
        if slot_lock.is_none() {
            slot_lock = match take_slot_lock.take().expect("taken once")()? {
                Some(l) => Some(l),
                None => return Ok(Claim::SlotLocked),
            };
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
        let Some(task_bytes) = accept_claimed(root, worker, config, &c)? else {
            continue;
        };
        return Ok(Claim::Taken(Box::new(QueueClaim {
            task_bytes,
            slot_lock: slot_lock.expect("taken before the rename"),
            key_lock,
            run_slot,
            group_slot,
        })));
    }
    Ok(Claim::Nothing)
}

/// What a look at a pending file (before claiming it) found.
enum Candidate {
    /// Claim it (a file that is no task is claimed too, and rejected with a reason),
    /// once it holds one of its group's run slots (the group named).
    Ready(Option<String>),
    /// It does not parse yet and may still be being written: look again after this.
    NotYet(Duration),
    /// Not now: it waits for its dependencies, was just withdrawn because one failed,
    /// or is gone.
    Skip,
}

/// Look at a pending entry before claiming it. A file written in place (not staged and
/// linked) may be caught half-written: it is left alone until it parses or has been
/// quiet for a while. A task with dependencies runs only once all have succeeded; if one
/// never will, the task is withdrawn here and answered `cancelled` (the cascade: its
/// own dependents see that answer on a later scan). A paused task, or one whose group
/// runs as many as it allows, is left for a later scan (a resume or a group slot coming
/// free wakes the workers).
fn look_at(
    queue: &Queue,
    c: &PendingTask,
    config: &Config,
    serve: &dyn Fn(&Task) -> Serve,
    paused: &Paused,
    opts: &LockOptions,
) -> Result<Candidate> {
    let bytes = match fsio::read_bounded(&c.path, config.max_task_bytes()) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Candidate::Skip),
        Err(_) => return Ok(Candidate::Ready(None)),
    };
    let task = match Task::from_bytes(&c.path, &bytes) {
        Ok(t) => t,
        Err(Error::BadFile { problem, .. }) if problem.may_be_incomplete() => {
            return Ok(quiet_for(&c.path).map_or(Candidate::Ready(None), Candidate::NotYet))
        }
        Err(_) => return Ok(Candidate::Ready(None)),
    };
    if paused
        .task_reason(task.key.as_deref(), task.group.as_deref())
        .is_some()
    {
        return Ok(Candidate::Skip);
    }
    // A spent daily budget (the root's or its group's) holds it until raised or tomorrow.
    let budget = crate::queue::budgets::hold_reason(queue.root(), config, task.group.as_deref());
    let full = |g: &String| groups::full(queue.root(), g, opts).is_some();
    if budget.is_some() || task.group.as_ref().is_some_and(full) {
        return Ok(Candidate::Skip);
    }
    let ready = Candidate::Ready(task.group.clone());
    // Deferred (its agent was usage-limited): not before its notBefore; look again then.
    let now = SystemTime::now();
    if let Some(due) = task.not_before().filter(|t| *t > now) {
        return Ok(Candidate::NotYet(until(due, now)));
    }
    match serve(&task) {
        Serve::Now => {}
        Serve::Later(due) => return Ok(Candidate::NotYet(until(due, now))),
        Serve::Never => return Ok(Candidate::Skip),
    }
    if task.after.is_empty() {
        return Ok(ready);
    }
    match super::deps::readiness(queue.root(), &task) {
        super::deps::Readiness::Ready => Ok(ready),
        super::deps::Readiness::Wait(ids) => {
            tracing::trace!("{} waits for {ids:?}", c.path.display());
            Ok(Candidate::Skip)
        }
        super::deps::Readiness::Failed { reason, .. } => {
            // A submitted entry's id (in its name) is the queue's; a hand-dropped file's
            // is answered only if the queue can have it.
            let id = c.id.as_ref().or(task
                .id
                .as_ref()
                .filter(|id| ids::claim(queue.root(), id, Place::Queue).is_ok()));
            if queue.withdraw(c, id, &reason, "(its dependency did not succeed)")? {
                tracing::info!("withdrew queued task {}: {reason}", c.path.display());
            }
            Ok(Candidate::Skip)
        }
    }
}

/// How long from `now` until `due`, and a moment more (a wake-up a hair early would
/// find it not yet due).
fn until(due: SystemTime, now: SystemTime) -> Duration {
    due.duration_since(now).unwrap_or_default() + Duration::from_millis(5)
}

/// `Some(wait)` while `path` changed within [`PENDING_QUIET`].
fn quiet_for(path: &Path) -> Option<Duration> {
    let age = fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()?
        .elapsed()
        .unwrap_or_default();
    PENDING_QUIET
        .checked_sub(age)
        .map(|left| left + Duration::from_millis(5))
}

/// Check the entry just claimed into `running.json`: a task, with an id (given one if
/// it has none) registered for the queue. `None` when it was rejected instead.
fn accept_claimed(
    root: &Root,
    worker: &WorkerPaths,
    config: &Config,
    c: &PendingTask,
) -> Result<Option<Vec<u8>>> {
    let running = worker.running();
    let bytes = match fsio::read_bounded(&running, config.max_task_bytes()) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => {
            // Too large (or not a file) to read whole: its id may still be read from its
            // head, and its sender answered, as an inbox answers it (a hand-dropped
            // file's id only if the queue can have it).
            let id = c.id.clone().or_else(|| {
                fsio::read_head(&running, crate::protocol::salvage::PREFIX_SCANNED)
                    .and_then(|head| Task::salvage_id(&head))
                    .filter(|id| ids::claim(root, id, Place::Queue).is_ok())
            });
            reject_claimed(root, worker, c, &e.to_string(), id)?;
            return Ok(None);
        }
    };
    let mut task = match Task::from_bytes(&running, &bytes) {
        Ok(t) => t,
        Err(e) => {
            let id = Task::salvage_id(&bytes).or(c.id.clone());
            reject_claimed(root, worker, c, &e.to_string(), id)?;
            return Ok(None);
        }
    };
    let rewrite = task.id.is_none() || task.origin.as_deref() != Some(ORIGIN_QUEUE);
    if task.id.is_none() {
        task.id = Some(ids::fresh(root)?);
    }
    let id = task.id.clone().expect("given or made above");
    match ids::claim(root, &id, Place::Queue) {
        Ok(()) => {}
        // Its id went elsewhere: running it would publish a second result under it.
        Err(e @ Error::IdTaken { .. }) => {
            reject_claimed(root, worker, c, &e.to_string(), Some(id))?;
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    if !rewrite {
        return Ok(Some(bytes));
    }
    // A file dropped in by hand: what runs (and recovery re-reads) is the queue task.
    task.origin = Some(ORIGIN_QUEUE.to_string());
    let bytes = fsio::to_json_bytes(&task);
    fsio::write_replace(&running, &bytes, Durability::Durable)?;
    Ok(Some(bytes))
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
/// `queue/results/` (when its id is known and that answer would not stand in for
/// another task's), kept in `queue/rejected/NAME` with a reason.
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
        // Never replacing: an existing answer belongs to the task that holds the id.
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

/// Link a queued task's result (`kept`, in the worker's `results/`) into
/// `queue/results/<id>.json`. Replaces an earlier file there only when the id belongs
/// to the queue (ids are unique, so that file was about this same task); refuses, with
/// an error naming both files, when the id went to a worker's inbox or, on a root from
/// before the id registry, when a different result is already there.
pub fn publish_queue_result(root: &Root, kept: &Path, id: &TaskId) -> Result<()> {
    let dir = root.queue_results();
    fsio::ensure_dir(&dir)?;
    let dest = dir.join(format!("{id}.json"));
    if ids::same_file(kept, &dest) {
        return Ok(());
    }
    let refuse = |why: String| {
        let e = Error::NotPublished {
            kept: kept.to_path_buf(),
            dest: dest.clone(),
            why,
        };
        tracing::error!("{e}");
        Err(e)
    };
    match ids::lookup(root, id)? {
        Some(Place::Queue) => fsio::link_replace(kept, &dest)?,
        Some(other) => {
            return refuse(format!(
                "task id {id} went to {other} ({}), not to the queue",
                root.id_entry(id).display()
            ))
        }
        None => match fs::hard_link(kept, &dest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return refuse(format!(
                    "it already holds another result for id {id}, and no entry in {} says \
                     whose",
                    root.ids_dir().display()
                ))
            }
            Err(e) => return Err(Error::io("link queue result", dest, e)),
        },
    }
    // The new name is a link to `kept`: committed by an fsync of that file where the
    // journal carries its names with it (`fsio::commit_file`), else the shared commit.
    fsio::commit_file_at(&dir, kept)
}

/// Put a dead worker's task back in the queue for another attempt, in one rename so
/// a crash part-way can never leave two copies: `running` is first rewritten with the
/// next attempt number, then moved into `queue/pending/`.
pub fn requeue(root: &Root, running: &Path, task: &Task) -> Result<()> {
    let mut t = task.clone();
    t.origin = Some(ORIGIN_QUEUE.into());
    let id = t.id.get_or_insert_with(TaskId::generate).clone();
    let name = PendingName::for_task(&t, &id, SystemTime::now()).file_name();
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
