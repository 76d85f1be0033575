//! The slot's `.lock` kept from one task's end to the next look, so that back-to-back
//! tasks of one worker take and give back the lock once, not once a task.
//!
//! A task's end leaves the lock here instead of parking it; the next claim (from the
//! inbox or the queue) takes it back as its own, and a look that claims nothing lets
//! it go ([`SlotServer::release_kept_lock`]), so the lock is never held while the
//! worker waits. Nothing recovery or fencing reads changes: `.lock/` stays in place
//! with our owner record and epoch, exactly as a long claim would leave it, and the
//! lock is renewed before reuse when its last renewal is older than half a heartbeat
//! (the agent's fence is armed from that renewal: the next task's first heartbeat and
//! its fence then fall where a freshly taken lock would put them).

use std::time::{Duration, Instant};

use crate::dirlock::DirLock;
use crate::host;

use super::slot_server::{Shared, SlotServer};

/// How long ago `lock`'s last renewal (or its placing) began, by the boot clock.
fn age(lock: &DirLock) -> Duration {
    host::boot_clock().saturating_sub(lock.renewed_at())
}

/// When a task's first heartbeat is due, `heartbeat` apart: a slot lock kept from the
/// task before was renewed a while ago, and its next renewal is due that much sooner.
pub(crate) fn first_beat(lock: &DirLock, heartbeat: Duration) -> Instant {
    Instant::now() + heartbeat.saturating_sub(age(lock))
}

/// The renewal period of a task's locks: the worker's heartbeat, at most a quarter of
/// the lease.
pub(crate) fn beat_every(shared: &Shared) -> Duration {
    shared
        .opts
        .heartbeat
        .min(crate::gate::renew_every(shared.lock_opts.lease))
}

impl SlotServer {
    /// A task ended with `lock` still ours (the ledger's last look just said so): keep
    /// it for the next claim.
    pub(crate) fn keep_lock(&self, lock: DirLock) {
        self.kept_lock.put(lock);
    }

    /// The lock the last task left, renewed first if its last renewal is older than
    /// half a heartbeat; `None` when none was kept or it is ours no more (then it is
    /// let go, and the caller takes the lock afresh).
    pub(crate) fn take_kept_lock(&self, shared: &Shared) -> Option<DirLock> {
        let mut lock = self.kept_lock.take()?;
        if age(&lock) >= beat_every(shared) / 2 {
            if let Err(e) = lock.heartbeat() {
                tracing::warn!("the slot's kept lock: {e}; taking it afresh");
                return None;
            }
        }
        Some(lock)
    }

    /// Let go of a kept lock no claim took (parked, as at a task's end before).
    pub(crate) fn release_kept_lock(&self) {
        if let Some(lock) = self.kept_lock.take() {
            if let Err(e) = lock.release() {
                tracing::warn!("letting go of the slot's lock: {e}");
            }
        }
    }
}
