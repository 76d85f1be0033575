//! Waiting for a file to say something: one loop for every library wait, and whether the wait will ever be answered.
//!
//! [`until`] re-reads on every file event (and on a slow timer, as a safety net) until
//! its check yields; a [`Vigil`] ends it early when nobody will ever answer.
//!
//! A live worker holds its slot's gate (`workers/<N>/.worker.lock`) for its whole life
//! and the kernel drops it when the worker dies, so a free gate means nobody serves the
//! slot. Two things make that judgement careful: a worker that is merely restarting
//! leaves its gate free for a moment, so "nobody serves it" needs the gate to stay free
//! for [`NOBODY_GRACE`]; and a worker that died mid-task shows as its gate coming free
//! while the task is still in its `running.json` — known at once, and final unless
//! someone recovers the slot (the worker started again, `conductor recover`, or any
//! other live worker, which sweeps abandoned slots). A queued task that names an agent
//! preset no live worker serves (their `status.json` `presets`) is unserved the same way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;

use crate::error::{Error, Result};
use crate::fsio;
use crate::gate;
use crate::layout::{Root, Slot};
use crate::protocol::{Status, Task, TaskId, TaskResult, WorkerState};
use crate::watch::{DirWatcher, Interest, WatchMode};

/// How often a waiter re-reads even without an event: a safety net, not the mechanism.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

mod hub;
pub use hub::{Hub, Subscription};

/// Re-run `check` on every wake-up until it yields a value, `timeout` passes, or
/// `vigil` finds nobody will ever answer. The watcher on `dirs` is armed before the
/// first check, so no change can slip between them. `what` names the awaited thing in
/// [`Error::Timeout`].
pub fn until<'a, T>(
    dirs: &[PathBuf],
    mode: WatchMode,
    interest: Interest,
    timeout: Duration,
    what: String,
    vigil: Vigil,
    check: impl FnMut() -> Result<Option<T>> + Send + 'a,
) -> Result<T> {
    Wait::new(dirs.to_vec(), mode, interest, timeout, what, vigil, check).run()
}

/// What one look at a wait found: its value, or how long to sleep at most before the
/// next look (less if woken).
#[derive(Debug)]
pub enum Step<T> {
    Ready(T),
    Sleep(Duration),
}

/// One wait, ready to be driven: [`Wait::run`] blocks on a watcher of its own; a caller
/// that wakes it some other way (a [`Hub`] shared by many waits, an async runtime) calls
/// [`Wait::step`] on every wake-up and after each sleep it asks for. Either way the
/// checks, the deadline and the [`Vigil`] are the ones here.
pub struct Wait<'a, T> {
    /// The directories whose changes may answer the wait.
    pub dirs: Vec<PathBuf>,
    pub mode: WatchMode,
    /// Which changed paths are worth a look.
    pub interest: Interest,
    timeout: Duration,
    deadline: Option<Instant>,
    what: String,
    vigil: Vigil,
    check: Box<dyn FnMut() -> Result<Option<T>> + Send + 'a>,
}

