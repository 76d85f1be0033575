//! The worker daemon: event-driven pickup, agent runs, results, crash recovery.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, select, Receiver};
use nix::sys::signal::Signal;

use crate::agent::{Agent, AgentCommand, AgentOutput, Launch};
use crate::client::Client;
use crate::config::Config;
use crate::dirlock::{self, Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::gate::Gate;
use crate::host;
use crate::layout::{Root, Slot, WorkerPaths, ENV_HOME};
use crate::preset::Preset;
use crate::protocol::{
    now_rfc3339, rfc3339, Outcome, Status, Task, TaskId, TaskResult, WorkerState,
};
use crate::queue;
use crate::watch::{DirWatcher, WatchMode};

/// A slot whose worker is gone and whose status has been silent this long is
/// recovered by any idle worker (live workers refresh their status every heartbeat).
const ABANDONED_AFTER: Duration = Duration::from_secs(10);

/// How long an empty `cancel` file must stay empty to count (writers truncate first).
const EMPTY_CANCEL_QUIET: Duration = Duration::from_millis(250);

/// Set in every agent's environment; its presence means "we are inside an agent".
pub const ENV_WORKER: &str = "CONDUCTOR_WORKER";

pub use crate::recovery::{recover_abandoned, recover_slot, RecoveryReport};

/// How a worker is set up. [`WorkerOptions::new`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub root: Root,
    pub slot: Slot,
    /// The agent's working directory (the project).
    pub project_dir: PathBuf,
    pub agent: AgentCommand,
    /// How to read the agent's output and continue sessions.
    pub preset: Preset,
    pub watch: WatchMode,
    /// Default timeout when the task gives none (`--timeout`); none = no limit.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when stopping an agent.
    pub kill_grace: Duration,
    /// How often `status.json` is refreshed while working.
    pub heartbeat: Duration,
    /// Re-read the inbox this often even without events (the slow safety timer).
    pub rescan: Duration,
    /// How long an unparseable task.json must stay unchanged before it is rejected
    /// (non-atomic writers truncate, then write).
    pub quiet_grace: Duration,
    /// Stdout bytes kept inline in the result; the rest stays in a file.
    pub inline_output: usize,
    /// Start even inside an agent (`CONDUCTOR_WORKER` set).
    pub allow_nested: bool,
}

impl WorkerOptions {
    pub fn new(root: Root, slot: Slot, project_dir: PathBuf, agent: AgentCommand) -> Self {
        WorkerOptions {
            root,
            slot,
            project_dir,
            agent,
            preset: Preset::Command,
            watch: WatchMode::Auto,
            timeout: None,
            kill_grace: Duration::from_secs(5),
            heartbeat: Duration::from_secs(2),
            rescan: Duration::from_secs(2),
            quiet_grace: Duration::from_millis(500),
            inline_output: 4 * 1024 * 1024,
            allow_nested: false,
        }
    }
}

