//! A slot's owed commit: its last task's result, published but not yet committed, made
//! durable by the commit of the slot's next claim — one journal commit a task where
//! there were two in a row — or at once when no claim follows; only then is anyone told
//! (the owner's pipe, the root's callback). See `fsio/commit_owed.rs`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::slot_server::{OwedEnd, Shared, SlotServer};
use crate::error::Result;
use crate::fsio::Debt;
use crate::protocol::TaskResult;

/// How long a slot that owes a commit and found nothing to claim waits for a next task
/// (whose claim would pay it) before paying it alone: about what a commit costs on a
/// journaled disk, so a next task that comes at once — `conductor run` delivers it as
/// the last one's agent starts — saves a commit, and the result is told at most this
/// much later when none comes. The result itself is visible from the start.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// Debug variable: a worker stops itself (`SIGSTOP`) right after the rename of a claim
/// whose commit will pay an owed result's, before that commit — the window the fault
/// test kills it in (`tests/integration/owed_commit.rs`).
pub const ENV_DEBUG_STOP_OWED: &str = "CONDUCTOR_DEBUG_STOP_OWED";

/// Debug variable: the linger in milliseconds instead of [`LINGER`], so a test can stop
/// a worker while a slot still owes its commit (`tests/integration/owed_commit.rs`).
pub const ENV_DEBUG_LINGER_MS: &str = "CONDUCTOR_DEBUG_LINGER_MS";

/// [`LINGER`], or what [`ENV_DEBUG_LINGER_MS`] asks (read once).
fn linger() -> Duration {
    static ASKED: OnceLock<Duration> = OnceLock::new();
    *ASKED.get_or_init(|| {
        std::env::var(ENV_DEBUG_LINGER_MS)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(LINGER, Duration::from_millis)
    })
}

impl SlotServer {
    /// The claim's rename is done and its commit will pay an owed one: stop here when
    /// the fault test asks ([`ENV_DEBUG_STOP_OWED`]).
    pub(crate) fn stop_if_asked_before_paying(&self) {
        static ASKED: OnceLock<bool> = OnceLock::new();
        if *ASKED.get_or_init(|| std::env::var_os(ENV_DEBUG_STOP_OWED).is_some())
            && self.owed.pending()
        {
            tracing::warn!("{ENV_DEBUG_STOP_OWED}: stopping before the claim's commit");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
    }

    /// A task ended with `result` (kept as `kept`), and `debt` is what its commit owes:
    /// nothing — it was committed, so tell now — or the next claim's commit (or
    /// [`Self::settle_owed`]) pays it and tells.
    pub(crate) fn owe_end(&self, shared: &Shared, debt: Debt, result: TaskResult, kept: PathBuf) {
        if debt.is_empty() {
            run_callback(shared, self, &result, kept);
            return;
        }
        let older = self.owed.end().replace(OwedEnd {
            debt,
            result,
            kept,
            fresh: true,
            since: Instant::now(),
        });
        if let Some(older) = older {
            // Never two: an older debt is paid and told first (a claim pays each).
            if let Err(e) = self.tell_paid(shared, older, None) {
                tracing::error!("{e}");
            }
        }
    }

    /// A look begins: what is owed now was owed by an earlier look's task.
    pub(crate) fn owed_before_this_look(&self) {
        if let Some(end) = self.owed.end().as_mut() {
            end.fresh = false;
        }
    }

    /// The slot's claim just committed a rename into `running.json` (its fsync, or a
    /// shared commit): what was owed on its filesystem is durable — told now, before the
    /// claimed task's agent starts. Owed elsewhere (another filesystem) is paid here.
    pub(crate) fn owed_paid_by_claim(&self, shared: &Shared) {
        let Some(end) = self.owed.end().take() else {
            return;
        };
        let dev = match self.owed.dev.get() {
            Some(dev) => Some(*dev),
            None => crate::fsio::commit::device_of(&self.paths.dir)
                .ok()
                .inspect(|d| {
                    let _ = self.owed.dev.set(*d);
                }),
        };
        // The claim's own commit succeeded: its task runs. Only the older result's
        // paying failed (another device's commit): it stays untold, and said so.
        if let Err(e) = self.tell_paid(shared, end, dev) {
            tracing::error!(
                "worker {}: committing the last task's result failed; it is not told: {e}",
                self.slot()
            );
        }
    }

    /// A look ended (`ran`: it ran a task; `idle`: it found nothing to claim): pay what
    /// is owed and tell of it — unless it is the look's own task's, which the next
    /// claim may pay, or the slot found nothing and lingers for a next task
    /// ([`LINGER`]; `Some`: look again then).
    pub(crate) fn settle_owed(
        &self,
        shared: &Shared,
        ran: bool,
        idle: bool,
    ) -> Result<Option<Instant>> {
        let mut end = self.owed.end();
        let Some(owed) = end.as_ref() else {
            return Ok(None);
        };
        if ran && owed.fresh {
            return Ok(None);
        }
        let until = owed.since + linger();
        if idle && Instant::now() < until {
            return Ok(Some(until));
        }
        let Some(owed) = end.take() else {
            return Ok(None);
        };
        drop(end);
        self.tell_paid(shared, owed, None).map(|()| None)
    }

    /// Pay `end`'s debt (what a commit on device `paid_on` has not already paid), then
    /// tell of its result.
    fn tell_paid(&self, shared: &Shared, end: OwedEnd, paid_on: Option<u64>) -> Result<()> {
        let OwedEnd {
            mut debt,
            result,
            kept,
            ..
        } = end;
        if let Some(dev) = paid_on {
            debt.paid_by_commit_on(dev);
        }
        debt.pay()?;
        run_callback(shared, self, &result, kept);
        shared.tell_owner_result(self.slot());
        Ok(())
    }
}

/// The root's callback, if any, for a durable result: started now, watched and reaped
/// by a thread.
fn run_callback(shared: &Shared, slot: &SlotServer, result: &TaskResult, kept: PathBuf) {
    super::callback::run(
        &shared.config,
        &shared.opts.root,
        slot.slot(),
        result,
        kept,
    );
}
