//! Removing stale directory locks and the spares of dead processes (`conductor locks
//! clean`), judging each lock again under its guard so a live holder's is never touched.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::dirlock::{self, LockOptions};
use crate::error::Result;
use crate::inspect::{list_locks, LockEntry, LockKind, LockStatus};
use crate::layout::Root;

// ---------------------------------------------------------------------------------
// locks clean

/// What happened (or would happen) to one stale lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CleanAction {
    /// Dry run: it would be removed.
    WouldRemove,
    Removed,
    /// Judged again under its guard, it was no longer stale (or already gone).
    LeftAlone,
}

impl fmt::Display for CleanAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CleanAction::WouldRemove => "would remove",
            CleanAction::Removed => "removed",
            CleanAction::LeftAlone => "left alone",
        })
    }
}

/// One stale lock found by [`clean_locks`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanedLock {
    #[serde(flatten)]
    pub lock: LockEntry,
    pub action: CleanAction,
}

/// Find stale directory locks (each worker's `.lock`, `keys/`, `slots/`) and parked
/// spares of dead processes; with `apply`, remove them. Locks are removed only through
/// [`dirlock::break_if_stale`], which judges them again under their guard, so a live
/// holder's lock is never touched. Gates are flocks and never stale.
pub fn clean_locks(root: &Root, opts: &LockOptions, apply: bool) -> Result<Vec<CleanedLock>> {
    let mut out = Vec::new();
    for entry in list_locks(root, opts)? {
        if entry.status != LockStatus::Stale {
            continue;
        }
        let action = if !apply {
            CleanAction::WouldRemove
        } else if entry.kind == LockKind::Spare {
            // clear_spares removes only spares of dead pids; see whether ours went.
            if let Some(base) = spare_base(&entry.path) {
                dirlock::clear_spares(&base)?;
            }
            if entry.path.exists() {
                CleanAction::LeftAlone
            } else {
                CleanAction::Removed
            }
        } else {
            match dirlock::break_if_stale(&entry.path, opts)? {
                Some(_) => CleanAction::Removed,
                None => CleanAction::LeftAlone,
            }
        };
        out.push(CleanedLock {
            lock: entry,
            action,
        });
    }
    Ok(out)
}

/// `<dir>/<base>.spare.<pid>` → `<dir>/<base>`.
fn spare_base(spare: &Path) -> Option<PathBuf> {
    let name = spare.file_name()?.to_str()?;
    let (base, _) = name.rsplit_once(".spare.")?;
    Some(spare.with_file_name(base))
}

// ---------------------------------------------------------------------------------
// gc
