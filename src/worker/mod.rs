//! The worker daemon: serves a slot — event-driven pickup, agent runs, results.
//!
//! One verb per file: [`inbox`] reads the inbox into a state and quarantines what is bad,
//! [`admit`] takes the locks a task needs, [`claim`] makes the task ours (from the inbox
//! or the shared queue), [`supervise`] runs the agent to its result, and
//! [`crate::ledger`] ends the task. [`Worker`] is the process around them: its watcher,
//! its shutdown channel and its loop. A slot's own state ([`SlotServer`]) and what
//! every slot of the process shares ([`Shared`]) are kept apart ([`slot_server`]):
//! [`MultiWorker`] serves many slots from one process ([`multi`]); [`sweep_election`]
//! elects who sweeps the root.

mod admit;
pub mod approval;
mod callback;
mod cancel;
mod claim;
mod dirs_watch;
mod fence;
mod inbox;
mod inline;
mod kept_lock;
mod kept_swap;
mod multi;
mod options;
mod owed;
mod root_watch;
mod shared_seen;
mod slot_server;
mod slot_watch;
mod space;
mod status;
mod supervise;
mod sweep_election;
mod worktree;

pub use multi::MultiWorker;
pub use options::WorkerOptions;

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver};

use crate::config::Config;
use crate::dirlock::{self, LockOptions};
use crate::error::{Error, Result};
use crate::fsio;
use crate::gate::Gate;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{Status, WorkerState};
use crate::watch::{DirWatcher, WatcherKind};
use shared_seen::{SharedNews, SharedSeen};
use slot_server::{check_startable, config_stamp, Pickup, Shared, SlotServer};
use slot_watch::{owner_out, owner_pipes, watch_slot};

pub use crate::recovery::{recover_abandoned, recover_slot, RecoveryReport};

/// The first wait of a worker that could not start for want of space.
pub const FULL_DISK_FIRST_BACKOFF: Duration = space::FIRST_BACKOFF;

/// The next wait after `current` for space to return.
pub fn full_disk_backoff(current: Duration) -> Duration {
    space::next_backoff(current)
}

impl SlotServer {
    /// Take the slot's gate and create its directories. Its status is written once,
    /// when the slot is announced (a status written here too would be replaced at once).
    fn take(root: &Root, slot: Slot, presets: Vec<String>) -> Result<SlotServer> {
        let paths = root.worker(slot);
        fsio::ensure_dir(&paths.dir)?;
        let gate = acquire_worker_gate(&paths, slot)?;
        paths.create_dirs()?;
        let board = status::StatusBoard::new(&paths, presets);
        Ok(SlotServer {
            root: root.clone(),
            paths,
            worker_gate: gate,
            board,
            disk_full: None,
            backoff: space::FIRST_BACKOFF,
            inline: None,
            shared_seen: SharedSeen::default(),
            kept_lock: slot_server::KeptLock::default(),
            owed: slot_server::Owed::default(),
            running_gone: Default::default(),
            dirs_check: dirs_watch::DirsCheck::each(),
        })
    }

    /// Recover what a dead predecessor left, then publish `idle` (or keep a
    /// just-recovered task's end).
    fn recover_and_announce(&self, lock_opts: &LockOptions) -> Result<RecoveryReport> {
        let recovery = recover_slot(&self.root, self.slot(), lock_opts)?;
        dirlock::clear_spares(&self.paths.lock_dir())?;
        announce_ready(self, &recovery)?;
        Ok(recovery)
    }

    /// Whether a look could find work: an inbox, a task left in hand, a full disk to
    /// look at again.
    fn may_have_work(&self) -> bool {
        self.disk_full.is_some()
            || std::fs::symlink_metadata(self.paths.task()).is_ok()
            || std::fs::symlink_metadata(self.paths.running()).is_ok()
    }
}

