//! The two files of a slot's status swap kept open (a single-slot worker): a publish
//! is a look at the second name, a write and the swap — 3 calls, no open, where opening
//! `.status.json.next` by name each time cost an open, a `stat` and a close.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};

use nix::fcntl::{renameat2, RenameFlags};
use nix::sys::stat::{fstatat, FileStat};

/// `status.json` and its second name, open, with what we know of each.
pub(super) struct KeptSwap {
    /// The file named by the status now.
    current: Kept,
    /// The file under the second name: the next version is written into it.
    next: Kept,
}

struct Kept {
    file: File,
    ino: u64,
    dev: u64,
    len: u64,
}

impl Kept {
    fn open(dir: &File, name: &OsStr) -> Option<Kept> {
        use nix::fcntl::{openat, OFlag};
        let flags = OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = openat(dir, name, flags, nix::sys::stat::Mode::empty()).ok()?;
        let file = File::from(fd);
        let meta = file.metadata().ok()?;
        // Ours alone: a regular file of one name (an in-place write must not change a
        // file that has another name elsewhere).
        (meta.file_type().is_file() && meta.nlink() == 1).then_some(Kept {
            ino: meta.ino(),
            dev: meta.dev(),
            len: meta.len(),
            file,
        })
    }

    fn is(&self, st: &FileStat) -> bool {
        st.st_ino == self.ino
            && st.st_dev == self.dev
            && st.st_nlink == 1
            && st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFREG
    }
}

impl KeptSwap {
    /// Open both names in `dir` (after a swap by name made them both exist).
    pub(super) fn open(dir: &File, name: &OsStr, next: &OsStr) -> Option<KeptSwap> {
        Some(KeptSwap {
            current: Kept::open(dir, name)?,
            next: Kept::open(dir, next)?,
        })
    }

    /// Write `bytes` into the second name's file and swap the names. `false`: the
    /// second name no longer holds our file (another writer swapped or replaced it) or
    /// a call failed — nothing was swapped; the caller forgets these files and publishes
    /// by name.
    pub(super) fn publish(&mut self, dir: &File, name: &OsStr, next: &OsStr, bytes: &[u8]) -> bool {
        // The name is looked at, not trusted: a swap made by name elsewhere (recovery)
        // would have put the status itself under it.
        let Ok(st) = fstatat(dir, next, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return false;
        };
        if !self.next.is(&st) {
            return false;
        }
        if self.next.file.write_all_at(bytes, 0).is_err() {
            return false;
        }
        let len = bytes.len() as u64;
        // Its size as found, not as we left it: a writer by name may have written into
        // it in place (and failed to swap it), leaving it longer.
        let found = u64::try_from(st.st_size).unwrap_or(u64::MAX).max(self.next.len);
        if found > len && self.next.file.set_len(len).is_err() {
            return false;
        }
        self.next.len = len;
        if renameat2(dir, next, dir, name, RenameFlags::RENAME_EXCHANGE).is_err() {
            return false;
        }
        std::mem::swap(&mut self.current, &mut self.next);
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::{Root, Slot};
    use crate::protocol::{Status, WorkerState};
    use crate::worker::status::StatusBoard;

    fn read(path: &std::path::Path) -> Status {
        Status::read(path).unwrap().unwrap()
    }

    /// A swap made by name in between (recovery writes a slot's status that way) puts
    /// the status under the second name: the kept files must not be trusted then, or
    /// the next publish would write into the status in place and swap an old one back.
    #[test]
    fn a_swap_by_name_in_between_is_seen_and_the_latest_status_stands() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        let paths = root.worker(Slot(0));
        crate::fsio::ensure_dir(&paths.dir).unwrap();
        let board = StatusBoard::new(&paths, Vec::new());
        board.keep_dir_open();
        let with_problem = |p: &str| {
            let mut st = Status::new(WorkerState::Idle);
            st.problem = Some(p.to_string());
            st
        };
        for i in 0..4 {
            board.publish(with_problem(&format!("kept {i}"))).unwrap();
            assert_eq!(read(&paths.status()).problem.unwrap(), format!("kept {i}"));
        }
        let bytes = crate::fsio::to_json_bytes(&with_problem("by name"));
        crate::fsio::write_swapped(&paths.status(), &bytes).unwrap();
        assert_eq!(read(&paths.status()).problem.unwrap(), "by name");
        for i in 0..3 {
            board.publish(with_problem(&format!("again {i}"))).unwrap();
            assert_eq!(read(&paths.status()).problem.unwrap(), format!("again {i}"));
        }
        // A shorter status after a longer one leaves nothing of the longer.
        board.publish(Status::new(WorkerState::Idle)).unwrap();
        assert_eq!(read(&paths.status()).problem, None);
    }
}
