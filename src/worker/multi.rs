//! Many slots served by one process: one watcher, a thread only for a slot with work.
//!
//! Each slot keeps its own gate, lock and files exactly as a single-slot worker's
//! ([`SlotServer`]), so both kinds interoperate on one root and refuse each other's
//! slots. The main thread owns the idle slots; a slot with work is handed to a thread
//! that runs [`SlotServer::look_if_room`] until it finds nothing, then hands it back.

pub(super) mod nproc;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};

use super::slot_watch::{listed, listed_dirs, read_while_waiting, shared_change, shared_dirs};
use super::options::WorkerOptions;
use super::slot_server::{check_startable, config_stamp, Pickup, Shared, SlotServer};
use super::sweep_election::SweepElection;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::layout::{Slot, SlotList, WorkerPaths};
use crate::recovery::RecoveryReport;
use crate::watch::{DirWatcher, OnChange};

/// At most this many idle slots are sent to look at the queue per change seen there;
/// each keeps pulling tasks until the queue has none for it, and every claim is a
/// change, so more follow while work remains (no herd of lookers per event).
const QUEUE_LOOKERS_PER_CHANGE: usize = 16;

/// What the watcher saw since the main thread last looked.
#[derive(Default)]
struct Dirty {
    all: bool,
    shared: bool,
    slots: BTreeSet<usize>,
}

/// With native events, every slot's inbox is re-read only every this many rescan
/// intervals (10 s by default) instead of every one: events are reliable there (a lost
/// batch is reported as an overflow, which re-reads everything at once), so the re-read
/// is only a safety net, and at a thousand slots it was half the idle worker's CPU.
/// Polling watchers re-read at every interval. Sweeps and the lease check keep the
/// interval.
const NATIVE_RESCAN_TICKS: u32 = 5;

enum State {
    Idle(Box<SlotServer>),
    /// Given up: another host took its lease while we were away. Its gate is dropped
    /// and it is never looked at again.
    Retired,
    /// A thread has it: `wake` forwards its events (a cancel), `stop` a shutdown.
    Busy {
        wake: Sender<()>,
        stop: Sender<()>,
        /// [`MultiWorker::queue_changes`] when the thread started.
        queue_seen: u64,
    },
}

struct Entry {
    state: State,
    /// Look again then (something was not ready, or a look failed).
    retry_at: Option<Instant>,
}

/// A slot handed back by its thread, with what its last look came to.
type Done = (usize, Box<SlotServer>, Result<Pickup>);

/// A started many-slot worker: holds every slot's gate and one watcher.
pub struct MultiWorker {
    shared: Arc<Shared>,
    own: Vec<Slot>,
    entries: Vec<Entry>,
    dirty: Arc<Mutex<Dirty>>,
    wake: Receiver<()>,
    watcher: DirWatcher,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    recoveries: Vec<(Slot, RecoveryReport)>,
    sweep_election: SweepElection,
    seen_config: Option<(SystemTime, u64)>,
    /// How many queue changes the watcher has reported: a slot's thread that found
    /// nothing may have looked before the latest one.
    queue_changes: u64,
    /// Shutting down: no slot is handed to a new thread.
    stopping: bool,
}

