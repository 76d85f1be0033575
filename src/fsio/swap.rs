//! Replacing a small, often rewritten file by swapping it with its second name.
//!
//! A temp file renamed over the old one allocates an inode per write and frees one.
//! On some filesystems both are expensive, and the free makes later allocations
//! dearer still: ext4 without a journal skips every inode freed in the last minutes
//! when it allocates one, reading each one's inode table entry to find that out (here
//! that took a file creation from ~40 µs to ~1 ms after a burst of writes). Instead
//! the next version is written into `.<name>.next` — overwritten in place, no inode
//! made or freed — and the two names are swapped in one step (`RENAME_EXCHANGE`).
//! A reader opening `<name>` still sees one whole version or the other; the version
//! swapped out is rewritten by the *next* write, so a reader holding it open across
//! two writes could see it change (our readers read it again when it does not parse).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::Mode;

use crate::error::{Error, Result};

/// Filesystems (by device) found unable to swap names: no more tries there.
static NO_EXCHANGE: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The second name of `name`: `.NAME.next`.
pub fn next_name(name: &OsStr) -> OsString {
    let mut next = OsString::from(".");
    next.push(name);
    next.push(".next");
    next
}

/// Whether a swap in `dir`'s filesystem was refused before (then nothing should be
/// prepared for one). The directory is stat'ed only once some filesystem has refused.
pub fn refused_in(dir: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let refused = NO_EXCHANGE.lock().unwrap_or_else(|e| e.into_inner());
    !refused.is_empty() && dir.metadata().is_ok_and(|m| refused.contains(&m.dev()))
}

/// Replace `name` in the directory open as `dir` with `bytes` by swapping it with its
/// second name; `path` (the file's full path) names it in errors. `None` where the
/// filesystem cannot swap names (NFS, FUSE, older kernels, other systems): the caller
/// then writes a temp file and renames it. When `name` does not exist yet the second
/// name is renamed to it.
///
/// Only one writer at a time per file: two writers of one `.next` could interleave.
pub fn swap_in_at(dir: &File, name: &OsStr, path: &Path, bytes: &[u8]) -> Option<Result<()>> {
    swap_in_at_via(dir, name, &next_name(name), path, bytes)
}

/// [`swap_in_at`] with a second name of the caller's choosing (one per writer where
/// several processes may replace one file).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn swap_in_at_via(
    dir: &File,
    name: &OsStr,
    next: &OsStr,
    path: &Path,
    bytes: &[u8],
) -> Option<Result<()>> {
    use nix::fcntl::{renameat2, RenameFlags};
    use std::os::unix::fs::MetadataExt;
    if refused_in(dir) {
        return None;
    }
    // Overwritten in place, cut only if it was longer (records hardly change length):
    // truncating first would free the file's block and allocate it again.
    let write = || -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC;
        let open =
            |extra: OFlag| fcntl::openat(dir, next, flags | extra, Mode::from_bits_truncate(0o600));
        // The second name is ours alone: whatever else is found there (a link planted
        // in its place, or swapped there from the first name; a file with another name
        // elsewhere, which an in-place write would change) is removed, never written
        // through, and the name made afresh.
        let fresh = || -> io::Result<File> {
            let _ = nix::unistd::unlinkat(dir, next, nix::unistd::UnlinkatFlags::NoRemoveDir);
            Ok(File::from(open(OFlag::O_EXCL)?))
        };
        // With the length it had: only we write this name, so it is still that after
        // our write unless the write made it longer (no second `stat` a publish).
        let (file, had) = match open(OFlag::empty()) {
            Err(Errno::ELOOP | Errno::ENXIO) => (fresh()?, 0),
            Err(e) => return Err(e.into()),
            Ok(fd) => {
                let file = File::from(fd);
                let meta = file.metadata()?;
                if meta.file_type().is_file() && meta.nlink() == 1 {
                    (file, meta.len())
                } else {
                    drop(file);
                    (fresh()?, 0)
                }
            }
        };
        file.write_all_at(bytes, 0)?;
        let len = bytes.len() as u64;
        if had > len {
            file.set_len(len)?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        return Some(Err(Error::io("write", path.with_file_name(next), e)));
    }
    let swap = RenameFlags::RENAME_EXCHANGE;
    let failed = match renameat2(dir, next, dir, name, swap) {
        Ok(()) => return Some(Ok(())),
        Err(e) => e,
    };
    match failed {
        Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP => {
            let dev = dir.metadata().map(|m| m.dev()).unwrap_or(0);
            NO_EXCHANGE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(dev);
            let _ = nix::unistd::unlinkat(dir, next, nix::unistd::UnlinkatFlags::NoRemoveDir);
            None
        }
        // Nothing to swap with yet: the second name becomes the first.
        Errno::ENOENT => Some(
            fcntl::renameat(dir, next, dir, name)
                .map_err(|e| Error::io("rename into place", path, e.into())),
        ),
        e => Some(Err(Error::io("swap into place", path, e.into()))),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn swap_in_at_via(
    _dir: &File,
    _name: &OsStr,
    _next: &OsStr,
    _path: &Path,
    _bytes: &[u8],
) -> Option<Result<()>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A directory, `name`'s path in it, and the directory open, with `first` swapped
    /// in; `None` where this filesystem cannot swap names (skipped, or failed under CI).
    fn swapped_first(name: &str, first: &[u8]) -> Option<(tempfile::TempDir, PathBuf, File)> {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(name);
        let dir = File::open(tmp.path()).unwrap();
        let Some(done) = swap_in_at(&dir, OsStr::new(name), &path, first) else {
            crate::test_support::skip_or_fail(
                "this filesystem cannot swap names (RENAME_EXCHANGE)",
            );
            return None;
        };
        done.unwrap();
        Some((tmp, path, dir))
    }

    #[test]
    fn a_swap_replaces_the_file_without_making_or_freeing_an_inode() {
        use std::os::unix::fs::MetadataExt;
        let Some((tmp, path, dir)) = swapped_first("status.json", b"{\"n\":1}\n") else {
            return;
        };
        let name = OsStr::new("status.json");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"n\":1}\n");
        swap_in_at(&dir, name, &path, b"{\"n\":22}\n")
            .unwrap()
            .unwrap();
        let inodes = |p: &Path| {
            let mut v: Vec<u64> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap().ino())
                .collect();
            v.sort();
            v
        };
        let before = inodes(tmp.path());
        assert_eq!(before.len(), 2, "the file and its second name");
        for n in 3..50 {
            let text = format!("{{\"n\":{n}}}\n");
            swap_in_at(&dir, name, &path, text.as_bytes())
                .unwrap()
                .unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        // Shorter than what the second name held: cut, not padded.
        swap_in_at(&dir, name, &path, b"{}\n").unwrap().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
        assert_eq!(inodes(tmp.path()), before, "the same two inodes throughout");
    }

    #[test]
    fn a_reader_holding_the_old_version_keeps_it_whole_through_one_write() {
        let Some((_tmp, path, dir)) = swapped_first("owner.json", b"first\n") else {
            return;
        };
        let name = OsStr::new("owner.json");
        let held = File::open(&path).unwrap();
        swap_in_at(&dir, name, &path, b"second, longer\n")
            .unwrap()
            .unwrap();
        let mut seen = String::new();
        io::Read::read_to_string(&mut &held, &mut seen).unwrap();
        assert_eq!(seen, "first\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second, longer\n");
    }
}
