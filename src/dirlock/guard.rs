//! The guard beside each lock: `<lock>.guard`, a flock that serializes acquire,
//! takeover, heartbeat and release on this host, and holds the lock name's last epoch.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::files;
use crate::error::{Error, Result};
use crate::fsio;

/// The flock beside a lock that serializes acquire, takeover, heartbeat and release on
/// this host (a flock may not cross hosts: the steps are safe without it, only racier).
/// The file holds the lock name's last epoch, in decimal.
pub(super) struct Guard(Flock<File>);

impl Guard {
    pub(super) fn lock(lock_path: &Path) -> Result<Guard> {
        Self::lock_creating(lock_path, true).map(|g| g.expect("created if missing"))
    }

    /// The guard of a lock we hold: it exists unless the directory it was in is gone or
    /// was swapped (then `None`, and nothing is created there — the ownership check
    /// that follows finds the lock lost).
    ///
    /// Opened read-only: heartbeat and release never write the guard, and closing a
    /// descriptor opened for writing is an `IN_CLOSE_WRITE` in the directory beside
    /// the lock — a slot directory its worker watches, woken by every renewal.
    pub(super) fn existing(lock_path: &Path) -> Result<Option<Guard>> {
        let gpath = guard_path(lock_path);
        let file = match OpenOptions::new().read(true).open(&gpath) {
            Ok(f) => f,
            Err(e) if files::vanished(&e) => return Ok(None),
            Err(e) => return Err(Error::io("open lock guard", &gpath, e)),
        };
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(f) => Ok(Some(Guard(f))),
            // Where flock is emulated with fcntl locks (NFS), an exclusive lock needs a
            // descriptor open for writing.
            Err((_, nix::errno::Errno::EBADF)) => Self::lock_creating(lock_path, false),
            Err((_, errno)) => Err(Error::io("flock", &gpath, errno.into())),
        }
    }

    fn lock_creating(lock_path: &Path, create: bool) -> Result<Option<Guard>> {
        let gpath = guard_path(lock_path);
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(0o600)
                .open(&gpath)
        };
        let file = match open() {
            Ok(f) => f,
            Err(e) if !create && files::vanished(&e) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = gpath.parent() {
                    fsio::ensure_dir(parent)?;
                }
                open().map_err(|e| Error::io("create lock guard", &gpath, e))?
            }
            Err(e) => return Err(Error::io("open lock guard", &gpath, e)),
        };
        Flock::lock(file, FlockArg::LockExclusive)
            .map(|f| Some(Guard(f)))
            .map_err(|(_, errno)| Error::io("flock", &gpath, errno.into()))
    }

    /// The last epoch recorded for this lock name (0 if none or unreadable).
    pub(super) fn epoch(&self) -> u64 {
        use std::io::{Read, Seek};
        let mut f: &File = &self.0;
        let mut text = String::new();
        let read = f
            .seek(io::SeekFrom::Start(0))
            .and_then(|_| f.take(32).read_to_string(&mut text));
        read.ok()
            .and_then(|_| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Record `epoch` as the lock name's last, best effort: a lost write only lets a
    /// later acquisition reuse a number of a holder that is already gone; a takeover
    /// always counts past the owner it replaces.
    pub(super) fn set_epoch(&self, epoch: u64) {
        use std::os::unix::fs::FileExt;
        let text = format!("{epoch:<20}\n");
        if let Err(e) = self.0.write_all_at(text.as_bytes(), 0) {
            tracing::debug!("recording lock epoch {epoch}: {e}");
        }
    }
}

/// `<lock>.guard`, the flock file beside a lock.
fn guard_path(lock_path: &Path) -> PathBuf {
    let mut name = lock_path.as_os_str().to_owned();
    name.push(".guard");
    PathBuf::from(name)
}
