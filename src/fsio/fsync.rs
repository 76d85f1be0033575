//! Whether this process fsyncs (its root's `config.json` `fsync`, and whether its root's
//! filesystem outlives the machine): one switch, read by every durable write.

use std::path::Path;

/// Whether this process fsyncs: on unless its root's config turns it off
/// ([`set_fsync`]); a process serves one root.
static FSYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turn this process's fsyncs on or off, as its root's `config.json` `fsync` says (off
/// only for a root whose loss with the machine costs nothing: `conductor run`'s private
/// one). Every write stays atomic (temp file, then rename or link) either way.
pub fn set_fsync(on: bool) {
    FSYNC.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn fsync_on() -> bool {
    FSYNC.load(std::sync::atomic::Ordering::Relaxed)
}

/// [`set_fsync`] for a process serving the root at `root_dir` whose config asks
/// `configured`: on only where a commit can keep anything — not on a filesystem held
/// in memory alone (tmpfs, ramfs), which a machine crash empties whatever was
/// committed, so a commit there buys nothing (issue 39: on tmpfs a durable root's
/// worker made three `syncfs` a task). Returns whether fsyncs are on.
pub fn set_fsync_for_root(root_dir: &Path, configured: bool) -> bool {
    let on = configured && !held_in_memory(root_dir);
    set_fsync(on);
    on
}

/// Whether `dir` is on a filesystem held in memory alone (tmpfs, ramfs); `false` when
/// that cannot be told.
pub fn held_in_memory(dir: &Path) -> bool {
    matches!(crate::fs_kind::of(dir), Ok(Some(kind)) if kind.held_in_memory())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What statfs says agrees with the mount table (the switch itself is
    /// process-wide, so it is proven by
    /// `group_commit::a_root_on_tmpfs_is_served_without_commits`, not flipped here under
    /// other tests' feet).
    #[test]
    fn a_directory_is_held_in_memory_as_the_mount_table_says() {
        for dir in ["/dev/shm", "/tmp", env!("CARGO_MANIFEST_DIR")] {
            let dir = Path::new(dir);
            let Ok(Some(mount)) = crate::fs_kind::mount_of(dir) else {
                continue;
            };
            let in_memory = matches!(mount.fs_type.as_str(), "tmpfs" | "ramfs");
            assert_eq!(held_in_memory(dir), in_memory, "{}", dir.display());
        }
        assert!(!held_in_memory(Path::new("/no/such/dir")), "unknown: not in memory");
    }
}