impl MultiWorker {
    /// Take every slot's gate (refusing the whole start, and releasing what it took,
    /// if one is served already), arm one watcher, recover each slot, publish `idle`.
    pub fn start(mut opts: WorkerOptions, slots: &[Slot]) -> Result<MultiWorker> {
        let Some(&first) = slots.first() else {
            return Err(Error::NoSlots {
                purpose: "to serve",
            });
        };
        opts.slot = first;
        // Best effort here (the binaries reserve them first thing): before the gates.
        crate::agent::reserve_low_fds();
        let agent_path = Some(check_startable(&opts)?);
        raise_open_file_limit(slots.len());
        crate::trust::verify_root(&opts.root)?;
        crate::queue::init_root(&opts.root)?;
        let servers = slots
            .iter()
            .map(|&s| SlotServer::take(&opts.root, s, opts.preset_names()).map(Box::new))
            .collect::<Result<Vec<_>>>()?;
        let config = Config::load(&opts.root.config_file())?;
        crate::fsio::set_fsync_for_root(opts.root.path(), config.fsync());
        let lock_opts = config.lock_options();
        let dirty = Arc::new(Mutex::new(Dirty::default()));
        let (tx, wake) = bounded(1);
        let watcher = watch_slots(&opts, &servers, dirty.clone(), tx)?;
        // Once, before any slot's thread runs (it clears this process's own spares
        // too, which only a process with no lock being built may do) and before any
        // slot says `idle`: a client that saw `idle` finds dead holders' locks gone.
        crate::recovery::free_dead_shared_locks(&opts.root, &lock_opts)?;
        let mut recoveries = Vec::new();
        for s in &servers {
            let r = s.recover_and_announce(&lock_opts)?;
            if !r.is_empty() {
                recoveries.push((s.slot(), r));
            }
        }
        let (done_tx, done_rx) = unbounded();
        let sweep_election = SweepElection::new(&opts.root, opts.rescan);
        let seen_config = config_stamp(&opts.root);
        let shared = Arc::new(Shared {
            opts,
            config,
            lock_opts,
            agent_path,
            // A many-slot worker is always watched by its files.
            tell_owner: None,
        });
        let entries = servers
            .into_iter()
            .map(|s| Entry {
                state: State::Idle(s),
                retry_at: None,
            })
            .collect();
        Ok(MultiWorker {
            shared,
            own: slots.to_vec(),
            entries,
            dirty,
            wake,
            watcher,
            done_tx,
            done_rx,
            recoveries,
            sweep_election,
            seen_config,
            queue_changes: 0,
            stopping: false,
        })
    }

    /// One line for the terminal: slots, root, project, agent and watcher.
    pub fn describe(&self) -> String {
        let opts = &self.shared.opts;
        format!(
            "conductor worker for {} slots ({}) (pid {}) serving {} in {} with agent `{}`, watching with {}",
            self.own.len(),
            SlotList(self.own.clone()),
            std::process::id(),
            opts.root.workers_dir().display(),
            opts.project_dir.display(),
            opts.agent,
            self.watcher.kind()
        )
    }

    /// What recovery finished at start, per slot (only slots where it did something).
    pub fn recoveries(&self) -> &[(Slot, RecoveryReport)] {
        &self.recoveries
    }

    /// Serve every slot until `shutdown` fires; then stop every running agent (its task
    /// ends `interrupted`) and return once every slot is back.
    pub fn run(&mut self, shutdown: &Receiver<()>) -> Result<()> {
        // Callbacks still running when the worker stops are stopped with it.
        let _callbacks = super::callback::StopOnDrop;
        self.look_everywhere();
        let mut next_tick = Instant::now() + self.shared.opts.rescan;
        let mut ticks: u32 = 0;
        let root_id = super::root_watch::RootIdentity::of(&self.shared.opts.root);
        let mut served = Ok(());
        loop {
            let wait = self
                .next_retry()
                .map_or(next_tick, |r| r.min(next_tick))
                .saturating_duration_since(Instant::now());
            select! {
                recv(self.wake) -> _ => self.take_dirty(),
                recv(self.done_rx) -> done => {
                    if let Ok(done) = done {
                        self.hand_back(done);
                    }
                }
                recv(shutdown) -> _ => break,
                default(wait) => {}
            }
            self.retry_due();
            if Instant::now() >= next_tick {
                if let Err(gone) = root_id.check() {
                    served = Err(gone);
                    break;
                }
                if self.retire_lost_slots() {
                    return Err(Error::GateHeld {
                        role: format!("worker {}", SlotList(self.own.clone())),
                        holder: "other hosts took every slot's lease while this worker \
                                 was paused"
                            .into(),
                        path: self.shared.opts.root.workers_dir(),
                    });
                }
                self.follow_config();
                let lock_opts = self.shared.lock_opts;
                self.sweep_election
                    .sweep_if_due(&self.shared.opts.root, &self.own, &lock_opts);
                ticks = ticks.wrapping_add(1);
                if self.watcher.is_polling() || ticks.is_multiple_of(NATIVE_RESCAN_TICKS) {
                    self.look_everywhere();
                }
                next_tick = Instant::now() + self.shared.opts.rescan;
            }
        }
        // Running agents are stopped either way (their tasks end `interrupted`).
        self.stop_all();
        served
    }

