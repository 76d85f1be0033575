//! Reading a lock directory (`read_lock`) and judging whether its holder is alive
//! (`judge`): the files, their ages, and the verdict.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::fsio::{self, SMALL_FILE_LIMIT};
use crate::host;

use super::age::{facts_about, on_shared_fs, ownerless_for, unchanged_for, warn_of_skew};
use super::files::{self, owner_file, pid_file};
use super::judge::{verdict, LockRead, OwnerRead, Vantage};
use super::owner::{Holder, LockOptions, LockOwner};

/// Read the lock directory at `path`; `None` if there is none (or it vanished while
/// being read).
pub fn read_lock(path: &Path) -> Result<Option<LockRead>> {
    let stat = |path: &Path| match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        // Removed (or replaced, on a network filesystem) by someone else just now.
        Err(e) if files::vanished(&e) => Ok(None),
        Err(e) => Err(Error::io("stat lock", path, e)),
    };
    let Some(meta) = stat(path)? else {
        return Ok(None);
    };
    // Shown by this host's caches, perhaps after another host removed it: a waiting
    // task would wait for the next rescan instead of taking the freed lock.
    if super::fresh::gone_on_server(path) {
        return Ok(None);
    }
    let modified = meta
        .modified()
        .map_err(|e| Error::io("stat lock", path, e))?;
    let owner = match fsio::read_json::<LockOwner>(&owner_file(path), SMALL_FILE_LIMIT) {
        Ok(Some(o)) => OwnerRead::Valid(o),
        Ok(None) => OwnerRead::Missing,
        Err(e) if files::error_vanished(&e) => OwnerRead::Missing,
        Err(e) => OwnerRead::Corrupt(e.to_string()),
    };
    let pid_file = fsio::read_bounded(&pid_file(path), 64)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.trim().parse::<u32>().ok());
    let read = LockRead {
        pid_file,
        owner,
        modified,
        created: meta.created().ok(),
        ownerless_for: Duration::ZERO,
        unchanged_for: Duration::ZERO,
    };
    // Files missing may mean the whole lock went away while we read it.
    if read.pid().is_none() && stat(path)?.is_none() {
        return Ok(None);
    }
    Ok(Some(read))
}

/// Whether the lock at `path` is held by somebody alive; `None` if there is no lock.
pub(super) fn judge(path: &Path, opts: &LockOptions, gated: bool) -> Result<Option<Holder>> {
    judge_read(path, opts, gated, false)
}

/// [`judge`]; `fresh`: `path` is a name no client cache can answer for (a lock just
/// moved there).
pub(super) fn judge_read(path: &Path, opts: &LockOptions, gated: bool, fresh: bool) -> Result<Option<Holder>> {
    let Some(mut read) = read_lock(path)? else {
        if !fresh {
            ownerless_for(path, false);
        }
        return Ok(None);
    };
    // A fresh read (a name no client has cached) is dated by its mtime alone.
    read.ownerless_for = if fresh {
        Duration::MAX
    } else {
        ownerless_for(path, read.pid().is_none())
    };
    if let OwnerRead::Corrupt(e) = &read.owner {
        tracing::warn!("ignoring unreadable lock owner: {e}");
    }
    if let OwnerRead::Valid(o) = &read.owner {
        if !o.is_this_host() {
            read.unchanged_for = unchanged_for(path, o);
            warn_of_skew(path, o, read.modified);
        }
    }
    let at = Vantage {
        host: host::hostname().to_string(),
        host_id: host::host_id().to_string(),
        boot_id: host::boot_id().to_string(),
        now: SystemTime::now(),
        gated,
        shared: on_shared_fs(path),
    };
    let facts = facts_about(&read);
    let Some(liveness) = verdict(Some(&read), facts.as_ref(), &at, opts) else {
        return Ok(None);
    };
    if liveness.is_stale() {
        tracing::debug!(lock = %path.display(), gated, ?read, ?facts, "judged stale: {liveness:?}");
    }
    Ok(Some(Holder {
        path: path.to_path_buf(),
        pid: read.pid(),
        owner: match read.owner {
            OwnerRead::Valid(o) => Some(o),
            _ => None,
        },
        liveness,
    }))
}