impl<T> std::fmt::Debug for Wait<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("dirs", &self.dirs)
            .field("what", &self.what)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<'a, T> Wait<'a, T> {
    /// A wait whose `timeout` starts now (a timeout too large to add, e.g.
    /// `Duration::MAX`, means "wait forever").
    pub fn new(
        dirs: Vec<PathBuf>,
        mode: WatchMode,
        interest: Interest,
        timeout: Duration,
        what: String,
        vigil: Vigil,
        check: impl FnMut() -> Result<Option<T>> + Send + 'a,
    ) -> Wait<'a, T> {
        Wait {
            dirs,
            mode,
            interest,
            timeout,
            deadline: Instant::now().checked_add(timeout),
            what,
            vigil,
            check: Box::new(check),
        }
    }

    /// Look once: the value if it is there; else [`Error::Timeout`] past the deadline,
    /// the vigil's error when nobody will answer, or how long to sleep at most.
    pub fn step(&mut self) -> Result<Step<T>> {
        if let Some(v) = (self.check)()? {
            return Ok(Step::Ready(v));
        }
        let now = Instant::now();
        let left = self
            .deadline
            .map_or(RECHECK_INTERVAL, |d| d.saturating_duration_since(now));
        if left.is_zero() {
            return Err(Error::Timeout {
                what: self.what.clone(),
                after: self.timeout,
            });
        }
        if let Err(nobody) = self.vigil.check() {
            // The answer may have come just as its worker went.
            return (self.check)()?.map(Step::Ready).ok_or(nobody);
        }
        Ok(Step::Sleep(left.min(RECHECK_INTERVAL)))
    }

    /// Block until the wait ends. A wait answered within [`SHORT_WAIT`] is looked at a
    /// few times and needs no watcher at all; a longer one is woken by a watcher of its
    /// own, armed before its next look, so no change slips between them.
    ///
    /// Why look first: dropping an inotify instance blocks its closer for ~12–16 ms on this
    /// kernel (the reader thread's close), which every wait paid — most of a library
    /// round trip whose worker side takes ~1.3 ms on tmpfs — and a process that closes
    /// its last instance pays it again at exit.
    pub fn run(mut self) -> Result<T> {
        if let Step::Ready(v) = self.step()? {
            return Ok(v);
        }
        let began = Instant::now();
        let polled_until = began + SHORT_WAIT;
        let mut pause = LOOK_EVERY;
        loop {
            let now = Instant::now();
            let left = self
                .deadline
                .map_or(pause, |d| d.saturating_duration_since(now));
            if now >= polled_until || left.is_zero() {
                break;
            }
            std::thread::sleep(pause.min(left));
            if let Some(v) = (self.check)()? {
                return Ok(v);
            }
            // Most answers come within a worker's round trip (~1.3 ms on tmpfs, ~4 ms on
            // ext4): look often until then, so the wait adds a fraction of it, then back off.
            if began.elapsed() >= LOOK_OFTEN_FOR {
                pause = (pause * 3 / 2).min(Duration::from_millis(3));
            }
        }
        let (tx, rx) = bounded(1);
        let watcher = DirWatcher::new(&self.dirs, self.mode, self.interest.clone(), tx)?;
        let ended = loop {
            match self.step() {
                Ok(Step::Sleep(d)) => {
                    let _ = rx.recv_timeout(d);
                }
                Ok(Step::Ready(v)) => break Ok(v),
                Err(e) => break Err(e),
            }
        };
        // On Linux its inotify instance is closed by its own thread, not waited for (see
        // watch::native): the answer is not held back by the ~12–16 ms that close blocks.
        // `notify`'s watchers elsewhere join their thread on drop: done on another.
        #[cfg(target_os = "linux")]
        drop(watcher);
        #[cfg(not(target_os = "linux"))]
        if let Err(e) = std::thread::Builder::new()
            .name("wait-teardown".into())
            .spawn(move || drop(watcher))
        {
            tracing::debug!("no thread to tear a watcher down on ({e}); doing it here");
        }
        ended
    }
}

/// How long a blocking wait looks by itself before it arms a watcher:
/// most library waits (a task's result on a busy worker, a status change) are answered
/// within it, and looking a few times costs less than arming a watch.
pub const SHORT_WAIT: Duration = Duration::from_millis(25);

/// How often a blocking wait looks during its first [`LOOK_OFTEN_FOR`]: a look is a
/// `stat` or two (~10 µs), so this costs ~5 % of a core for those few milliseconds.
const LOOK_EVERY: Duration = Duration::from_micros(200);

/// How long a blocking wait looks every [`LOOK_EVERY`] before it backs off.
const LOOK_OFTEN_FOR: Duration = Duration::from_millis(5);