/// A started worker: holds its slot's gate and watcher. Run it with [`Worker::run`].
pub struct Worker {
    shared: Shared,
    slot: SlotServer,
    /// `None` when the slot's watcher is read inline ([`SlotServer::inline`]).
    watcher: Option<DirWatcher>,
    wake: Receiver<()>,
    recovery: RecoveryReport,
    sweep_election: sweep_election::SweepElection,
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
                    return Err(crate::recovery::look_at_refused_slot(paths, e));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl Worker {
    /// Take the slot's gate, create the slot, recover what a dead predecessor left,
    /// publish `idle` and arm the watcher.
    pub fn start(opts: WorkerOptions) -> Result<Worker> {
        // Best effort here (the binaries reserve them first thing): before the gate.
        crate::agent::reserve_low_fds();
        let agent_path = Some(check_startable(&opts)?);
        crate::trust::verify_root(&opts.root)?;
        let slot = SlotServer::take(&opts.root, opts.slot, opts.preset_names())?;
        slot.board.keep_dir_open();
        crate::queue::init_root(&opts.root)?;
        let config = Config::load(&opts.root.config_file())?;
        crate::fsio::set_fsync_for_root(opts.root.path(), config.fsync());
        let lock_opts = config.lock_options();
        let news = SharedNews::default();
        let (watcher, inline, wake) = if opts.wake_pipes {
            owner_pipes(&slot.paths)?
        } else {
            watch_slot(&opts.root, &slot.paths, opts.watch, news.clone())?
        };
        let tell_owner = if opts.tells_owner() {
            Some(owner_out(&slot.paths)?)
        } else {
            None
        };
        let mut slot = slot;
        // One slot in this process: its claims' directory check is watched — unless its
        // owner wakes it by pipe (`conductor run`'s private root), where it holds no
        // inotify instance at all (closing one costs ~20 ms at each worker's exit).
        if !opts.wake_pipes {
            slot.dirs_check = dirs_watch::DirsCheck::watched();
        }
        if inline.is_some() {
            // Read by this thread (at each wait, and at the start of each look), the
            // watcher has told every change to the shared directories before a look
            // decides: a silent one leaves the last reading. (The owner's pipe tells
            // none: then it is the reading's age alone.)
            slot.shared_seen = SharedSeen::kept_while_silent(news);
        }
        slot.inline = inline.map(inline::InlineWait::new);
        // Before `idle` is announced: whoever saw `idle` finds dead holders' locks gone.
        crate::recovery::free_dead_shared_locks(&opts.root, &lock_opts)?;
        let recovery = slot.recover_and_announce(&lock_opts)?;
        let sweep_election = sweep_election::SweepElection::new(&opts.root, opts.rescan);
        let shared = Shared {
            opts,
            config,
            lock_opts,
            agent_path,
            tell_owner,
        };
        Ok(Worker {
            shared,
            slot,
            watcher,
            wake,
            recovery,
            sweep_election,
        })
    }

    /// One line for the terminal: slot, root, project, agent and watcher.
    pub fn describe(&self) -> String {
        let opts = &self.shared.opts;
        format!(
            "conductor worker {} (pid {}) serving {} in {} with agent `{}`, watching with {}",
            opts.slot,
            std::process::id(),
            self.slot.paths.dir.display(),
            opts.project_dir.display(),
            opts.agent,
            if opts.wake_pipes {
                "its owner's pipe".to_string()
            } else {
                self.watcher
                    .as_ref()
                    .map_or(&WatcherKind::Native, DirWatcher::kind)
                    .to_string()
            }
        )
    }

    /// What starting this worker recovered from a previous one that died.
    pub(crate) fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Serve tasks until `shutdown` fires (or its sender is dropped).
    pub fn run(&mut self, shutdown: &Receiver<()>) -> Result<()> {
        // Callbacks still running when the worker stops are stopped with it.
        let _callbacks = callback::StopOnDrop;
        // Waits that poll descriptors learn of `shutdown` from a descriptor too.
        let slot_dir = self.slot.paths.dir.clone();
        if let Some(inline) = &mut self.slot.inline {
            inline.tell_stop_of(shutdown, &slot_dir)?;
        }
        let served = self.serve(shutdown);
        // A result whose commit is still owed is paid and told before the worker goes.
        let served = served.and(self.slot.settle_owed(&self.shared, false, false).map(drop));
        // The signal's thread ends with the run.
        if let Some(inline) = &mut self.slot.inline {
            inline.forget_stop();
        }
        served
    }

    fn serve(&mut self, shutdown: &Receiver<()>) -> Result<()> {
        let mut next_recovery = Instant::now() + self.shared.opts.rescan;
        let mut seen_config = config_stamp(&self.shared.opts.root);
        let root_id = root_watch::RootIdentity::of(&self.shared.opts.root);
        loop {
            if shutdown.try_recv().is_ok() {
                return Ok(());
            }
            self.shared.follow_config(&mut seen_config);
            if self.slot.lease_lost() {
                // Another host took the slot while we were away (paused past the lease).
                return Err(Error::GateHeld {
                    role: format!("worker {}", self.slot.slot()),
                    holder: "another host took its lease while this worker was paused".into(),
                    path: self.slot.worker_gate.path().to_path_buf(),
                });
            }
            // Not only when idle long enough for a timeout: a stream of events (other
            // workers' locks) must not starve recovery of a dead worker's slot.
            if Instant::now() >= next_recovery {
                root_id.check()?;
                // A sweep can take seconds: the last task's lock is not held through it
                // (views would show the slot claimed), nor its result's commit owed.
                self.slot.release_kept_lock();
                self.slot.settle_owed(&self.shared, false, false)?;
                let own = [self.slot.slot()];
                if self.sweep_election.sweep_if_due(
                    &self.shared.opts.root,
                    &own,
                    &self.shared.lock_opts,
                ) {
                    // It may have ended another slot's task: news for an owner.
                    self.shared.tell_owner();
                }
                next_recovery = Instant::now() + self.shared.opts.rescan;
            }
            let retry_at = match self.slot.look_if_room(&self.shared, &self.wake, shutdown)? {
                Pickup::Ran => {
                    // A result whose commit is owed is told once it is paid.
                    if !self.slot.owed.pending() {
                        self.shared.tell_owner_result(self.slot.slot());
                    }
                    continue;
                }
                Pickup::Stop => {
                    // Stopping with a task just ended (interrupted): its result is out.
                    self.shared.tell_owner_result(self.slot.slot());
                    return Ok(());
                }
                Pickup::Empty => None,
                Pickup::NotYet(when) | Pickup::Deferred(when) => Some(when),
            };
            let mut wait = self.shared.idle_look();
            if let Some(at) = retry_at {
                wait = wait.min(at.saturating_duration_since(Instant::now()));
            }
            if let Some(inline) = &self.slot.inline {
                if inline.wait_for_wake(&self.wake, wait) == crate::watch::Waited::Stop {
                    // Taken, as the select below takes it.
                    let _ = shutdown.try_recv();
                    return Ok(());
                }
                continue;
            }
            select! {
                recv(self.wake) -> _ => {}
                recv(shutdown) -> _ => return Ok(()),
                default(wait) => {}
            }
        }
    }
}

impl SlotServer {
    /// Look for work unless the disk is too full to finish any. A write that fails for
    /// want of space pauses pickup instead of stopping the worker. A look that runs
    /// nothing lets go of the lock the last task kept: it is never held while we wait.
    fn look_if_room(
        &mut self,
        shared: &Shared,
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
    ) -> Result<Pickup> {
        self.owed_before_this_look();
        let looked = self.look_if_room_now(shared, wake, shutdown);
        let ran = matches!(looked, Ok(Pickup::Ran));
        let idle = matches!(
            looked,
            Ok(Pickup::Empty | Pickup::NotYet(_) | Pickup::Deferred(_))
        );
        // What the last task owes is paid by this look's claim, if it made one; else
        // now, or after a moment's wait for a next task (the look's own task's is left
        // to the next look).
        let settled = self.settle_owed(shared, ran, idle);
        if !ran {
            self.release_kept_lock();
        }
        let looked = looked?;
        Ok(match (looked, settled?) {
            (Pickup::Empty, Some(at)) => Pickup::NotYet(at),
            (Pickup::NotYet(b), Some(at)) => Pickup::NotYet(b.min(at)),
            (Pickup::Deferred(b), Some(at)) => Pickup::Deferred(b.min(at)),
            (looked, _) => looked,
        })
    }

