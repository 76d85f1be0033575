//! Putting a stopped task back where it came from, to run again later: deferred past
//! an agent's usage limit, or stopped by a pause made `--now`.

use std::time::{Duration, Instant, SystemTime};

use super::run::{still_held, went_back, Run};
use crate::dirlock::DirLock;
use crate::error::{Error, Result};
use crate::fsio;
use crate::preset::{Preset, RateLimit};
use crate::protocol::{rfc3339, Status, Task, WorkerState, WorktreeRecord};
use crate::worker::admit::Hold;
use crate::worker::multi::nproc;
use crate::worker::slot_server::{Pickup, SlotServer};

/// How long a worker whose inbox its owner filled waits, once it asked, for the owner
/// to take that task back so that its stopped one can go back there.
const OWNER_GIVES_BACK: Duration = Duration::from_secs(2);

/// A task put back for want of processes (what to log).
pub(super) struct ShortBack(String);

impl ShortBack {
    /// Release what the task held; its slot looks again after a pause.
    pub(super) fn went_back(
        self,
        slot: &SlotServer,
        tree: Option<&WorktreeRecord>,
        lock: DirLock,
        hold: Hold,
    ) -> Pickup {
        went_back(slot, tree, lock, hold, &self.0);
        Pickup::NotYet(Instant::now() + nproc::PUT_BACK_PAUSE)
    }
}

