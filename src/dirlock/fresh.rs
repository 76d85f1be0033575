//! Whether a lock another host removed is gone, asked of the server past the client's
//! caches of names (a shared filesystem only).
//!
//! A network or FUSE client keeps a name it looked up for a while (the kernel's entry
//! timeout: 1 s on GlusterFS, whose md-cache also keeps the attributes until the next
//! whole second) and answers `stat`, `open` and even reads of the files inside from
//! those caches: a lock another host removed stays "held" here until they expire. A
//! worker woken by the lock directory's change (seen once md-cache let it through) that
//! then read the lock from those caches found it held and went back to sleep until its
//! next rescan, 2 s later (the freed-lock leg of BENCHMARKS.md's GlusterFS freshness,
//! ~2.1 s p50). A `statx` with `AT_STATX_FORCE_SYNC` asks the client for the inode's
//! attributes now; for a directory the server no longer has, the answer is `ENOENT` or
//! `ESTALE`, on which the kernel drops the cached name (measured on the harness's
//! GlusterFS 10.3: a plain `lstat` just before still said it exists, one just after
//! said `ENOENT`).

use std::path::Path;

use nix::errno::Errno;

use super::age::on_shared_fs;

/// Whether the lock directory at `path`, which a `stat` answered by this host's caches
/// may still show, is gone for the filesystem's server. Always `false` on a local
/// filesystem (no cache to get past: not asked, nothing paid).
pub(super) fn gone_on_server(path: &Path) -> bool {
    on_shared_fs(path) && forced_stat(path).is_err_and(|e| vanished(&e))
}

/// Removed, or replaced on a network filesystem (`files::vanished`, not imported: the
/// placing of locks there asks this module).
fn vanished(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::ENOENT | Errno::ESTALE | Errno::ENOTDIR)
    )
}

/// `statx(AT_STATX_FORCE_SYNC)` of `path` itself (not following a symlink).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn forced_stat(path: &Path) -> std::io::Result<()> {
    crate::fsio::statx_from_server(path).map(drop)
}

/// Elsewhere a plain `lstat`: what the caches say.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn forced_stat(path: &Path) -> std::io::Result<()> {
    std::fs::symlink_metadata(path).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_shared_filesystem_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("k.lock");
        std::fs::create_dir(&lock).unwrap();
        assert!(!gone_on_server(&lock));
        std::fs::remove_dir(&lock).unwrap();
        // On a local filesystem (the usual temp dir) not asked at all: the caller's own
        // stat already said whether it is there.
        assert_eq!(gone_on_server(&lock), on_shared_fs(&lock));
    }

    #[test]
    fn a_forced_stat_tells_a_missing_lock() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("k.lock");
        assert!(forced_stat(&lock).is_err_and(|e| vanished(&e)));
        std::fs::create_dir(&lock).unwrap();
        assert!(forced_stat(&lock).is_ok());
    }
}
