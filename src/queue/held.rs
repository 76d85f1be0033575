//! Run-slot locks, the root's (`slots/<i>.lock`) and a group's: whether one is held,
//! and taking the first free one.

use std::path::{Path, PathBuf};

use crate::dirlock::{self, Acquire, DirLock, LockOptions};
use crate::error::Result;

/// Whether the lock at `lock` is held by someone alive (or whose task still runs).
pub(crate) fn is_held(lock: &Path, opts: &LockOptions) -> bool {
    matches!(dirlock::inspect(lock, opts), Ok(Some(h)) if !h.liveness.is_stale())
}

/// The first of `locks` free to take (a run slot: the root's or a group's), held until
/// dropped; `None` when every one is held.
pub(crate) fn take_one_of(
    locks: impl Iterator<Item = PathBuf>,
    opts: &LockOptions,
) -> Result<Option<DirLock>> {
    for lock in locks {
        if let Acquire::Acquired(l) = DirLock::try_acquire(&lock, opts)? {
            return Ok(Some(l));
        }
    }
    Ok(None)
}