    /// Stop serving each idle slot whose lease another host took (we were paused past
    /// it, and that host's worker serves the slot now), as a single-slot worker exits.
    /// Returns whether no slot is left. A busy slot is looked at once it is back.
    fn retire_lost_slots(&mut self) -> bool {
        for e in &mut self.entries {
            if let State::Idle(s) = &e.state {
                if s.lease_lost() {
                    settle_before_leaving(&self.shared, s);
                    tracing::error!(
                        "worker {}: another host took its lease while this worker was \
                         paused; no longer serving it",
                        s.slot()
                    );
                    e.state = State::Retired;
                }
            }
        }
        self.entries
            .iter()
            .all(|e| matches!(e.state, State::Retired))
    }

    /// Every idle slot that may have work, then the queue: at start and on each rescan
    /// (events are never trusted to arrive).
    fn look_everywhere(&mut self) {
        for i in 0..self.entries.len() {
            self.look_at(i);
        }
        self.look_at_queue();
    }

    /// Act on what the watcher saw: slots with inbox or cancel changes, the queue.
    fn take_dirty(&mut self) {
        let d = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()));
        if d.all {
            return self.look_everywhere();
        }
        for i in d.slots {
            match &self.entries[i].state {
                State::Busy { wake, .. } => {
                    let _ = wake.try_send(());
                }
                State::Idle(_) => self.look_at(i),
                State::Retired => {}
            }
        }
        if d.shared {
            self.queue_changes += 1;
            self.look_at_queue();
        }
    }

    /// Hand slot `i` to a thread if it may have work in its own files.
    fn look_at(&mut self, i: usize) {
        if let State::Idle(s) = &self.entries[i].state {
            if s.may_have_work() {
                self.launch(i);
            }
        }
    }

    /// Send idle slots to the queue, as many as it has entries (bounded per change).
    fn look_at_queue(&mut self) {
        let pending = self.shared.opts.root.queue_pending();
        let waiting = std::fs::read_dir(&pending)
            .map(|d| {
                // Only up to what is used: every claim is itself a queue change.
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .take(QUEUE_LOOKERS_PER_CHANGE)
                    .count()
            })
            .unwrap_or(0);
        let now = Instant::now();
        let idle: Vec<usize> = (0..self.entries.len())
            .filter(|&i| {
                let e = &self.entries[i];
                matches!(e.state, State::Idle(_)) && e.retry_at.is_none_or(|t| t <= now)
            })
            .take(waiting.min(QUEUE_LOOKERS_PER_CHANGE))
            .collect();
        for i in idle {
            self.launch(i);
        }
    }

    /// Slots whose retry time has come.
    fn retry_due(&mut self) {
        let now = Instant::now();
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if matches!(e.state, State::Idle(_)) && e.retry_at.is_some_and(|t| t <= now) {
                self.launch(i);
            }
        }
    }

    fn next_retry(&self) -> Option<Instant> {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, State::Idle(_)))
            .filter_map(|e| e.retry_at)
            .min()
    }

    /// Give idle slot `i` to a new thread that looks until it finds nothing.
    fn launch(&mut self, i: usize) {
        if self.stopping {
            return;
        }
        if !nproc::may_start() {
            // Out of processes: the slot waits until busy ones come back.
            self.entries[i].retry_at = Some(Instant::now() + nproc::PUT_BACK_PAUSE);
            return;
        }
        let entry = &mut self.entries[i];
        let (wake_tx, wake_rx) = bounded(1);
        let (stop_tx, stop_rx) = bounded(1);
        let busy = State::Busy {
            wake: wake_tx,
            stop: stop_tx,
            queue_seen: self.queue_changes,
        };
        let State::Idle(server) = std::mem::replace(&mut entry.state, busy) else {
            return;
        };
        entry.retry_at = None;
        // The slot goes through a channel so that it comes back if the thread cannot
        // be started (a closure that is never run would drop it, and its gate).
        let (give, get) = bounded(1);
        let _ = give.send(server);
        let back = get.clone();
        let (shared, done) = (self.shared.clone(), self.done_tx.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("slot-{i}"))
            .spawn(move || {
                let Ok(mut server) = get.recv() else { return };
                let result = loop {
                    if !stop_rx.is_empty() {
                        // The last task's owed commit is paid and told before stopping.
                        break server
                            .settle_owed(&shared, false, false)
                            .map(|_| Pickup::Stop);
                    }
                    match server.look_if_room(&shared, &wake_rx, &stop_rx) {
                        Ok(Pickup::Ran) => continue,
                        other => break other,
                    }
                };
                let _ = done.send((i, server, result));
            });
        if spawned.is_ok() {
            nproc::slot_started();
        }
        if let Err(e) = spawned {
            if e.raw_os_error() == Some(nix::libc::EAGAIN) {
                nproc::ran_short();
            }
            tracing::warn!("cannot start a thread for a slot ({e}); will retry");
            if let Ok(server) = back.try_recv() {
                self.entries[i] = Entry {
                    state: State::Idle(server),
                    retry_at: Some(Instant::now() + self.shared.opts.rescan),
                };
            }
        }
    }

    /// A slot's thread ended: the slot is idle again, to be looked at when due.
    /// A change that came while the thread was between its last look and now was
    /// forwarded to a thread that no longer listens: look again for it (unless the
    /// thread said when to).
    fn hand_back(&mut self, (i, server, result): Done) {
        nproc::slot_came_back(self.entries.len());
        let queue_seen = match &self.entries[i].state {
            State::Busy { queue_seen, .. } => *queue_seen,
            State::Idle(_) | State::Retired => self.queue_changes,
        };
        let (retry_at, found_nothing) = match result {
            Ok(Pickup::NotYet(at) | Pickup::Deferred(at)) => (Some(at), false),
            Ok(Pickup::Empty) => (None, true),
            Ok(_) => (None, false),
            Err(e) => {
                tracing::warn!("worker {}: {e}; will look again", server.slot());
                (Some(Instant::now() + self.shared.opts.rescan), false)
            }
        };
        self.entries[i] = Entry {
            state: State::Idle(server),
            retry_at,
        };
        if found_nothing {
            self.look_at(i);
            if queue_seen != self.queue_changes {
                self.look_at_queue();
            }
        }
    }

    /// Ask every slot's thread to stop (their agents are stopped, their tasks end
    /// `interrupted`) and wait until all are back.
    fn stop_all(&mut self) {
        self.stopping = true;
        let mut out = 0;
        for e in &self.entries {
            if let State::Busy { stop, .. } = &e.state {
                let _ = stop.try_send(());
                out += 1;
            }
        }
        while out > 0 {
            let Ok(done) = self.done_rx.recv() else { break };
            self.hand_back(done);
            out -= 1;
        }
        // A slot within its linger still owes its last result's commit, and its
        // callback waits on that commit: paid now, or the callback never starts.
        for e in &self.entries {
            if let State::Idle(s) = &e.state {
                settle_before_leaving(&self.shared, s);
            }
        }
    }

    /// config.json may change while we run: threads started from now on see the new one.
    fn follow_config(&mut self) {
        let stamp = config_stamp(&self.shared.opts.root);
        if stamp == self.seen_config {
            return;
        }
        self.seen_config = stamp;
        match Config::load(&self.shared.opts.root.config_file()) {
            Ok(config) => {
                tracing::info!("config.json changed; reloaded");
                let old = &self.shared;
                self.shared = Arc::new(Shared {
                    opts: old.opts.clone(),
                    lock_opts: config.lock_options(),
                    config,
                    agent_path: old.agent_path.clone(),
                    tell_owner: None,
                });
            }
            Err(e) => {
                tracing::warn!("config.json changed but cannot be read ({e}); keeping the old one")
            }
        }
    }
}

