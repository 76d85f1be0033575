//! A holder's look at its lock's `owner.json` in one open (`openat2` refusing every
//! symbolic link on the way, Linux 5.6+): the check before a task's result is
//! published cost two opens (the lock directory, then the record through it), two
//! reads and two closes. Where `openat2` is missing or refused (an older kernel, a
//! sandbox), or the path runs through a link (a root reached through one), the caller
//! looks the old way.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc;

use super::files::owner_file;
use super::owner::LockOwner;
use crate::fsio::{self, SMALL_FILE_LIMIT};

/// Set once `openat2` was refused as unknown or forbidden: not asked again.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// The owner record of the lock directory at `lock`, read by path with no link
/// followed; `None` when that could not say (the caller then looks the old way).
pub(super) fn read_owner(lock: &Path) -> Option<LockOwner> {
    if UNAVAILABLE.load(Ordering::Relaxed) {
        return None;
    }
    let path = owner_file(lock);
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut file = open_no_links(&c_path)?;
    // One read holds a whole record; a second only when the first filled the buffer.
    let mut bytes = vec![0u8; 4096];
    let n = file.read(&mut bytes).ok()?;
    bytes.truncate(n);
    if n == 4096 {
        file.take(SMALL_FILE_LIMIT).read_to_end(&mut bytes).ok()?;
    }
    fsio::parse_json(&path, &bytes).ok()
}

fn open_no_links(path: &CString) -> Option<File> {
    let base = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    // Without an access-time update where we may (our own file), as the old way.
    for flags in [base | libc::O_NOATIME as u64, base] {
        // SAFETY: open_how is plain data; zeroed is its documented default.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags;
        how.resolve = libc::RESOLVE_NO_SYMLINKS;
        // SAFETY: a valid C path and a valid open_how of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                libc::AT_FDCWD,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor just returned to us.
            return Some(unsafe { File::from_raw_fd(fd as i32) });
        }
        match std::io::Error::last_os_error().raw_os_error() {
            // O_NOATIME on a file not ours: try without.
            Some(libc::EPERM) if flags != base => continue,
            Some(libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::E2BIG) => {
                UNAVAILABLE.store(true, Ordering::Relaxed);
                return None;
            }
            // ELOOP (a link on the way), ENOENT (not in place), …: the old way says.
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_behind_a_link_is_not_read_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let real = base.join("real.lock");
        std::fs::create_dir(&real).unwrap();
        let mut owner = LockOwner::for_this_process();
        owner.epoch = 7;
        std::fs::write(real.join("owner.json"), fsio::to_json_bytes(&owner)).unwrap();
        let read = read_owner(&real).expect("openat2 on this kernel");
        assert_eq!((read.nonce, read.epoch), (owner.nonce.clone(), owner.epoch));
        let link = base.join("link.lock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(read_owner(&link).is_none());
    }
}
