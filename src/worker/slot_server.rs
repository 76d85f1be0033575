//! A slot's own state ([`SlotServer`]), what every slot of a process shares
//! ([`Shared`]), and what one look at the slot's work came to ([`Pickup`]).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use super::inline::InlineWait;
use super::options::WorkerOptions;
use super::shared_seen::SharedSeen;
use super::status::StatusBoard;
use crate::config::Config;
use crate::dirlock::{self, DirLock, LockOptions};
use crate::error::Result;
use crate::gate::Gate;
use crate::fsio::Debt;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::TaskResult;

/// What every slot served by this process shares: options, the root's config, the
/// agent found on PATH.
pub(crate) struct Shared {
    pub opts: WorkerOptions,
    pub config: Config,
    pub lock_opts: LockOptions,
    /// The agent program found on PATH at start.
    pub agent_path: Option<PathBuf>,
    /// Where the owner is told that a task started or ended ([`WorkerOptions::wake_pipes`],
    /// [`WorkerOptions::tell_owner`]).
    pub tell_owner: Option<std::fs::File>,
}

/// How often a worker its owner wakes through pipes looks again while idle: its owner
/// wakes it for what it delivers, but tasks others put in (an agent's `conductor
/// submit` or `send` into the run's root) tell no one.
const WOKEN_IDLE_LOOK: Duration = Duration::from_millis(100);

impl Shared {
    /// The longest an idle look waits for news: the rescan, or, woken through pipes,
    /// [`WOKEN_IDLE_LOOK`] (nothing else tells it of a task another process put in).
    pub(super) fn idle_look(&self) -> Duration {
        if self.opts.wake_pipes {
            self.opts.rescan.min(WOKEN_IDLE_LOOK)
        } else {
            self.opts.rescan
        }
    }

    /// Tell the process that owns this worker that a task started (its inbox is free
    /// for the next) or ended (a result to collect): one byte, never waiting (a full
    /// pipe already holds news enough).
    pub(crate) fn tell_owner(&self) {
        self.tell_owner_byte(b'r');
    }

    /// [`Self::tell_owner`] of a task ended in `slot`: the owner looks for its result
    /// there only.
    pub(crate) fn tell_owner_result(&self, slot: Slot) {
        self.tell_owner_byte(crate::pool::result_byte(slot));
    }

    /// [`Self::tell_owner`] of an agent started: no result to look for yet.
    pub(crate) fn tell_owner_started(&self) {
        self.tell_owner_byte(crate::pool::STARTED_BYTE);
    }

    fn tell_owner_byte(&self, byte: u8) {
        if let Some(mut out) = self.tell_owner.as_ref() {
            use std::io::Write;
            let _ = out.write(&[byte]);
        }
    }

    /// Ask the owner to take back the task it put in `slot`'s inbox behind the one this
    /// worker had in hand (which must go back there); whether it was asked.
    pub(crate) fn ask_owner_for_inbox(&self, slot: Slot) -> bool {
        let (Some(mut out), Some(byte)) = (
            self.tell_owner.as_ref(),
            crate::pool::inbox_wanted_byte(slot),
        ) else {
            return false;
        };
        use std::io::Write;
        out.write(&[byte]).is_ok()
    }
}

