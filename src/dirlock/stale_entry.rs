//! A lock another host removed that this host's kernel still shows: placing ours past
//! the stale entry, the server deciding.
//!
//! GlusterFS's FUSE client lets the kernel keep a name it looked up for its entry
//! timeout (1 s by default), and answers for it from its metadata cache: a lock freed
//! on another host was still there here for ~0.9 s — `RENAME_NOREPLACE` refused by the
//! kernel itself (the target's entry is positive), a `stat` of it answered — so a task
//! waiting for the key started up to 2 s after the key was free (measured on the
//! harness's mounts: BENCHMARKS.md, "A freed lock, a lifted pause, a result across
//! hosts"). A fresh listing of the lock's directory does reach the server (1–20 ms
//! there). When it does not list the name, a plain `rename` is sent: the kernel passes
//! it to the server, which refuses it if a lock is there after all (a lock directory is
//! never empty: `ENOTEMPTY`), so two placers never both win.

use std::fs;
use std::io;
use std::path::Path;

use crate::error::{Error, Result};

/// After `spare` could not be placed at `path` because the name looked taken: on a
/// filesystem whose client keeps removed names (GlusterFS), place it if a fresh listing
/// of `path`'s directory says the name is free. Whether it was placed.
pub(super) fn place_past_a_stale_entry(spare: &Path, path: &Path) -> Result<bool> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(false);
    };
    if !spare.is_dir() || !keeps_removed_names(dir) || listed(dir, name) {
        return Ok(false);
    }
    match fs::rename(spare, path) {
        Ok(()) => {
            tracing::debug!(
                "placed lock {} past a stale entry of this host's",
                path.display()
            );
            Ok(true)
        }
        Err(e) if refused_for_a_lock_there(&e) => Ok(false),
        // A refusal of another kind with the name listed now: someone placed theirs.
        Err(_) if listed(dir, name) => Ok(false),
        Err(e) => Err(Error::io("rename spare lock into", path, e)),
    }
}

/// Whether the lock at `path`, which this host still shows, was removed on the server
/// (by another host): on a filesystem whose client keeps removed names, a fresh
/// listing of its directory does not hold it. What a reader of a lock that finds it
/// held asks before it waits on it (a key, a run slot, a group's cap).
pub(crate) fn removed_elsewhere(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    keeps_removed_names(dir) && !listed(dir, name)
}

/// The name is taken after all (`EEXIST`, `ENOTEMPTY`), or our spare went (`ENOENT`).
fn refused_for_a_lock_there(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(nix::libc::EEXIST | nix::libc::ENOTEMPTY | nix::libc::ESTALE)
        )
}

/// Whether `dir`'s filesystem client keeps a removed name past its removal on another
/// host (GlusterFS's FUSE client).
fn keeps_removed_names(dir: &Path) -> bool {
    // A `statfs` first (cheap on a local filesystem): the mount table is read only for
    // a filesystem that delivers no change events (FUSE, network filesystems).
    let eventless = crate::fs_kind::of(dir)
        .ok()
        .flatten()
        .is_some_and(|k| k.eventless);
    eventless
        && crate::fs_kind::mount_of(dir)
            .ok()
            .flatten()
            .is_some_and(|m| m.stat_needs_a_read_first())
}

/// Whether a fresh listing of `dir` holds `name` (an unreadable directory: as if it
/// did, so that nothing is placed on a guess).
fn listed(dir: &Path, name: &std::ffi::OsStr) -> bool {
    match fs::read_dir(dir) {
        Ok(entries) => entries.flatten().any(|e| e.file_name() == name),
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_filesystem_never_takes_the_second_way() {
        let dir = tempfile::tempdir().unwrap();
        let (spare, path) = (dir.path().join("spare"), dir.path().join("k.lock"));
        fs::create_dir(&spare).unwrap();
        // The name is free, but a local kernel's word is the truth: nothing to go past.
        assert!(!place_past_a_stale_entry(&spare, &path).unwrap());
        assert!(spare.is_dir() && !path.exists());
        fs::create_dir(&path).unwrap();
        assert!(!removed_elsewhere(&path), "listed, and local anyway");
    }

    #[test]
    fn a_name_listed_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("k.lock")).unwrap();
        assert!(listed(dir.path(), std::ffi::OsStr::new("k.lock")));
        assert!(!listed(dir.path(), std::ffi::OsStr::new("j.lock")));
        assert!(!listed(&dir.path().join("gone"), std::ffi::OsStr::new("k")));
    }
}