    fn look_if_room_now(
        &mut self,
        shared: &Shared,
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
    ) -> Result<Pickup> {
        if let Some(problem) = space::too_full_to_accept(&self.paths.dir) {
            self.note_disk_full(problem);
            return Ok(Pickup::NotYet(Instant::now() + self.backoff));
        }
        if self.disk_full.take().is_some() {
            tracing::info!("space was freed: pickup resumes");
            self.backoff = space::FIRST_BACKOFF;
            let _ = self.board.publish(Status::new(WorkerState::Idle));
        }
        // Between looks nothing is in hand: a `running.json` now was left by a claim or
        // a recovery that a full disk cut short. Finish it first (we hold the slot's
        // gate); a new claim would rename over it and lose it.
        let gone = self.running_gone.swap(false, std::sync::atomic::Ordering::Relaxed);
        if !gone && self.paths.running().exists() && !self.finish_leftover(shared) {
            return Ok(Pickup::NotYet(Instant::now() + self.backoff));
        }
        let err = match self.look_once(shared, wake, shutdown) {
            Err(e) if e.is_no_space() => e,
            other => return other,
        };
        self.note_disk_full(format!(
            "disk full: {err}; pickup paused until space is freed"
        ));
        Ok(Pickup::NotYet(Instant::now() + self.backoff))
    }