impl Run<'_> {
    /// The agent hit a usage limit with a reset time: put the task back to wait for it
    /// (same attempt; nothing is published), and record the limit root-wide so no
    /// worker starts a task of this preset before then. `None` when it is not deferred
    /// (turned off, or the inbox already holds another task): it fails as it is.
    ///
    /// Crash safety: `running.json` is first rewritten (durably) with `notBefore`, then
    /// moved in one rename — into `queue/pending/` (a queue task) or back to the inbox
    /// without replacing (`RENAME_NOREPLACE`; an inbox task) — so the task is in exactly
    /// one place at every instant. A worker dying between the two steps leaves a
    /// `running.json` whose `notBefore` is ahead, which recovery recognises (a task is
    /// never claimed before its `notBefore`) and finishes deferring.
    pub(super) fn defer(
        &self,
        task: &Task,
        preset: Preset,
        limit: &RateLimit,
        lock: &DirLock,
        hold: &Hold,
    ) -> Result<Option<String>> {
        let shared = self.shared;
        if !shared.opts.defer_rate_limited || !shared.config.defer_rate_limited() {
            return Ok(None);
        }
        let deferrals = task.deferrals.unwrap_or(0);
        let Some(until) = limit.next_run(deferrals, SystemTime::now()) else {
            return Ok(None);
        };
        if still_held(lock, hold).is_some() {
            return Ok(None);
        }
        let root = &shared.opts.root;
        if let Err(e) = crate::queue::limits::record(
            root,
            &preset.to_string(),
            until,
            &limit.message,
            Some(&self.id),
        ) {
            tracing::warn!("recording the {preset} usage limit: {e}");
        }
        let mut t = task.clone();
        t.id = Some(self.id.clone());
        t.not_before = Some(rfc3339(until));
        t.deferrals = Some(deferrals + 1);
        let until_text = crate::protocol::rfc3339(until);
        if !self.put_back(&t, hold)? {
            tracing::warn!(
                "task {}: cannot wait in the inbox for the reset ({until_text}): another \
                 task was delivered meanwhile; it fails instead",
                self.id
            );
            return Ok(None);
        }
        let mut idle = Status::new(WorkerState::Idle);
        idle.problem = Some(format!(
            "{preset} is rate-limited until {}: {}",
            crate::queue::limits::hh_mm(until),
            limit.message
        ));
        if let Err(e) = self.slot.board.publish(idle) {
            tracing::warn!("{e}");
        }
        Ok(Some(format!(
            "deferred \"{}\" · task {}: {preset} is rate-limited until {until_text} ({}); it \
             waits {} and runs then (deferral {} of at most {})",
            self.preview,
            self.id,
            limit.message,
            if hold.queued {
                "in the queue"
            } else {
                "in the inbox"
            },
            deferrals + 1,
            crate::preset::MAX_DEFERRALS
        )))
    }

    /// Put `t` (this run's task, as it is to run next) back where it came from, nothing
    /// published: `running.json` rewritten durably, then moved in one rename — into
    /// `queue/pending/` (a queue task) or back to the inbox without replacing (an inbox
    /// task). `false`: the inbox holds another task meanwhile, and `t` stays in hand.
    fn put_back(&self, t: &Task, hold: &Hold) -> Result<bool> {
        let running = self.slot.paths.running();
        if hold.queued {
            crate::queue::requeue(&self.shared.opts.root, &running, t)?;
            return Ok(true);
        }
        fsio::write_json(&running, t, fsio::Durability::Durable)?;
        let inbox = self.slot.paths.task();
        let taken = |e: &Error| e.io_kind() == Some(std::io::ErrorKind::AlreadyExists);
        let mut asked: Option<Instant> = None;
        loop {
            match fsio::rename_noreplace(&running, &inbox) {
                Ok(()) => return fsio::fsync_dir(&self.slot.paths.dir).map(|()| true),
                Err(e) if !taken(&e) => return Err(e),
                Err(_) => {}
            }
            // A run that keeps its workers' inboxes filled put the next task there: it
            // takes that one back when asked, in a moment.
            match asked {
                None if self.shared.ask_owner_for_inbox(self.slot.slot()) => {
                    asked = Some(Instant::now());
                }
                Some(at) if at.elapsed() < OWNER_GIVES_BACK => {}
                _ => return Ok(false),
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// When `e` says the agent could not start for want of processes: put the task
    /// back (same attempt, nothing published) to start once processes free up, rather
    /// than wait holding this slot's thread, which is itself a process (issue 38.1).
    /// `None` for another error, in a single-slot worker, or when it cannot go back (a
    /// lock was lost, the inbox holds another task, or the put back failed): it waits
    /// here as any passing shortage does.
    pub(super) fn put_back_short(
        &self,
        task: &Task,
        e: &Error,
        lock: &DirLock,
        hold: &Hold,
    ) -> Option<ShortBack> {
        if !nproc::is_out_of_processes(e) || self.round.get() > 1 {
            return None;
        }
        nproc::ran_short();
        if !nproc::serving_many() {
            return None;
        }
        if still_held(lock, hold).is_some() {
            return None;
        }
        let mut t = task.clone();
        t.id = Some(self.id.clone());
        match self.put_back(&t, hold) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(
                    "task {}: cannot put it back to wait for processes: {e}",
                    self.id
                );
                return None;
            }
        }
        let whence = if hold.queued {
            "the queue"
        } else {
            "the inbox"
        };
        tracing::warn!(
            "task {} waits to start, back in {whence} until processes free up: {e}",
            self.id
        );
        Some(ShortBack(format!(
            "task {} went back to wait for processes",
            self.id
        )))
    }

    /// A pause made `--now` stopped the agent: put the task back (same attempt) to run
    /// once resumed. `None` when it cannot go back (a lock was lost, or the inbox holds
    /// another task): it ends `interrupted`.
    pub(super) fn put_back_paused(
        &self,
        task: &Task,
        what: &str,
        lock: &DirLock,
        hold: &Hold,
    ) -> Result<Option<String>> {
        if still_held(lock, hold).is_some() {
            return Ok(None);
        }
        let mut t = task.clone();
        t.id = Some(self.id.clone());
        if !self.put_back(&t, hold)? {
            tracing::warn!(
                "task {}: stopped by the pause of {what}, but cannot go back to the inbox: \
                 another task was delivered meanwhile; it ends interrupted",
                self.id
            );
            return Ok(None);
        }
        let whence = if hold.queued {
            "the queue"
        } else {
            "the inbox"
        };
        let mut idle = Status::new(WorkerState::Idle);
        idle.problem = Some(format!(
            "task {} interrupted by the pause of {what}; back in {whence}",
            self.id
        ));
        if let Err(e) = self.slot.board.publish(idle) {
            tracing::warn!("{e}");
        }
        Ok(Some(format!(
            "interrupted \"{}\" · task {}: {what} was paused --now; it waits in {whence} and \
             runs again once resumed",
            self.preview, self.id
        )))
    }
}
