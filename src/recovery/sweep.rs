//! Cleaning up after workers that died for good: their slots, and the key and
//! run-slot locks they held.

use std::fs;
use std::path::Path;

use crate::dirlock::{self, LockOptions};
use crate::error::Result;
use crate::layout::Root;

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