/// The slot's gate. An idle worker recovering this slot holds it for a moment; a
/// worker started just then waits for that (bounded) instead of refusing.
fn acquire_worker_gate(paths: &WorkerPaths, slot: Slot) -> Result<Gate> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match Gate::acquire(&paths.worker_gate(), &format!("worker {slot}")) {
            Err(e @ Error::GateHeld { .. }) => {
                let recovering = crate::gate::probe(&paths.worker_gate())
                    .ok()
                    .flatten()
                    .is_some_and(|h| h.role.starts_with("recovery"));
                if !recovering || Instant::now() >= deadline {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// A started worker: holds its slot's gate and watcher. Run it with [`Worker::run`].
pub struct Worker {
    opts: WorkerOptions,
    paths: WorkerPaths,
    config: Config,
    lock_opts: LockOptions,
    _gate: Gate,
    watcher: DirWatcher,
    wake: Receiver<()>,
    recovery: RecoveryReport,
    /// Frees parked files off the hot path (see `publish_status`).
    reaper: crossbeam_channel::Sender<PathBuf>,
    /// The agent program found on PATH at start.
    agent_path: Option<PathBuf>,
}

/// Why the agent stopped before finishing on its own.
enum Stop {
    Timeout(Duration),
    Cancelled,
    Interrupted(String),
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Our parked lock directory, if any (see DirLock::try_acquire_reusable).
        let _ = dirlock::clear_spares(&self.paths.lock_dir());
    }
}

impl Worker {
    /// Take the slot's gate, create the slot, recover what a dead predecessor left,
    /// publish `idle` and arm the watcher.
    pub fn start(opts: WorkerOptions) -> Result<Worker> {
        if !opts.allow_nested && std::env::var_os(ENV_WORKER).is_some() {
            return Err(Error::Refused(format!(
                "refusing to start worker {}: this shell runs inside a conductor agent \
                 ({ENV_WORKER} is set); pass --allow-nested if you really mean it",
                opts.slot
            )));
        }
        if !opts.project_dir.is_dir() {
            return Err(Error::Usage(format!(
                "project directory {} does not exist or is not a directory",
                opts.project_dir.display()
            )));
        }
        let client = Client::new(opts.root.clone());
        let paths = opts.root.worker(opts.slot);
        fsio::ensure_dir(&paths.dir)?;
        let gate = acquire_worker_gate(&paths, opts.slot)?;
        client.init_queue()?;
        client.create_worker(opts.slot)?;
        let config = Config::load(&opts.root.config_file())?;
        let lock_opts = config.lock_options();

        let (tx, wake) = bounded(1);
        // Our inbox and cancel file; the shared queue; key and run-slot locks coming
        // free (a skipped task may have become eligible).
        let shared = [
            opts.root.queue_pending(),
            opts.root.keys_dir(),
            opts.root.slots_dir(),
        ];
        let shared_dirs = shared.clone();
        let interest: crate::watch::Interest = Arc::new(move |p: &Path| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if matches!(name, "task.json" | "cancel") {
                return true;
            }
            !name.starts_with('.')
                && !name.ends_with(".guard")
                && p.parent()
                    .is_some_and(|d| shared_dirs.iter().any(|s| s == d))
        });
        let mut dirs = vec![paths.dir.clone()];
        dirs.extend(shared);
        let watcher = DirWatcher::new(&dirs, opts.watch, interest, tx)?;

        // Whatever a previous worker parked and did not free.
        let trash = paths.trash_dir();
        if let Ok(entries) = fs::read_dir(&trash) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        let (reaper, parked) = crossbeam_channel::unbounded::<PathBuf>();
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || {
                for p in parked {
                    let _ = fs::remove_file(p);
                }
            })
            .map_err(|e| Error::io("start the reaper thread for", trash.clone(), e))?;
        let mut worker = Worker {
            opts,
            paths,
            config,
            lock_opts,
            _gate: gate,
            watcher,
            wake,
            recovery: RecoveryReport::default(),
            reaper,
            agent_path: None,
        };
        worker.agent_path = worker.opts.agent.resolve();
        if worker.agent_path.is_none() {
            tracing::warn!(
                "agent `{}` is not on PATH; tasks will fail until it is installed",
                worker.opts.agent.program
            );
        }
        worker.recovery = recover_slot(&worker.opts.root, worker.opts.slot, &worker.lock_opts)?;
        dirlock::clear_spares(&worker.paths.lock_dir())?;
        // Recovery just finished a task (its status says done/error for it): leave that
        // for clients that poll status.json for their task, stamped as ours. Otherwise
        // announce idle.
        let finished = worker
            .recovery
            .interrupted
            .as_ref()
            .or(worker.recovery.already_finished.as_ref());
        let kept = finished.and_then(|id| {
            fsio::read_json::<Status>(&worker.paths.status(), SMALL_FILE_LIMIT)
                .ok()
                .flatten()
                .filter(|st| st.task_id.as_ref() == Some(id))
        });
        worker.publish_status(kept.unwrap_or_else(|| Status::new(WorkerState::Idle)))?;
        Ok(worker)
    }

    /// One line for the terminal: slot, root, project, agent and watcher.
    pub fn describe(&self) -> String {
        format!(
            "conductor worker {} (pid {}) serving {} in {} with agent `{}`, watching with {}",
            self.opts.slot,
            std::process::id(),
            self.paths.dir.display(),
            self.opts.project_dir.display(),
            self.opts.agent,
            self.watcher.kind()
        )
    }

    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Serve tasks until `shutdown` fires (or its sender is dropped).
    pub fn run(&mut self, shutdown: &Receiver<()>) -> Result<()> {
        let mut next_recovery = Instant::now() + self.opts.rescan;
        let mut seen_config = config_stamp(&self.opts.root);
        loop {
            if shutdown.try_recv().is_ok() {
                return Ok(());
            }
            // config.json may change while we run (maxRunning, limits): follow it.
            let stamp = config_stamp(&self.opts.root);
            if stamp != seen_config {
                seen_config = stamp;
                match Config::load(&self.opts.root.config_file()) {
                    Ok(c) => {
                        tracing::info!("config.json changed; reloaded");
                        self.lock_opts = c.lock_options();
                        self.config = c;
                    }
                    Err(e) => tracing::warn!(
                        "config.json changed but cannot be read ({e}); keeping the old one"
                    ),
                }
            }
            // Not only when idle long enough for a timeout: a stream of events (other
            // workers' locks) must not starve recovery of a dead worker's slot.
            if Instant::now() >= next_recovery {
                self.recover_abandoned_slots();
                next_recovery = Instant::now() + self.opts.rescan;
            }
            let mut pickup = self.poll_inbox(shutdown)?;
            if matches!(pickup, Pickup::Empty) {
                pickup = self.poll_queue(shutdown)?;
            }
            let retry_at = match pickup {
                Pickup::Ran => continue,
                Pickup::Stop => return Ok(()),
                Pickup::Empty => None,
                Pickup::NotYet(when) => Some(when),
            };
            let mut wait = self.opts.rescan;
            if let Some(at) = retry_at {
                wait = wait.min(at.saturating_duration_since(Instant::now()));
            }
            select! {
                recv(self.wake) -> _ => {}
                recv(shutdown) -> _ => return Ok(()),
                default(wait) => {}
            }
        }
    }

    /// Replace `status.json`. The replaced file is first linked into `.trash/` so the
    /// rename frees nothing, and the reaper thread frees it: freeing file data costs
    /// ~1 ms of kernel time on some filesystems (ext4 here), and a status write sits
    /// between a task's result and the next pickup.
    fn publish_status(&self, mut status: Status) -> Result<()> {
        status.worker_pid = Some(std::process::id());
        status.host = Some(host::hostname().to_string());
        let parked = self.paths.trash_dir().join(fsio::nonce());
        let parked = match fs::hard_link(self.paths.status(), &parked) {
            Ok(()) => Some(parked),
            Err(e) => {
                if e.kind() == io::ErrorKind::NotFound && !self.paths.trash_dir().exists() {
                    fsio::ensure_dir(&self.paths.trash_dir())?;
                }
                None
            }
        };
        fsio::write_json(&self.paths.status(), &status, Durability::Atomic)?;
        if let Some(p) = parked {
            let _ = self.reaper.send(p);
        }
        Ok(())
    }

    /// Look at the inbox once; claim and run a task if there is one.
    fn poll_inbox(&mut self, shutdown: &Receiver<()>) -> Result<Pickup> {
        let looked = Instant::now();
        let inbox = self.paths.task();
        if let Err(e) = fs::symlink_metadata(&inbox) {
            if e.kind() == io::ErrorKind::NotFound {
                return Ok(Pickup::Empty);
            }
            return Err(Error::io("stat", &inbox, e));
        }
        let lock = match DirLock::try_acquire_reusable(&self.paths.lock_dir(), &self.lock_opts)? {
            Acquire::Acquired(l) => l,
            Acquire::Held(h) => {
                tracing::warn!(
                    "slot {} is locked by someone else: {h}; will retry",
                    self.opts.slot
                );
                return Ok(Pickup::NotYet(Instant::now() + self.opts.rescan));
            }
        };
        let bytes = match fsio::read_bounded(&inbox, self.config.max_task_bytes()) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(Pickup::Empty),
            Err(Error::BadFile { problem, .. }) => {
                self.reject(&inbox, &problem.to_string(), None)?;
                release(lock);
                return Ok(Pickup::Ran);
            }
            // Unopenable (a socket, no permission): refusing it once beats failing on it
            // at every start.
            Err(e @ Error::Io { .. }) => {
                self.reject(&inbox, &e.to_string(), None)?;
                release(lock);
                return Ok(Pickup::Ran);
            }
            Err(e) => return Err(e),
        };
        let mut task = match Task::from_bytes(&inbox, &bytes) {
            Ok(t) => t,
            Err(Error::BadFile { problem, .. }) => {
                if problem.may_be_incomplete() {
                    if let Some(wait) = self.still_being_written(&inbox)? {
                        drop(lock);
                        return Ok(Pickup::NotYet(Instant::now() + wait));
                    }
                }
                let id = Task::salvage_id(&bytes);
                self.reject(&inbox, &problem.to_string(), id)?;
                release(lock);
                return Ok(Pickup::Ran);
            }
            Err(e) => return Err(e),
        };
        // Only a task this worker claims from queue/pending is a queue task.
        task.origin = None;
        if let Some(id) = &task.id {
            // Its id must be this inbox's (registered now if an original client wrote it).
            let place = crate::ids::Place::Worker(self.opts.slot);
            if let Err(e @ Error::IdTaken { .. }) = crate::ids::claim(&self.opts.root, id, place) {
                self.reject(&inbox, &e.to_string(), Some(id.clone()))?;
                release(lock);
                return Ok(Pickup::Ran);
            }
            if self.paths.result_for(id).exists() {
                let reason = format!(
                    "task id {id} was already used on worker {} (results/{id}.json exists); \
                     send it with a new id",
                    self.opts.slot
                );
                self.reject(&inbox, &reason, Some(id.clone()))?;
                release(lock);
                return Ok(Pickup::Ran);
            }
        }
        // Direct deliveries count against the root's running cap too.
        let run_slot = match queue::take_run_slot(&self.opts.root, &self.config)? {
            queue::RunSlot::Uncapped => None,
            queue::RunSlot::Held(l) => Some(l),
            queue::RunSlot::AllBusy(why) => {
                tracing::debug!("task waits in the inbox: {why}");
                drop(lock);
                return Ok(Pickup::NotYet(Instant::now() + self.opts.rescan));
            }
        };
        // One running task per key holds for direct deliveries too.
        let key_lock = match (&task.key, self.config.per_key_serialization()) {
            (Some(k), true) => {
                match DirLock::try_acquire(&self.opts.root.key_lock(k), &self.lock_opts)? {
                    Acquire::Acquired(l) => Some(l),
                    Acquire::Held(_) => {
                        tracing::debug!("task waits in the inbox: key {k} is busy");
                        return Ok(Pickup::NotYet(Instant::now() + self.opts.rescan));
                    }
                }
            }
            _ => None,
        };
        match fs::rename(&inbox, self.paths.running()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Pickup::Empty),
            Err(e) => return Err(Error::io("claim (rename to running.json)", &inbox, e)),
        }
        // The claim must survive a power loss, or task.json could reappear and the
        // task run a second time.
        fsio::fsync_dir(&self.paths.dir)?;
        // A non-atomic client may have rewritten the file in place between our read
        // and the rename: what is in running.json now is what runs.
        let task = match fsio::read_bounded(&self.paths.running(), self.config.max_task_bytes()) {
            Ok(Some(now)) if now != bytes => {
                match Task::from_bytes(&self.paths.running(), &now) {
                    Ok(newer) if newer.id == task.id => {
                        tracing::warn!("task.json changed while it was being claimed; running what it holds now");
                        newer
                    }
                    Ok(_) => {
                        tracing::warn!("task.json changed while it was being claimed, to a task with another id; running what was read");
                        task
                    }
                    Err(e) => {
                        tracing::warn!("task.json changed while it was being claimed, to something unreadable ({e}); running what was read");
                        task
                    }
                }
            }
            _ => task,
        };
        let task = self.ensure_id(task)?;
        tracing::debug!(
            "claimed in {}us (lock, read, rename)",
            looked.elapsed().as_micros()
        );
        let hold = Hold {
            key_lock,
            run_slot,
            // Whatever its file says: only a task claimed from queue/pending is queued.
            queued: false,
        };
        self.run_task(task, lock, hold, shutdown)
    }

    /// With an empty inbox: pull the best eligible task from the shared queue.
    fn poll_queue(&mut self, shutdown: &Receiver<()>) -> Result<Pickup> {
        let pending = self.opts.root.queue_pending();
        let any = fs::read_dir(&pending)
            .map(|mut d| {
                d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
            })
            .unwrap_or(false);
        if !any {
            return Ok(Pickup::Empty);
        }
        let (lock_dir, lock_opts) = (self.paths.lock_dir(), self.lock_opts);
        let take_lock = || match DirLock::try_acquire_reusable(&lock_dir, &lock_opts)? {
            Acquire::Acquired(l) => Ok(Some(l)),
            Acquire::Held(_) => Ok(None),
        };
        let queue::Claim::Taken(claim) =
            queue::claim_next(&self.opts.root, &self.paths, &self.config, take_lock)?
        else {
            return Ok(Pickup::Empty);
        };
        let lock = claim.slot_lock;
        // The move out of pending/ and into running.json must both survive a power loss.
        fsio::fsync_dir(&pending)?;
        fsio::fsync_dir(&self.paths.dir)?;
        let task = Task::from_bytes(&self.paths.running(), &claim.task_bytes)?;
        let task = self.ensure_id(task)?;
        let id = task.id.clone().expect("id ensured");
        if self.paths.result_for(&id).exists() {
            // A direct task of this slot used the same id: its result stays untouched.
            let reason = format!(
                "task id {id} was already used on worker {} (results/{id}.json exists)",
                self.opts.slot
            );
            queue::reject_in_hand(
                &self.opts.root,
                &self.paths,
                &format!("{id}.json"),
                &reason,
                Some(id),
            )?;
            release(lock);
            Hold {
                key_lock: claim.key_lock,
                run_slot: claim.run_slot,
                queued: true,
            }
            .release();
            return Ok(Pickup::Ran);
        }
        tracing::debug!("claimed queued task {id}");
        let hold = Hold {
            key_lock: claim.key_lock,
            run_slot: claim.run_slot,
            queued: true,
        };
        self.run_task(task, lock, hold, shutdown)
    }

    /// Finish, on their behalf, tasks left by workers that died for good: a slot with a
    /// `running.json` whose gate nobody holds. Exactly once: the gate admits one.
    fn recover_abandoned_slots(&self) {
        let client = Client::new(self.opts.root.clone());
        let Ok(slots) = client.list_workers() else {
            return;
        };
        for slot in slots.into_iter().filter(|s| *s != self.opts.slot) {
            let w = self.opts.root.worker(slot);
            if !w.running().exists() {
                continue;
            }
            // A worker restarted right after a crash recovers its own slot: leave the
            // slot to it unless its status has been silent for a while.
            let silent = fs::metadata(w.status())
                .and_then(|m| m.modified())
                .map(|t| t.elapsed().unwrap_or_default() >= ABANDONED_AFTER)
                .unwrap_or(true);
            if !silent {
                continue;
            }
            let Ok(_gate) = Gate::acquire(&w.worker_gate(), &format!("recovery of worker {slot}"))
            else {
                continue; // a live worker serves it, or another recoverer is at it
            };
            match recover_slot(&self.opts.root, slot, &self.lock_opts) {
                Ok(r) if !r.is_empty() => tracing::warn!("recovered abandoned worker {slot}: {r}"),
                Ok(_) => {}
                Err(e) => tracing::warn!("recovering abandoned worker {slot}: {e}"),
            }
        }
    }

    /// `Some(wait)` while an unparseable inbox file may still be mid-write.
    fn still_being_written(&self, inbox: &Path) -> Result<Option<Duration>> {
        let meta = fs::symlink_metadata(inbox).map_err(|e| Error::io("stat", inbox, e))?;
        let mtime = meta.modified().map_err(|e| Error::io("stat", inbox, e))?;
        let quiet_for = SystemTime::now().duration_since(mtime).unwrap_or_default();
        if quiet_for < self.opts.quiet_grace {
            let wait = self.opts.quiet_grace - quiet_for + Duration::from_millis(5);
            tracing::debug!(
                "{} does not parse yet; re-reading in {wait:?}",
                inbox.display()
            );
            Ok(Some(wait))
        } else {
            Ok(None)
        }
    }

    /// A task without an id gets one now, written into `running.json` so recovery knows it.
    fn ensure_id(&self, mut task: Task) -> Result<Task> {
        if task.id.is_none() {
            let id = TaskId::generate();
            let place = crate::ids::Place::Worker(self.opts.slot);
            crate::ids::claim(&self.opts.root, &id, place)?;
            task.id = Some(id);
            fsio::write_json(&self.paths.running(), &task, Durability::Durable)?;
        }
        Ok(task)
    }

    /// Move a bad inbox file to `rejected/` with a `.reason`, and answer it with an
    /// `error` result when its id could be read.
    fn reject(&self, inbox: &Path, reason: &str, id: Option<TaskId>) -> Result<()> {
        let dir = self.paths.rejected_dir();
        fsio::ensure_dir(&dir)?;
        let stamp = humantime::format_rfc3339_millis(SystemTime::now())
            .to_string()
            .replace(':', "");
        let name = match &id {
            Some(id) => format!("{stamp}-{id}.task.json"),
            None => format!("{stamp}-{}.task.json", fsio::nonce()),
        };
        let dest = dir.join(&name);
        // The answer first, so a crash part-way can never leave a readable id without
        // a result; then the reason, so whoever sees the inbox empty can read why.
        if let Some(id) = id {
            let mut result =
                TaskResult::failed(id, Outcome::Rejected, format!("rejected: {reason}"));
            result.worker = Some(self.opts.slot.0);
            // A reused id must not overwrite the earlier task's kept result, nor leave
            // one here for a task that went elsewhere.
            let keep_copy = !self.paths.result_for(&result.task_id).exists()
                && crate::ids::lookup(&self.opts.root, &result.task_id).is_ok_and(|p| {
                    p.is_none_or(|p| p == crate::ids::Place::Worker(self.opts.slot))
                });
            publish_result(&self.paths, &result, keep_copy)?;
            let mut st = Status::new(WorkerState::Error);
            st.task_id = Some(result.task_id.clone());
            if let Err(e) = self.publish_status(st) {
                tracing::warn!("publishing status for rejected task: {e}");
            }
        }
        let reason_line = format!("{}: {reason}\n", inbox.display());
        fsio::write_replace(
            &dir.join(format!("{name}.reason")),
            reason_line.as_bytes(),
            Durability::Durable,
        )?;
        fs::rename(inbox, &dest).map_err(|e| Error::io("move to rejected/", inbox, e))?;
        tracing::warn!(
            "rejected {}: {reason} (kept as {})",
            inbox.display(),
            dest.display()
        );
        Ok(())
    }

    /// Run a claimed task to its one result. `Pickup::Stop` if asked to shut down.
    fn run_task(
        &mut self,
        task: Task,
        mut lock: DirLock,
        mut hold: Hold,
        shutdown: &Receiver<()>,
    ) -> Result<Pickup> {
        let id = task.id.clone().expect("id ensured at claim");
        let slot = self.opts.slot;
        let started = SystemTime::now();
        let started_at = rfc3339(started);
        let clock = Instant::now();
        let attempt = task.attempt();

        if let Some(who) = self.cancel_request(&id, false) {
            tracing::info!("task {id} was cancelled before it started ({who})");
            let mut r = TaskResult::failed(id.clone(), Outcome::Cancelled, "cancelled");
            self.stamp(&mut r, &started_at, clock, attempt);
            self.finish(&r, lock, hold)?;
            return Ok(Pickup::Ran);
        }

        let context = task
            .context
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_else(|| "null".into());
        let resumed;
        let command = match task.resume.as_deref() {
            None => &self.opts.agent,
            Some(session) => match self.opts.preset.resume_args(session) {
                Some(extra) => {
                    let mut c = self.opts.agent.clone();
                    c.args.extend(extra);
                    resumed = c;
                    &resumed
                }
                None => {
                    let why = format!(
                        "task asks to resume session {session}, but the {} preset cannot resume",
                        self.opts.preset
                    );
                    let mut r = TaskResult::failed(id.clone(), Outcome::Rejected, why);
                    self.stamp(&mut r, &started_at, clock, attempt);
                    self.finish(&r, lock, hold)?;
                    return Ok(Pickup::Ran);
                }
            },
        };
        let launch = Launch {
            command,
            program_path: self.agent_path.as_deref(),
            cwd: &self.opts.project_dir,
            env: vec![
                (ENV_HOME, self.opts.root.path().display().to_string()),
                (ENV_WORKER, slot.to_string()),
                ("CONDUCTOR_TASK_ID", id.to_string()),
                ("CONDUCTOR_CONTEXT", context),
            ],
            prompt: task.prompt.clone(),
            output_log: &self.paths.output_log(),
            inline_cap: self.opts.inline_output,
        };
        let mut agent = match Agent::spawn(launch) {
            Ok(a) => a,
            Err(e) => {
                let mut r = TaskResult::failed(id.clone(), Outcome::Failure, e.to_string());
                self.stamp(&mut r, &started_at, clock, attempt);
                self.finish(&r, lock, hold)?;
                return Ok(Pickup::Ran);
            }
        };
        tracing::info!(
            "task {id} started: agent pid {} ({}us after claim)",
            agent.pid(),
            clock.elapsed().as_micros()
        );

        let mut status = Status::new(WorkerState::Working);
        status.task_id = Some(id.clone());
        status.started_at = Some(started_at.clone());
        status.heartbeat_at = Some(started_at.clone());
        status.agent_pid = Some(agent.pid());
        status.agent_start_time = agent.start_time();
        status.attempt = Some(attempt);
        status.output_bytes = Some(0);
        if let Err(e) = self.publish_status(status.clone()) {
            tracing::warn!("publishing the working status: {e}");
        }

        let timeout = task
            .timeout_secs
            .map(Duration::from_secs)
            .or(self.opts.timeout)
            .or(self.config.timeout_secs.map(Duration::from_secs));
        // A timeout too large to represent is no timeout.
        let deadline = timeout.and_then(|t| clock.checked_add(t));
        let mut next_beat = Instant::now() + self.opts.heartbeat;
        let stop = loop {
            let now = Instant::now();
            if let Some(d) = deadline {
                if now >= d {
                    break Some(Stop::Timeout(timeout.expect("deadline has a timeout")));
                }
            }
            if now >= next_beat {
                // No event follows a `touch cancel`: look again on every beat.
                if let Some(who) = self.cancel_request(&id, true) {
                    tracing::info!("task {id} cancelled ({who})");
                    break Some(Stop::Cancelled);
                }
                status.heartbeat_at = Some(now_rfc3339());
                status.timestamp = now_rfc3339();
                status.output_bytes = Some(agent.output_bytes());
                if let Err(e) = self.publish_status(status.clone()) {
                    tracing::warn!("heartbeat: {e}");
                }
                // Other hosts judge every lock we hold by its heartbeat.
                for l in [
                    Some(&mut lock),
                    hold.key_lock.as_mut(),
                    hold.run_slot.as_mut(),
                ]
                .into_iter()
                .flatten()
                {
                    if let Err(e) = l.heartbeat() {
                        tracing::warn!("renewing lock: {e}");
                    }
                }
                next_beat = now + self.opts.heartbeat;
            }
            let mut wait = next_beat.saturating_duration_since(now);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            select! {
                recv(agent.exit_channel()) -> _ => {
                    agent.note_exit();
                    // A service manager often signals the whole group at once: the agent
                    // dying of that same stop request is an interruption, not a failure.
                    if !shutdown.is_empty() {
                        break Some(Stop::Interrupted(format!(
                            "interrupted: worker {slot} (pid {}) was asked to stop",
                            std::process::id()
                        )));
                    }
                    break None;
                }
                recv(self.wake) -> _ => {
                    if let Some(who) = self.cancel_request(&id, true) {
                        tracing::info!("task {id} cancelled ({who})");
                        break Some(Stop::Cancelled);
                    }
                }
                recv(shutdown) -> _ => {
                    break Some(Stop::Interrupted(format!(
                        "interrupted: worker {slot} (pid {}) was asked to stop",
                        std::process::id()
                    )));
                }
                default(wait) => {}
            }
        };
        if stop.is_some() {
            agent.stop(self.opts.kill_grace);
        }
        let shutting_down = matches!(stop, Some(Stop::Interrupted(_)));
        let out = agent.finish();
        let mut result = self.build_result(&id, &out, stop)?;
        self.opts.preset.interpret(&mut result);
        self.stamp(&mut result, &started_at, clock, attempt);
        self.finish(&result, lock, hold)?;
        Ok(if shutting_down {
            Pickup::Stop
        } else {
            Pickup::Ran
        })
    }

    fn stamp(&self, r: &mut TaskResult, started_at: &str, clock: Instant, attempt: u32) {
        r.started_at = Some(started_at.to_string());
        r.finished_at = Some(now_rfc3339());
        r.timestamp = r.finished_at.clone().unwrap_or_default();
        r.duration_ms = Some(clock.elapsed().as_millis() as u64);
        r.attempt = Some(attempt);
        r.worker = Some(self.opts.slot.0);
    }

    /// A `cancel` file naming `id` asks to cancel it; one naming another task is stale
    /// and removed. An empty one means "whatever is running" — only once `id` runs, so a
    /// stray `touch cancel` while idle cannot cancel the next task before it starts.
    fn cancel_request(&self, id: &TaskId, running: bool) -> Option<String> {
        let path = self.paths.cancel();
        let bytes = match fsio::read_bounded(&path, SMALL_FILE_LIMIT) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                // Never fatal: a bad cancel file must not stop the worker.
                tracing::warn!("ignoring unreadable cancel file: {e}");
                return None;
            }
        };
        let named = String::from_utf8_lossy(&bytes).trim().to_string();
        // `echo ID > cancel` passes through an empty file: an empty one means "cancel
        // whatever runs" only once it has stayed empty a moment (`touch cancel`).
        let left_empty = named.is_empty()
            && fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() >= EMPTY_CANCEL_QUIET);
        if (left_empty && running) || named == id.to_string() {
            // Consumed now, so it cannot cancel a later task.
            if let Err(e) = fsio::remove_file_if_exists(&path) {
                tracing::warn!("{e}");
            }
            Some(format!("{} names it", path.display()))
        } else {
            // An empty one found before the task starts predates it. One naming another
            // task may be for a task still waiting in the inbox: leave it for that one,
            // unless that task has already finished (then it is stale).
            let stale = (named.is_empty() && !running)
                || TaskId::parse(&named).is_ok_and(|other| self.paths.result_for(&other).exists());
            if stale {
                tracing::info!("removing stale cancel file {named:?}");
                let _ = fsio::remove_file_if_exists(&path);
            }
            None
        }
    }

    fn build_result(
        &self,
        id: &TaskId,
        out: &AgentOutput,
        stop: Option<Stop>,
    ) -> Result<TaskResult> {
        use std::os::unix::process::ExitStatusExt;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let exit_code = out.status.code();
        let signal = out.status.signal();
        let (outcome, error) = match stop {
            Some(Stop::Timeout(t)) => (
                Outcome::Timeout,
                Some(format!("timed out after {}s", t.as_secs())),
            ),
            Some(Stop::Cancelled) => (Outcome::Cancelled, Some("cancelled".to_string())),
            Some(Stop::Interrupted(why)) => (Outcome::Interrupted, Some(why)),
            None if out.status.success() => (Outcome::Success, None),
            None => {
                let how = match (exit_code, signal) {
                    (Some(c), _) => format!("exit status {c}"),
                    (None, Some(s)) => format!(
                        "killed by signal {s} ({})",
                        Signal::try_from(s).map(|s| s.as_str()).unwrap_or("unknown")
                    ),
                    _ => "agent failed".to_string(),
                };
                let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
                (
                    Outcome::Failure,
                    Some(match last {
                        Some(line) => format!("{how}: {}", line.trim()),
                        None => how,
                    }),
                )
            }
        };
        let mut r = TaskResult::failed(id.clone(), outcome, String::new());
        r.success = outcome == Outcome::Success;
        r.error = error;
        r.output = String::from_utf8_lossy(&out.stdout).into_owned();
        r.exit_code = exit_code;
        r.signal = signal;
        r.stderr = Some(stderr);
        // The run's stdout log moves beside its task record (renaming frees nothing,
        // unlike truncating it for the next run would).
        let log = self.paths.task_log(id);
        if let Err(e) = fsio::ensure_dir(&self.paths.tasks_dir()).and_then(|()| {
            fs::rename(self.paths.output_log(), &log)
                .map_err(|e| Error::io("keep output log as", &log, e))
        }) {
            tracing::warn!("{e}");
        }
        if out.stdout_truncated {
            r.output_truncated = true;
            r.output_file = Some(log.display().to_string());
            tracing::info!(
                "task {id}: {} bytes of output, {} kept inline, all in {}",
                out.stdout_total,
                out.stdout.len(),
                log.display()
            );
        }
        Ok(r)
    }

    /// Publish the result, then status, then drop `running.json`, then the lock.
    fn finish(&self, result: &TaskResult, lock: DirLock, hold: Hold) -> Result<()> {
        record_task(&self.paths, &result.task_id)?;
        publish_result(&self.paths, result, true)?;
        if hold.queued {
            queue::publish_queue_result(
                &self.opts.root,
                &self.paths.result_for(&result.task_id),
                &result.task_id,
            )?;
        }
        let mut st = Status::new(if result.success {
            WorkerState::Done
        } else {
            WorkerState::Error
        });
        st.task_id = Some(result.task_id.clone());
        st.attempt = result.attempt;
        // The result is durable: a status that cannot be written now must not stop
        // the worker (recovery at the next start would otherwise redo nothing useful).
        if let Err(e) = self.publish_status(st) {
            tracing::warn!("publishing status after task {}: {e}", result.task_id);
        }
        retire_running(&self.paths, &result.task_id)?;
        tracing::info!(
            "task {} finished: {}",
            result.task_id,
            result.error.as_deref().unwrap_or("success")
        );
        release(lock);
        hold.release();
        // Ready an empty output.log now, off the next pickup's path.
        if !self.paths.output_log().exists() {
            if let Err(e) = fsio::overwrite_padded(&self.paths.output_log(), b"") {
                tracing::warn!("{e}");
            }
        }
        Ok(())
    }
}