/// Wait until `slot`'s status is one of `states`; returns that status. Ends with
/// [`Error::NobodyServes`] when no live worker serves the slot (for [`NOBODY_GRACE`]),
/// since then the status would never change.
pub fn for_status(
    root: &Root,
    mode: WatchMode,
    slot: Slot,
    states: &[WorkerState],
    timeout: Duration,
) -> Result<Status> {
    let w = root.existing_slot(slot)?;
    let what = format!(
        "worker {slot} to become {}",
        states
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    );
    let wanted: HashSet<&str> = ["status.json"].into();
    let vigil = Vigil::new(root.clone(), Awaited::Slot(slot), None, OnDeath::Fail);
    until(
        std::slice::from_ref(&w.dir),
        mode,
        names_interest(wanted),
        timeout,
        what,
        vigil,
        || Ok(Status::read(&w.status())?.filter(|s| states.contains(&s.status))),
    )
}

/// Wait until task `id` sent to `slot` has a result; returns it. Ends with
/// [`Error::NobodyServes`] when no live worker serves the slot (for [`NOBODY_GRACE`]);
/// if its worker dies with the task in hand, does `on_death`.
pub fn for_result(
    root: &Root,
    mode: WatchMode,
    slot: Slot,
    id: &TaskId,
    timeout: Duration,
    on_death: OnDeath,
) -> Result<TaskResult> {
    result_wait(root, mode, slot, id, timeout, on_death)?.run()
}

/// [`for_result`] as a [`Wait`] not yet driven.
pub fn result_wait(
    root: &Root,
    mode: WatchMode,
    slot: Slot,
    id: &TaskId,
    timeout: Duration,
    on_death: OnDeath,
) -> Result<Wait<'static, TaskResult>> {
    id.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    let w = root.existing_slot(slot)?;
    // The worker makes results/ too; making it here lets us watch it before then.
    fsio::ensure_dir(&w.results_dir())?;
    let file_name = format!("{id}.json");
    let wanted: HashSet<&str> = [file_name.as_str()].into();
    let what = format!("the result of task {id} on worker {slot}");
    let vigil = Vigil::new(
        root.clone(),
        Awaited::Slot(slot),
        Some(id.clone()),
        on_death,
    );
    let result = w.result_for(id);
    Ok(Wait::new(
        vec![w.results_dir()],
        mode,
        names_interest(wanted),
        timeout,
        what,
        vigil,
        move || TaskResult::read(&result),
    ))
}

/// Wake only for changes to files with these names.
pub fn names_interest(names: HashSet<&str>) -> Interest {
    let names: HashSet<String> = names.into_iter().map(String::from).collect();
    Arc::new(move |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| names.contains(n))
    })
}

/// How long the gates a wait depends on must stay free before the wait ends with
/// [`Error::NobodyServes`]: a restarting worker frees its gate only for a moment.
pub const NOBODY_GRACE: Duration = Duration::from_secs(2);

/// Who a wait depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// The worker of one slot (a task sent to its inbox, or its status).
    Slot(Slot),
    /// Any worker of the root (a task in the shared queue).
    Queue,
}

/// What a wait does when the worker running its task dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeath {
    /// End at once with [`Error::WorkerDied`].
    Fail,
    /// Wait on for recovery's result as long as someone can recover the task: the
    /// slot's gate is taken again, or another live worker serves the root (it recovers
    /// abandoned slots). With nobody for [`NOBODY_GRACE`], end with [`Error::WorkerDied`].
    AwaitRecovery,
}

/// Whether a live process (a worker, or a recovery in progress) holds `slot`'s gate.
pub fn slot_served(root: &Root, slot: Slot) -> Result<bool> {
    Ok(gate::probe(&root.worker(slot).worker_gate())?.is_some())
}