/// Pay an idle slot's owed commit and start its callback before the slot is let go;
/// a failure is logged (the result stays untold, as recovery finds it).
fn settle_before_leaving(shared: &Shared, s: &SlotServer) {
    if let Err(e) = s.settle_owed(shared, false, false) {
        tracing::error!("worker {}: committing its last result: {e}", s.slot());
    }
}

/// A gate descriptor per slot and up to six per running agent (its pipes, its log, its
/// pidfd, a long prompt's stdin writer) must fit under the soft open-file limit, often
/// 1024: raise it, up to the hard limit, if short.
fn raise_open_file_limit(slots: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let needed = (slots as u64) * 7 + 64;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= needed {
        return;
    }
    let want = needed.min(hard);
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
        tracing::warn!("cannot raise the open-file limit from {soft} to {want}: {e}");
    }
    if want < needed {
        tracing::warn!(
            "the open-file limit ({hard}) may be short for {slots} slots with every agent \
             running (about {needed} descriptors); raise it (ulimit -n) if spawns fail"
        );
    }
}

/// One watcher for every slot: a change is noted against its slot (inbox, cancel) or
/// the queue, and the main thread woken.
fn watch_slots(
    opts: &WorkerOptions,
    servers: &[Box<SlotServer>],
    dirty: Arc<Mutex<Dirty>>,
    wake: Sender<()>,
) -> Result<DirWatcher> {
    let shared = shared_dirs(&opts.root);
    let slot_of: HashMap<PathBuf, usize> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.paths.dir.clone(), i))
        .collect();
    let shared_list = shared.clone();
    let paused = opts.root.paused_dir();
    let on_change: OnChange = Arc::new(move |p: Option<&Path>| {
        {
            let mut d = dirty.lock().unwrap_or_else(|e| e.into_inner());
            match p {
                None => d.all = true,
                // A resume may free any slot's inbox task, not only queued ones.
                Some(p) if p.parent() == Some(paused.as_path()) => d.all = true,
                Some(p) if shared_change(&shared_list, p) => d.shared = true,
                Some(p) => {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    let slot = p.parent().and_then(|dir| slot_of.get(dir));
                    match slot {
                        Some(&i) if WorkerPaths::WAKE_NAMES.contains(&name) => {
                            d.slots.insert(i);
                        }
                        _ => return,
                    }
                }
            }
        }
        let _ = wake.try_send(());
    });
    let inboxes: Vec<PathBuf> = servers.iter().map(|s| s.paths.dir.clone()).collect();
    let mut polled: Vec<PathBuf> = servers.iter().flat_map(|s| s.paths.wake_files()).collect();
    polled.extend(shared.iter().cloned());
    // Only the queue is read first (on GlusterFS), whatever the number of slots, and
    // the locks and pauses while it holds a task.
    let (always, while_waiting) = (listed_dirs(&opts.root), read_while_waiting(&opts.root));
    DirWatcher::watch_changes_and_inboxes(
        &shared,
        &inboxes,
        &polled,
        listed(&always, &while_waiting),
        opts.watch,
        on_change,
    )
}