    /// Recover this slot's own leftover task; `false` while it is still there.
    fn finish_leftover(&mut self, shared: &Shared) -> bool {
        // Recovery judges the slot's `.lock`: our own kept one would read as a live
        // holder, and the slot as busy.
        self.release_kept_lock();
        match recover_slot(&self.root, self.slot(), &shared.lock_opts) {
            Ok(r) if !r.is_empty() => tracing::warn!("a task left in hand: {r}"),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!("finishing the task left in hand: {e}");
                self.backoff = space::next_backoff(self.backoff);
            }
        }
        !self.paths.running().exists()
    }

    /// Say once that the disk is full (log and status), and back off further.
    fn note_disk_full(&mut self, problem: String) {
        if self.disk_full.is_none() {
            tracing::error!("{problem}");
            let mut st = Status::new(WorkerState::Idle);
            st.problem = Some(problem.clone());
            // May fail for the same reason: the log has said it already.
            let _ = self.board.publish(st);
            self.disk_full = Some(problem);
        }
        self.backoff = space::next_backoff(self.backoff);
    }

    /// The inbox first, then the shared queue; neither while the slot is paused.
    fn look_once(
        &mut self,
        shared: &Shared,
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
    ) -> Result<Pickup> {
        if let Some(inline) = &self.inline {
            // The watcher is read only while this thread waits: what changed since its
            // last wait (a pause made while a task ran) must be told before the last
            // reading of the shared directories is trusted.
            inline.tell_waiting();
        }
        let paused = self
            .shared_seen
            .begin_look(&shared.opts.root, shared.idle_look())
            .clone();
        if paused.slot(self.slot().0) {
            // A resume (a change in paused/) wakes us.
            return Ok(Pickup::Empty);
        }
        let held_until = match claim::from_inbox(shared, self, &paused, wake, shutdown)? {
            Pickup::Empty => None,
            Pickup::Deferred(at) => Some(at),
            other => return Ok(other),
        };
        // The claim lists `queue/pending/` itself: no listing of ours before it. What it
        // found empty stays empty until the watcher tells of a change.
        let queued = if self.shared_seen.queue_known_empty() {
            Pickup::Empty
        } else {
            let mut empty = false;
            let queued = claim::from_queue(shared, self, &paused, (wake, shutdown), &mut empty);
            if empty {
                self.shared_seen.saw_queue_empty();
            }
            queued?
        };
        Ok(match (held_until, queued) {
            (Some(at), Pickup::Empty) => Pickup::NotYet(at),
            (Some(at), Pickup::NotYet(b) | Pickup::Deferred(b)) => Pickup::NotYet(at.min(b)),
            (_, other) => other,
        })
    }
}