/// Whether any slot of `root` is served by a live worker.
pub fn root_served(root: &Root) -> Result<bool> {
    for slot in root.slots()? {
        if slot_served(root, slot)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `slot`'s `running.json` holds task `id` (compared as text, as ids are
/// written: a number and its digits are one id).
fn running_holds(root: &Root, slot: Slot, id: &TaskId) -> bool {
    Task::file_holds(&root.worker(slot).running(), id)
}

/// How deep a chain of queued dependencies is followed to find what blocks it.
const DEPENDENCY_DEPTH: usize = 8;

/// Why queued task `id` can never run, if it waits (through its `after`, followed down
/// queued dependencies) for a task in the inbox of a slot nobody serves. `None` while
/// every dependency it waits for can still run.
fn unserved_dependency(root: &Root, id: &TaskId) -> Result<Option<Error>> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut next = vec![(id.clone(), 0)];
    while let Some((task, depth)) = next.pop() {
        if depth >= DEPENDENCY_DEPTH || !seen.insert(task.to_string()) {
            continue;
        }
        let Some(entry) = root.pending_entry(&task)? else {
            continue; // not waiting in the queue (claimed, finished, or not queued)
        };
        let Ok(Some(pending)) = Task::read(&entry, fsio::TASK_SIZE_LIMIT) else {
            continue;
        };
        for dep in &pending.after {
            match crate::ids::lookup(root, dep) {
                Ok(Some(crate::ids::Place::Worker(slot))) => {
                    let w = root.worker(slot);
                    if Task::file_holds(&w.task(), dep) && !slot_served(root, slot)? {
                        return Ok(Some(Error::DependencyUnserved {
                            task: id.to_string(),
                            dependency: dep.to_string(),
                            slot: slot.0,
                            root: root.path().to_path_buf(),
                        }));
                    }
                }
                Ok(Some(crate::ids::Place::Queue)) => next.push((dep.clone(), depth + 1)),
                _ => {}
            }
        }
    }
    Ok(None)
}

/// Why queued task `id` can never run, if it names an agent preset (`agent`) that no
/// live worker of the root serves (each publishes its `presets` in `status.json`).
/// `None` while some live worker serves it, or one does not say what it serves (an
/// older worker: it may).
fn unserved_preset(root: &Root, id: &TaskId) -> Result<Option<Error>> {
    let Some(entry) = root.pending_entry(id)? else {
        return Ok(None);
    };
    let Ok(Some(task)) = Task::read(&entry, fsio::TASK_SIZE_LIMIT) else {
        return Ok(None);
    };
    let Some(preset) = task.agent else {
        return Ok(None);
    };
    let mut served: Vec<String> = Vec::new();
    for slot in root.slots()? {
        if !slot_served(root, slot)? {
            continue;
        }
        let presets = Status::read(&root.worker(slot).status())
            .ok()
            .flatten()
            .map(|s| s.presets)
            .unwrap_or_default();
        if presets.is_empty() || presets.contains(&preset) {
            return Ok(None);
        }
        for p in presets {
            if !served.contains(&p) {
                served.push(p);
            }
        }
    }
    Ok(Some(Error::PresetUnserved {
        task: id.to_string(),
        preset,
        served,
        root: root.path().to_path_buf(),
    }))
}

/// Watches over one wait: [`Vigil::check`] on every wake says whether anyone may
/// still answer it.
#[derive(Debug)]
pub struct Vigil {
    root: Root,
    awaited: Awaited,
    task: Option<TaskId>,
    on_death: OnDeath,
    grace: Duration,
    /// Since when nobody has served the wait (reset whenever someone does).
    unserved_since: Option<Instant>,
}

impl Vigil {
    pub fn new(root: Root, awaited: Awaited, task: Option<TaskId>, on_death: OnDeath) -> Vigil {
        Vigil {
            root,
            awaited,
            task,
            on_death,
            grace: NOBODY_GRACE,
            unserved_since: None,
        }
    }

    /// Use another grace than [`NOBODY_GRACE`].
    pub fn with_grace(mut self, grace: Duration) -> Vigil {
        self.grace = grace;
        self
    }

    /// Judge once: `Ok` while someone may still answer the wait, else why nobody will.
    /// Call it on every wake and on a timer: the grace is measured between calls.
    pub fn check(&mut self) -> Result<()> {
        match self.judge()? {
            None => {
                self.unserved_since = None;
                Ok(())
            }
            Some((err, at_once)) => {
                let since = *self.unserved_since.get_or_insert_with(Instant::now);
                if at_once || since.elapsed() >= self.grace {
                    Err(err)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// `None` while served; else the error, and whether it is final at once (a death
    /// when told to fail on one) or only once unserved for the grace.
    fn judge(&self) -> Result<Option<(Error, bool)>> {
        if let Some((slot, id)) = self.in_hand()? {
            let died = Error::WorkerDied {
                slot: slot.0,
                pid: Status::read(&self.root.worker(slot).status())
                    .ok()
                    .flatten()
                    .and_then(|s| s.worker_pid),
                task: id.to_string(),
                root: self.root.path().to_path_buf(),
            };
            return Ok(match self.on_death {
                OnDeath::Fail => Some((died, true)),
                OnDeath::AwaitRecovery if root_served(&self.root)? => None,
                OnDeath::AwaitRecovery => Some((died, false)),
            });
        }
        let served = match self.awaited {
            Awaited::Slot(slot) => slot_served(&self.root, slot)?,
            Awaited::Queue => root_served(&self.root)?,
        };
        if served && self.awaited == Awaited::Queue {
            if let Some(id) = &self.task {
                if let Some(blocked) = unserved_dependency(&self.root, id)? {
                    return Ok(Some((blocked, false)));
                }
                if let Some(unserved) = unserved_preset(&self.root, id)? {
                    return Ok(Some((unserved, false)));
                }
            }
        }
        Ok((!served).then(|| {
            let nobody = Error::NobodyServes {
                slot: match self.awaited {
                    Awaited::Slot(s) => Some(s.0),
                    Awaited::Queue => None,
                },
                task: self.task.as_ref().map(TaskId::to_string),
                root: self.root.path().to_path_buf(),
            };
            (nobody, false)
        }))
    }

    /// The slot whose dead worker left our task in `running.json`, if one did. A live
    /// worker running it is no death; nor is one that finished it just now — the gate
    /// is probed before `running.json` is read again, and a finished task leaves
    /// `running.json` before its worker lets go of the gate.
    fn in_hand(&self) -> Result<Option<(Slot, TaskId)>> {
        let Some(id) = &self.task else {
            return Ok(None);
        };
        let candidates = match self.awaited {
            Awaited::Slot(slot) => vec![slot],
            Awaited::Queue => self.root.slots()?,
        };
        for slot in candidates {
            if running_holds(&self.root, slot, id)
                && !slot_served(&self.root, slot)?
                && running_holds(&self.root, slot, id)
            {
                return Ok(Some((slot, id.clone())));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;

    fn root_with_slot(slot: Slot) -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        root.worker(slot).create_files().unwrap();
        (dir, root)
    }

    #[test]
    fn nobody_serves_only_after_the_grace() {
        let (_dir, root) = root_with_slot(Slot(0));
        let mut v = Vigil::new(root, Awaited::Slot(Slot(0)), None, OnDeath::Fail)
            .with_grace(Duration::from_secs(3600));
        // Free, but not for the grace yet: a worker may be restarting.
        v.check().expect("within the grace");
        let mut v = v.with_grace(Duration::ZERO);
        let err = v.check().unwrap_err();
        assert!(
            matches!(err, Error::NobodyServes { slot: Some(0), .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("conductor-worker 0 DIR"), "{err}");
    }

    #[test]
    fn a_held_gate_serves_and_resets_the_grace() {
        let (_dir, root) = root_with_slot(Slot(1));
        let gate = Gate::acquire(&root.worker(Slot(1)).worker_gate(), "worker 1").unwrap();
        let mut v = Vigil::new(root.clone(), Awaited::Slot(Slot(1)), None, OnDeath::Fail)
            .with_grace(Duration::ZERO);
        v.check().expect("served");
        let mut q =
            Vigil::new(root, Awaited::Queue, None, OnDeath::Fail).with_grace(Duration::ZERO);
        q.check().expect("the queue is served by any live worker");
        drop(gate);
        assert!(matches!(
            q.check(),
            Err(Error::NobodyServes { slot: None, .. })
        ));
    }

    #[test]
    fn a_task_left_in_running_json_under_a_free_gate_is_a_death() {
        let (_dir, root) = root_with_slot(Slot(2));
        let id = TaskId::from("t1");
        std::fs::write(
            root.worker(Slot(2)).running(),
            br#"{"id":"t1","prompt":"x"}"#,
        )
        .unwrap();
        let mut v = Vigil::new(
            root.clone(),
            Awaited::Slot(Slot(2)),
            Some(id.clone()),
            OnDeath::Fail,
        )
        .with_grace(Duration::from_secs(3600));
        let err = v.check().unwrap_err();
        assert!(
            matches!(&err, Error::WorkerDied { slot: 2, task, .. } if task == "t1"),
            "{err:?}"
        );
        // The queue form finds it on whichever slot took it.
        let mut q = Vigil::new(
            root.clone(),
            Awaited::Queue,
            Some(id.clone()),
            OnDeath::Fail,
        );
        assert!(matches!(q.check(), Err(Error::WorkerDied { slot: 2, .. })));
        // Awaiting recovery: someone live elsewhere on the root will sweep the slot.
        root.worker(Slot(3)).create_files().unwrap();
        let _other = Gate::acquire(&root.worker(Slot(3)).worker_gate(), "worker 3").unwrap();
        let mut r = Vigil::new(
            root,
            Awaited::Slot(Slot(2)),
            Some(id),
            OnDeath::AwaitRecovery,
        )
        .with_grace(Duration::ZERO);
        r.check().expect("another live worker will recover it");
    }

    #[test]
    fn a_queued_task_naming_a_preset_no_live_worker_serves_is_unserved() {
        let (_dir, root) = root_with_slot(Slot(0));
        let _gate = Gate::acquire(&root.worker(Slot(0)).worker_gate(), "worker 0").unwrap();
        let status = |presets: &[&str]| {
            let mut s = Status::new(WorkerState::Idle);
            s.presets = presets.iter().map(|p| p.to_string()).collect();
            fsio::write_replace(
                &root.worker(Slot(0)).status(),
                &fsio::to_json_bytes(&s),
                fsio::Durability::Atomic,
            )
            .unwrap();
        };
        status(&["command"]);
        let pending = root.queue_pending();
        std::fs::create_dir_all(&pending).unwrap();
        std::fs::write(
            pending.join("4~00000000000000000001~~t9.json"),
            br#"{"id":"t9","prompt":"x","agent":"codex","origin":"queue"}"#,
        )
        .unwrap();
        let id = TaskId::from("t9");
        let mut v = Vigil::new(root.clone(), Awaited::Queue, Some(id), OnDeath::Fail)
            .with_grace(Duration::ZERO);
        let err = v.check().unwrap_err();
        assert!(
            matches!(&err, Error::PresetUnserved { preset, served, .. }
                if preset == "codex" && served == &["command".to_string()]),
            "{err:?}"
        );
        assert_eq!(err.exit_class(), crate::error::ExitClass::Nobody);
        // A live worker serving it, or one that does not say what it serves: served.
        status(&["command", "codex"]);
        v.check().expect("served");
        status(&[]);
        v.check().expect("an older worker may serve it");
    }
}
