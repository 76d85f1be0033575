//! Cleaning up after workers that died for good: their slots, and the key and
//! run-slot locks they held.

use std::fs;
use std::path::Path;
use std::time::Duration;

use super::{is_abandoned, recover_slot, ABANDONED_AFTER};
use crate::dirlock::{self, LockOptions};
use crate::error::Result;
use crate::gate::Gate;
use crate::layout::{Root, Slot};

/// Every stale key and run-slot lock, and every spare a dead process left while
/// building or parking one. A process killed between taking a key lock and claiming
/// its task leaves no task for recovery to find; without this its lock would stay
/// (judged stale, but shown) until another task of that key came along.
pub fn free_dead_shared_locks(root: &Root, lock_opts: &LockOptions) -> Result<()> {
    for dir in [
        root.keys_dir(),
        root.slots_dir(),
        root.groups_dir(),
        root.ports_dir(),
    ] {
        dirlock::clear_dead_spares_in(&dir)?;
        break_stale_locks_in(&dir, lock_opts)?;
    }
    Ok(())
}

pub(super) fn break_stale_locks_in(dir: &Path, lock_opts: &LockOptions) -> Result<()> {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().ends_with(".lock") {
            dirlock::break_if_stale(&entry.path(), lock_opts)?;
        }
    }
    Ok(())
}

/// Finish, on their behalf, tasks left by workers that died for good: every slot but
/// `own` with a `running.json` whose gate nobody holds. Exactly once: the gate admits one.
pub fn sweep_abandoned(root: &Root, slots: &[Slot], own: Slot, lock_opts: &LockOptions) {
    for &slot in slots.iter().filter(|s| **s != own) {
        let w = root.worker(slot);
        // A worker restarted right after a crash recovers its own slot: leave the slot
        // to it unless its status has been silent for a while. Left behind: a task in
        // hand, or (looked for only once silent) callbacks nobody reaps.
        // Its locks' lease waits start now, not when it looks abandoned.
        super::lease_watch::watch_if_foreign(root, &w, lock_opts);
        let silent = silent_for(&w.status());
        let left = w.running().exists()
            || (silent.is_none_or(|s| s >= ABANDONED_AFTER) && super::callbacks::any_left_here(&w));
        if !is_abandoned(left, silent, ABANDONED_AFTER) {
            continue;
        }
        tracing::debug!(
            "worker {slot} looks abandoned: running.json exists, status silent for {:?}",
            silent_for(&w.status())
        );
        let _gate = match Gate::acquire(&w.worker_gate(), &format!("recovery of worker {slot}")) {
            Ok(g) => g,
            // A live worker serves it (here or, by its lease, on another host), or
            // another recoverer is at it.
            Err(crate::error::Error::GateHeld { .. }) => continue,
            Err(e) => {
                tracing::warn!("cannot take worker {slot}'s gate to recover it: {e}");
                continue;
            }
        };
        match recover_slot(root, slot, lock_opts) {
            Ok(r) if !r.is_empty() => tracing::warn!("recovered abandoned worker {slot}: {r}"),
            Ok(_) => {}
            Err(e) => tracing::warn!("recovering abandoned worker {slot}: {e}"),
        }
    }
}

fn silent_for(path: &Path) -> Option<Duration> {
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok()?;
    Some(modified.elapsed().unwrap_or_default())
}