/// One slot's own state: its files, its gate, its status board, whether its disk is full.
pub(crate) struct SlotServer {
    pub root: Root,
    pub paths: WorkerPaths,
    /// The slot's worker gate (`.worker.lock`), held for as long as we serve it.
    pub(super) worker_gate: Gate,
    pub board: StatusBoard,
    /// Why the disk is too full to take a task (pickup waits), while it is.
    pub(super) disk_full: Option<String>,
    pub(super) backoff: Duration,
    /// The slot's watcher when this worker's own thread reads it (a single-slot worker
    /// with native events): [`Worker::run`]'s wait between looks and the agent's
    /// supervision wait on it. `None`: a watcher's thread feeds the wake-up channel.
    pub inline: Option<InlineWait>,
    /// The last reading of the pauses and the queue, kept while the inline watcher is
    /// silent about them.
    pub(super) shared_seen: SharedSeen,
    /// The slot's `.lock` as the last task left it, for the next claim ([`super::kept_lock`]).
    pub(super) kept_lock: KeptLock,
    /// The last task's result, published but its commit owed ([`super::owed`]).
    pub(super) owed: Owed,
    /// The last task's end removed `running.json` itself: the next look need not look
    /// for one left in hand (taken by that look).
    pub(crate) running_gone: std::sync::atomic::AtomicBool,
    /// How a claim checks the directories its files go into ([`super::dirs_watch`]).
    pub(super) dirs_check: super::dirs_watch::DirsCheck,
}

impl SlotServer {
    pub fn slot(&self) -> Slot {
        self.paths.slot
    }

    /// Another host took this slot's gate lease while we were away (paused past the
    /// lease): the slot is no longer ours to serve.
    pub fn lease_lost(&self) -> bool {
        self.worker_gate.lease_lost()
    }
}

impl Drop for SlotServer {
    fn drop(&mut self) {
        // A lock kept for a next task that never came is parked first, then removed.
        self.release_kept_lock();
        // Our parked lock directory, if any (see DirLock::try_acquire_reusable).
        let _ = dirlock::clear_spares(&self.paths.lock_dir());
    }
}

/// What one look at the slot's work came to.
pub(crate) enum Pickup {
    /// A task was run or rejected: look again at once.
    Ran,
    /// A task was interrupted by a shutdown request: stop serving.
    Stop,
    Empty,
    /// Something is there but not ready (mid-write, locked): look again then.
    NotYet(Instant),
    /// The inbox holds a deferred task (its agent usage-limited) until then: the
    /// queue may still have work for this slot meanwhile.
    Deferred(Instant),
}

/// Refuse what must not start: a worker inside an agent, a missing project directory,
/// an agent command that cannot run (every task would fail at once). Ok: where the
/// agent program is.
pub(super) fn check_startable(opts: &WorkerOptions) -> Result<PathBuf> {
    crate::env::refuse_nested(&format!("start worker {}", opts.slot), opts.allow_nested)?;
    crate::env::project_dir(&opts.project_dir)?;
    opts.agent.locate()
}

/// When config.json last changed (None while it does not exist).
pub(super) fn config_stamp(root: &Root) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(root.config_file()).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The kept lock of one slot (`None` between looks that found nothing).
#[derive(Debug, Default)]
pub(crate) struct KeptLock(std::sync::Mutex<Option<DirLock>>);

impl KeptLock {
    pub(super) fn take(&self) -> Option<DirLock> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(super) fn put(&self, lock: DirLock) {
        let old = self.0.lock().unwrap_or_else(|e| e.into_inner()).replace(lock);
        // Never two: a second would be a second holding of the same lock.
        drop(old);
    }
}

/// The slot's owed commit, if any ([`super::owed`]).
#[derive(Default)]
pub(crate) struct Owed {
    end: std::sync::Mutex<Option<OwedEnd>>,
    /// The slot directory's device: a claim's commit there pays what is owed there.
    pub(super) dev: std::sync::OnceLock<u64>,
}

/// A task's end whose commit is owed.
pub(crate) struct OwedEnd {
    pub(super) debt: Debt,
    /// The result, for the callback once it is durable.
    pub(super) result: TaskResult,
    /// Its `results/<id>.json`.
    pub(super) kept: PathBuf,
    /// Owed by the task of the look under way (not one before it).
    pub(super) fresh: bool,
    /// Since when.
    pub(super) since: Instant,
}

impl Owed {
    pub(super) fn end(&self) -> std::sync::MutexGuard<'_, Option<OwedEnd>> {
        self.end.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A commit is owed: the owner is not told of the last result yet.
    pub(crate) fn pending(&self) -> bool {
        self.end().is_some()
    }
}
