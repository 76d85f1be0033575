//! The guard beside each lock: `<lock>.guard`, a flock that serializes acquire,
//! takeover, heartbeat and release on this host, and holds the lock name's last epoch.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::files;
use crate::error::{Error, Result};
use crate::fsio;

/// The flock beside a lock that serializes acquire, takeover, heartbeat and release on
/// this host (a flock may not cross hosts: the steps are safe without it, only racier).
/// The file holds the lock name's last epoch, in decimal.
///
/// Where flocks do cross hosts (GlusterFS passes them to its server), a host paused
/// while it held a guard would block every other host's step on that lock for as long
/// as it stays paused — a taker could then never judge the paused holder's lease. So
/// the guard is waited for at most [`GUARD_PATIENCE`], and the step then goes on
/// without it ([`Guard::Unheld`]), as it would where flocks stay on their host.
pub(super) enum Guard {
    Held(Flock<File>),
    Unheld(File),
}

/// How long a step waits for a lock's guard: on one host a guard is held for a few
/// file operations; longer means its holder is stopped or on a hung mount.
const GUARD_PATIENCE: Duration = Duration::from_secs(2);

/// Take `file`'s flock, waiting at most [`GUARD_PATIENCE`]; past it, the file unlocked.
/// An `EBADF` (an fcntl-emulated flock on a read-only descriptor) is returned as is.
fn flock_bounded(file: File, gpath: &Path) -> std::result::Result<Guard, (File, Errno)> {
    let deadline = Instant::now() + GUARD_PATIENCE;
    let mut pause = Duration::from_micros(200);
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(f) => return Ok(Guard::Held(f)),
            Err((f, Errno::EWOULDBLOCK)) => {
                if Instant::now() >= deadline {
                    tracing::warn!(
                        "{} stayed locked for {GUARD_PATIENCE:?} (its holder is stopped, or \
                         on another host whose flocks reach this one): going on without it",
                        gpath.display()
                    );
                    return Ok(Guard::Unheld(f));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
                file = f;
            }
            Err((f, Errno::EINTR)) => file = f,
            Err(e) => return Err(e),
        }
    }
}

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
        match flock_bounded(file, &gpath) {
            Ok(g) => Ok(Some(g)),
            // Where flock is emulated with fcntl locks (NFS), an exclusive lock needs a
            // descriptor open for writing.
            Err((_, Errno::EBADF)) => Self::lock_creating(lock_path, false),
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
        flock_bounded(file, &gpath)
            .map(Some)
            .map_err(|(_, errno)| Error::io("flock", &gpath, errno.into()))
    }

    fn file(&self) -> &File {
        match self {
            Guard::Held(f) => f,
            Guard::Unheld(f) => f,
        }
    }

    /// The last epoch recorded for this lock name (0 if none or unreadable).
    pub(super) fn epoch(&self) -> u64 {
        use std::io::{Read, Seek};
        let mut f: &File = self.file();
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
        if let Err(e) = self.file().write_all_at(text.as_bytes(), 0) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose holder never lets go (a paused host, where flocks cross hosts) holds
    /// a step up for [`GUARD_PATIENCE`], not for ever; a free one is taken.
    #[test]
    fn a_guard_held_by_a_stopped_holder_is_given_up_on_after_its_patience() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("slot.lock");
        let gpath = guard_path(&lock);
        // Another open file description: its flock conflicts with ours, as another
        // host's would where flocks reach the server.
        let holder = Flock::lock(File::create(&gpath).unwrap(), FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .unwrap();
        let t = Instant::now();
        let g = Guard::lock(&lock).unwrap();
        assert!(matches!(g, Guard::Unheld(_)), "taken while held");
        assert!(
            t.elapsed() >= GUARD_PATIENCE,
            "gave up after {:?}",
            t.elapsed()
        );
        g.set_epoch(7);
        assert_eq!(
            g.epoch(),
            7,
            "the epoch is still read and written unguarded"
        );
        drop(g);
        drop(holder);
        assert!(matches!(Guard::lock(&lock).unwrap(), Guard::Held(_)));
        assert!(matches!(
            Guard::existing(&lock).unwrap(),
            Some(Guard::Held(_))
        ));
    }
}
