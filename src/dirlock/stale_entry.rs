//! A lock another host removed that this host's filesystem client still shows: told by
//! a fresh listing, so that a task waiting for it is looked at again soon.
//!
//! GlusterFS's FUSE client answers a lookup of a name it has seen from its own caches:
//! a lock freed on another host was still there here for ~0.9 s, longer while this host
//! kept looking it up and its directory lived on under another name (a parked spare,
//! a tombstone), while a listing of its directory no longer held it after 1–20 ms
//! (measured on the harness's mounts: BENCHMARKS.md, "A freed lock, a lifted pause, a
//! result across hosts"). Nothing is placed past such an entry: FUSE there cannot
//! rename without replacing (`RENAME_NOREPLACE` is refused by the kernel against the
//! stale entry and `EINVAL` when it reaches the client), and a plain `rename` onto a
//! name the kernel still shows replaces what it maps to in this host's kernel and
//! could replace an empty directory on the server — a lock being made by an
//! mkdir-based client. The lock is only looked at again until the client lets go.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Whether the lock at `path`, which this host still shows, was removed on the server
/// (by another host): on a filesystem whose client keeps removed names, a fresh
/// listing of its directory does not hold it. A reader that finds a lock held asks
/// this to know whether to look again soon rather than wait for news.
pub(crate) fn removed_elsewhere(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    keeps_removed_names(dir) && !listed(dir, name)
}

/// Whether `dir`'s filesystem client keeps a removed name past its removal on another
/// host (GlusterFS's FUSE client). Remembered per directory: a local filesystem pays
/// one `statfs` per directory per process.
fn keeps_removed_names(dir: &Path) -> bool {
    static KNOWN: Mutex<Option<HashMap<PathBuf, bool>>> = Mutex::new(None);
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(&keeps) = known.get(dir) {
        return keeps;
    }
    // A `statfs` first: the mount table is read only for a filesystem that delivers
    // no change events (FUSE, network filesystems).
    let eventless = crate::fs_kind::of(dir)
        .ok()
        .flatten()
        .is_some_and(|k| k.eventless);
    let keeps = eventless
        && crate::fs_kind::mount_of(dir)
            .ok()
            .flatten()
            .is_some_and(|m| m.stat_needs_a_read_first());
    known.insert(dir.to_path_buf(), keeps);
    keeps
}

/// Whether a fresh listing of `dir` holds `name` (an unreadable directory: as if it
/// did).
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
    fn a_local_filesystem_never_doubts_a_lock_it_shows() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("k.lock");
        fs::create_dir(&lock).unwrap();
        assert!(!removed_elsewhere(&lock), "listed, and local anyway");
        fs::remove_dir(&lock).unwrap();
        assert!(!removed_elsewhere(&lock), "a local kernel's word is the truth");
    }

    #[test]
    fn a_name_listed_is_there() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("k.lock")).unwrap();
        assert!(listed(dir.path(), std::ffi::OsStr::new("k.lock")));
        assert!(!listed(dir.path(), std::ffi::OsStr::new("j.lock")));
        assert!(!listed(&dir.path().join("gone"), std::ffi::OsStr::new("k")));
    }
}