/// Recovery just finished a task (its status says done/error for it): leave that for
/// clients that poll status.json for their task, stamped as ours. Otherwise announce idle.
fn announce_ready(slot: &SlotServer, recovery: &RecoveryReport) -> Result<()> {
    let finished = recovery
        .interrupted
        .as_ref()
        .or(recovery.already_finished.as_ref());
    let kept = finished.and_then(|id| {
        Status::read(&slot.paths.status())
            .ok()
            .flatten()
            .filter(|st| st.task_id.as_ref() == Some(id))
    });
    slot.board
        .publish(kept.unwrap_or_else(|| Status::new(WorkerState::Idle)))
}

impl Shared {
    /// config.json may change while we run (maxRunning, limits): follow it.
    fn follow_config(&mut self, seen: &mut Option<(SystemTime, u64)>) {
        let stamp = config_stamp(&self.opts.root);
        if stamp == *seen {
            return;
        }
        *seen = stamp;
        match Config::load(&self.opts.root.config_file()) {
            Ok(c) => {
                tracing::info!("config.json changed; reloaded");
                self.lock_opts = c.lock_options();
                self.config = c;
            }
            Err(e) => {
                tracing::warn!("config.json changed but cannot be read ({e}); keeping the old one")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::WatchMode;

    /// The slot's inline watcher, as `Worker::start` arms it, and the kept reading it
    /// feeds.
    fn watched_slot() -> (tempfile::TempDir, Root, inline::InlineWait, SharedSeen) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        crate::queue::init_root(&root).unwrap();
        let paths = root.worker(Slot(0));
        fsio::ensure_dir(&paths.dir).unwrap();
        paths.create_dirs().unwrap();
        let news = SharedNews::default();
        let (_, inline, _wake) = watch_slot(&root, &paths, WatchMode::Auto, news.clone()).unwrap();
        let inline = inline::InlineWait::new(inline.expect("native events in a temp dir"));
        (dir, root, inline, SharedSeen::kept_while_silent(news))
    }

    #[test]
    fn a_pause_made_since_the_last_wait_is_seen_once_the_waiting_changes_are_told() {
        let (_d, root, inline, mut seen) = watched_slot();
        let rescan = Duration::from_secs(3600);
        assert!(!seen.begin_look(&root, rescan).slot(0));
        // Made while the worker was busy (it reads its watcher only when it waits).
        crate::queue::pause::pause(&root, &crate::queue::pause::Target::Slot(0), false).unwrap();
        inline.tell_waiting();
        assert!(seen.begin_look(&root, rescan).slot(0));
    }

    #[test]
    fn a_task_queued_since_the_last_wait_is_seen_once_the_waiting_changes_are_told() {
        let (_d, root, inline, mut seen) = watched_slot();
        let rescan = Duration::from_secs(3600);
        seen.begin_look(&root, rescan);
        seen.saw_queue_empty();
        assert!(seen.queue_known_empty());
        crate::queue::Queue::new(root.clone())
            .submit(&crate::Task::new("x"))
            .unwrap();
        inline.tell_waiting();
        seen.begin_look(&root, rescan);
        assert!(!seen.queue_known_empty());
    }
}
