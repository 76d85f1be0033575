//! The claim's check of the directories a task's files go into (each a real, private
//! directory of ours, not a link: [`crate::trust`]), made once per worker life and then
//! again only when the kernel tells that one of them was moved, removed, or had its
//! mode or owner changed (inotify on the directories themselves). It was 6–8 `statx` a
//! claim; now one `read` that finds nothing.
//!
//! Only for a worker of one slot (one inotify instance a process), and only where
//! changes are told to local watchers (not NFS, FUSE or other shared filesystems, where
//! another host's change is never seen): elsewhere every claim checks as before.

use std::path::PathBuf;
use std::sync::Mutex;

use inotify::{Inotify, WatchMask};

use crate::error::Result;
use crate::layout::{Root, WorkerPaths};

/// How a slot's claims check their directories.
pub(crate) struct DirsCheck(Mutex<State>);

enum State {
    /// Every claim checks (many slots in one process, a shared filesystem).
    Each,
    /// Not watched yet (or a change was told): the next claim watches, then checks.
    /// The count: failed attempts to watch so far.
    Unarmed(u8),
    /// Checked, and watched since: a claim reads the watch only.
    Armed(Inotify),
}

/// Attempts to watch (a directory missing yet, say) before every claim checks instead.
const ATTEMPTS: u8 = 3;

impl DirsCheck {
    /// Every claim checks.
    pub(crate) fn each() -> DirsCheck {
        DirsCheck(Mutex::new(State::Each))
    }

    /// Checked once, then watched.
    pub(crate) fn watched() -> DirsCheck {
        DirsCheck(Mutex::new(State::Unarmed(0)))
    }

    /// Refuse a claim whose files would go through a link or into a directory another
    /// user controls. `inbox`: a task from the slot's inbox, whose files never go into
    /// `queue/` (checked every time, the queue's directories are left out).
    pub(crate) fn verify(&self, root: &Root, paths: &WorkerPaths, inbox: bool) -> Result<()> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let attempts = match &mut *state {
            State::Each if inbox => return crate::trust::verify_inbox_task_dirs(root, paths),
            State::Each => return crate::trust::verify_task_dirs(root, paths),
            State::Armed(watch) => {
                if quiet(watch) {
                    return Ok(());
                }
                0
            }
            State::Unarmed(n) => *n,
        };
        // Watched first, then checked: a change after the check is told.
        *state = State::Unarmed(attempts);
        let watch = watch(&task_dirs(root, paths));
        crate::trust::verify_task_dirs(root, paths)?;
        *state = match watch {
            Some(w) => State::Armed(w),
            None if attempts + 1 >= ATTEMPTS => State::Each,
            None => State::Unarmed(attempts + 1),
        };
        Ok(())
    }
}

/// Every directory [`crate::trust::verify_task_dirs`] checks, and the root above them:
/// a root renamed away and replaced (a link to another's tree) moves none of the eight.
fn task_dirs(root: &Root, paths: &WorkerPaths) -> Vec<PathBuf> {
    let mut dirs = vec![root.path().to_path_buf()];
    dirs.extend(crate::trust::task_dirs(root, paths));
    dirs
}

/// Nothing told since the last read (any event, an overflow or an error: not quiet).
fn quiet(watch: &mut Inotify) -> bool {
    let mut buf = [0u8; 1024];
    matches!(watch.read_events(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Watch each of `dirs` itself — not through a link, a directory only — where the
/// filesystem tells local watchers of every change; `None` where it cannot.
fn watch(dirs: &[PathBuf]) -> Option<Inotify> {
    for dir in dirs {
        let kind = crate::fs_kind::of(dir).ok()??;
        if kind.eventless || kind.name.starts_with("filesystem type") {
            return None;
        }
    }
    let watch = Inotify::init().ok()?;
    let mask = WatchMask::MOVE_SELF
        | WatchMask::DELETE_SELF
        | WatchMask::ATTRIB
        | WatchMask::DONT_FOLLOW
        | WatchMask::ONLYDIR;
    for dir in dirs {
        watch.watches().add(dir, mask).ok()?;
    }
    Some(watch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Slot;

    fn slot() -> (tempfile::TempDir, Root, WorkerPaths) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        crate::queue::init_root(&root).unwrap();
        let paths = root.worker(Slot(0));
        crate::fsio::ensure_dir(&paths.dir).unwrap();
        paths.create_dirs().unwrap();
        crate::fsio::ensure_dir(&root.ids_dir()).unwrap();
        (dir, root, paths)
    }

    #[test]
    fn a_directory_replaced_by_a_link_after_the_first_check_is_refused() {
        let (dir, root, paths) = slot();
        let check = DirsCheck::watched();
        check.verify(&root, &paths, true).unwrap();
        assert!(matches!(*check.0.lock().unwrap(), State::Armed(_)), "tmp is local");
        check.verify(&root, &paths, true).unwrap();
        let results = paths.results_dir();
        std::fs::rename(&results, dir.path().join("moved")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, &results).unwrap();
        let err = check.verify(&root, &paths, true).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        // And again: the refusal holds until the link is gone.
        assert!(check.verify(&root, &paths, true).is_err());
    }

    /// The watched directories stay as they were; the root above them is what changed.
    #[test]
    fn a_root_moved_away_and_replaced_after_the_first_check_is_checked_again() {
        let (dir, root, paths) = slot();
        let check = DirsCheck::watched();
        check.verify(&root, &paths, true).unwrap();
        check.verify(&root, &paths, true).unwrap();
        std::fs::rename(root.path(), dir.path().join("moved")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::create_dir(root.path()).unwrap();
        std::os::unix::fs::symlink(&outside, root.workers_dir()).unwrap();
        let err = check.verify(&root, &paths, true).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
    }

    #[test]
    fn a_mode_opened_to_others_after_the_first_check_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, root, paths) = slot();
        let check = DirsCheck::watched();
        check.verify(&root, &paths, true).unwrap();
        let tasks = paths.tasks_dir();
        std::fs::set_permissions(&tasks, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = check.verify(&root, &paths, true).unwrap_err().to_string();
        assert!(err.contains("writable by group or others"), "{err}");
    }
}