/// When config.json last changed (None while it does not exist).
fn config_stamp(root: &Root) -> Option<(SystemTime, u64)> {
    let m = fs::metadata(root.config_file()).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The shared locks a task holds besides the slot's own `.lock`.
struct Hold {
    key_lock: Option<DirLock>,
    run_slot: Option<DirLock>,
    /// Came from the shared queue: its result is also linked into `queue/results/`.
    queued: bool,
}

impl Hold {
    fn release(self) {
        for l in [self.key_lock, self.run_slot].into_iter().flatten() {
            release(l);
        }
    }
}

/// Release a slot lock; one that is gone or taken over is reported, not fatal: the
/// task it guarded is finished either way.
pub(crate) fn release(lock: DirLock) {
    if let Err(e) = lock.release() {
        tracing::warn!("{e}");
    }
}

enum Pickup {
    /// A task was run or rejected: look again at once.
    Ran,
    /// A task was interrupted by a shutdown request: stop serving.
    Stop,
    Empty,
    /// Something is there but not ready (mid-write, locked): look again then.
    NotYet(Instant),
}

/// Link `running.json` as `tasks/<id>.json`, before its result is published, so the
/// record is there the moment anyone sees the result (`conductor retry` right away).
/// A link: no copy, and later removing `running.json` frees nothing.
pub(crate) fn record_task(paths: &WorkerPaths, id: &TaskId) -> Result<()> {
    let record = paths.task_record(id);
    let link = || fs::hard_link(paths.running(), &record);
    match link() {
        Ok(()) => Ok(()),
        // Already recorded (a crash after linking, or a reused id's earlier run).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound && paths.running().exists() => {
            // tasks/ is missing (a slot made by an older conductor): make it, once.
            fsio::ensure_dir(&paths.tasks_dir())?;
            link().map_err(|e| Error::io("record task as", record, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("record task as", record, e)),
    }
}

/// The slot no longer has a task in hand: `running.json` goes (its record stays as
/// `tasks/<id>.json`).
pub(crate) fn retire_running(paths: &WorkerPaths, id: &TaskId) -> Result<()> {
    record_task(paths, id)?;
    fsio::remove_file_if_exists(&paths.running()).map(drop)
}

/// `results/<id>.json` (durable), then `result.json`. With `keep_copy` false (a reused
/// id) only `result.json` is written, so the earlier task's record stays intact.
pub(crate) fn publish_result(
    paths: &WorkerPaths,
    result: &TaskResult,
    keep_copy: bool,
) -> Result<()> {
    let bytes = fsio::to_json_bytes(result);
    if !keep_copy {
        return fsio::write_replace(&paths.result(), &bytes, Durability::Durable);
    }
    fsio::ensure_dir(&paths.results_dir())?;
    let kept = paths.result_for(&result.task_id);
    fsio::write_replace(&kept, &bytes, Durability::Durable)?;
    // result.json is the same file under the name original clients read: a hard link
    // costs no second write and no fsync (results/<id>.json is the durable record).
    fsio::link_replace(&kept, &paths.result())
}
