//! Linux inotify with a mask of changes only: reads of a watched directory wake nobody.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchMask};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::events::count_events;
use super::mode::{How, OnChange};

/// What changes a directory's contents or a file in it. Left out on purpose:
/// `IN_OPEN`, `IN_ACCESS` and `IN_CLOSE_NOWRITE`, which every `ls`, `conductor status`
/// or polling neighbour causes (notify always asks for them).
fn change_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// What a slot's inbox directory needs to be watched for: a file arriving there (linked,
/// renamed in, or written in place and closed), and the directory itself going. Its
/// worker's own bookkeeping there — status rewrites, the agent's output, a lock's guard,
/// a result's temporary file — modifies, deletes and moves away, and woke the watcher
/// ~13 times a task for nothing.
fn arrival_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

/// What a directory of published files needs to be watched for when each file is
/// published whole, by a link or a rename (a slot's `results/`): the name appearing,
/// and the directory going. The publisher's temporary file still makes one `IN_CREATE`.
fn published_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

fn mask(how: How) -> WatchMask {
    match how {
        How::Changes => change_mask(),
        How::Arrivals => arrival_mask(),
        How::Published => published_mask(),
    }
}

/// Why native watching could not start.
pub(super) enum NativeError {
    /// A directory to watch is missing: the caller's error.
    Missing(PathBuf, io::Error),
    /// inotify itself is unavailable (a limit reached): fall back to polling.
    Unavailable(io::Error),
}

/// One inotify instance and the thread reading it.
pub(super) struct Native {
    /// Closing it (the watcher dropped) makes the reader's poll return: the thread exits
    /// and closes the inotify instance on its own. It is not waited for: that close
    /// blocks ~16 ms on this kernel (the instance's marks are freed after an SRCU grace
    /// period) and every owner — a wait that has its answer, `conductor run` stopping its
    /// workers — has better things to do meanwhile. The instance is gone a few
    /// milliseconds later; a process that exits first still waits for it.
    _stop: OwnedFd,
}

impl Native {
    /// Watch each directory as it says.
    pub(super) fn start(
        dirs: &[(&PathBuf, How)],
        on_change: OnChange,
    ) -> Result<Native, NativeError> {
        let (ino, dir_of) = open(dirs)?;
        let (stop_r, stop_w) =
            nix::unistd::pipe().map_err(|e| NativeError::Unavailable(e.into()))?;
        // Detached: see `_stop`.
        std::thread::Builder::new()
            .name("conductor-inotify".into())
            .spawn(move || read_loop(ino, stop_r, dir_of, on_change))
            .map_err(NativeError::Unavailable)?;
        Ok(Native { _stop: stop_w })
    }
}

type DirOf = HashMap<inotify::WatchDescriptor, PathBuf>;

/// An inotify instance watching each directory as it says.
fn open(dirs: &[(&PathBuf, How)]) -> Result<(Inotify, DirOf), NativeError> {
    let ino = Inotify::init().map_err(NativeError::Unavailable)?;
    let mut dir_of = HashMap::new();
    let mut watches = ino.watches();
    for &(d, how) in dirs {
        match watches.add(d, mask(how)) {
            Ok(wd) => {
                dir_of.insert(wd, d.clone());
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(nix::libc::ENOENT | nix::libc::ENOTDIR)
                ) =>
            {
                return Err(NativeError::Missing(d.clone(), e))
            }
            Err(e) => return Err(NativeError::Unavailable(e)),
        }
    }
    Ok((ino, dir_of))
}

/// Read every event waiting (none: at once) and tell `on_change` of each; how many, or
/// `None` when the instance failed (after telling `on_change` that anything may have
/// changed).
fn drain(ino: &mut Inotify, dir_of: &DirOf, on_change: &OnChange, buf: &mut [u8]) -> Option<usize> {
    let mut told = 0;
    loop {
        match ino.read_events(buf) {
            Ok(events) => {
                let (mut n, mut last) = (0, None);
                for ev in events {
                    n += 1;
                    let dir = dir_of.get(&ev.wd);
                    // Only the batch's last path is kept for the debug counter:
                    // joined once, after the loop.
                    last = dir.map(|d| (d, ev.name));
                    deliver(dir, ev.mask, ev.name.map(Path::new), on_change);
                }
                let last = last.map(|(d, name)| name.map_or_else(|| d.clone(), |n| d.join(n)));
                count_events(n, last.as_deref());
                told += n as usize;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(told),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                on_change(None);
                return None;
            }
        }
    }
}

/// How long a wait pauses after its inotify instance or `poll` failed (a shortage: only
/// ENOMEM is expected), so that a caller looking again at once does not spin.
const FAILED_BACKOFF: Duration = Duration::from_millis(10);

/// An inotify instance read by the thread that waits for it ([`Inline::wait`]), with no
/// thread of its own: the kernel wakes the waiting thread itself, and what changed while
/// nobody waited — its owner's own writes beside the inbox — is read in one batch at the
/// next wait instead of waking a reader thread a few times a task.
pub(super) struct Inline {
    ino: std::sync::Mutex<Inotify>,
    dir_of: DirOf,
    on_change: OnChange,
}

impl Inline {
    pub(super) fn start(
        dirs: &[(&PathBuf, How)],
        on_change: OnChange,
    ) -> Result<Inline, NativeError> {
        let (ino, dir_of) = open(dirs)?;
        Ok(Inline {
            ino: std::sync::Mutex::new(ino),
            dir_of,
            on_change,
        })
    }

    /// Tell what changed since the last call, and return.
    pub(super) fn tell_waiting(&self) {
        let mut ino = self.ino.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = [0u8; 8192];
        // A failing instance has told `on_change` that anything may have changed.
        let _ = drain(&mut ino, &self.dir_of, &self.on_change, &mut buf);
    }

    /// Tell what changed since the last call; if nothing did, wait at most `timeout` for
    /// a change or for one of `fds` to be readable (or hung up), and tell what changed.
    /// Returns the readable ones among `fds`, bit `i` for `fds[i]` (none when it
    /// returned at once for changes already waiting: the caller looks at what it was
    /// told first, then waits again).
    pub(super) fn wait(&self, fds: &[BorrowedFd<'_>], timeout: Duration) -> u64 {
        let mut ino = self.ino.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = [0u8; 8192];
        match drain(&mut ino, &self.dir_of, &self.on_change, &mut buf) {
            Some(0) => {}
            Some(_) => return 0,
            // Told that anything may have changed: the caller looks again, but a failing
            // instance must not make its loop spin.
            None => {
                std::thread::sleep(FAILED_BACKOFF.min(timeout));
                return 0;
            }
        }
        let (changed, ready) = match super::readable::poll_readable(Some(ino.as_fd()), fds, timeout) {
            Ok(seen) => seen,
            Err(_) => {
                (self.on_change)(None);
                std::thread::sleep(FAILED_BACKOFF);
                return 0;
            }
        };
        if changed {
            drain(&mut ino, &self.dir_of, &self.on_change, &mut buf);
        }
        ready
    }
}

fn read_loop(mut ino: Inotify, stop: OwnedFd, dir_of: DirOf, on_change: OnChange) {
    let mut buf = [0u8; 8192];
    loop {
        let mut fds = [
            PollFd::new(ino.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => {
                on_change(None);
                return;
            }
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        if drain(&mut ino, &dir_of, &on_change, &mut buf).is_none() {
            return;
        }
    }
}

fn deliver(dir: Option<&PathBuf>, mask: EventMask, name: Option<&Path>, on_change: &OnChange) {
    if mask.contains(EventMask::Q_OVERFLOW) {
        // Events were lost: anything may have changed.
        return on_change(None);
    }
    match (dir, name) {
        (Some(dir), Some(name)) => on_change(Some(&dir.join(name))),
        // The directory itself changed (moved, removed): re-read everything.
        (Some(_), None) => on_change(None),
        (None, _) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// An inline watcher of a temporary directory (arrivals), and the paths it told.
    fn watched() -> (tempfile::TempDir, Inline, Arc<Mutex<Vec<PathBuf>>>) {
        let dir = tempfile::tempdir().unwrap();
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = told.clone();
        let on_change: OnChange = Arc::new(move |p: Option<&Path>| {
            sink.lock()
                .unwrap()
                .push(p.map_or_else(PathBuf::new, Path::to_path_buf));
        });
        let path = dir.path().to_path_buf();
        let inline = Inline::start(&[(&path, How::Arrivals)], on_change)
            .unwrap_or_else(|_| panic!("inotify"));
        (dir, inline, told)
    }

    #[test]
    fn changes_made_while_nobody_waits_are_told_at_the_next_wait_without_blocking() {
        let (dir, inline, told) = watched();
        std::fs::write(dir.path().join("a"), "1").unwrap();
        std::fs::write(dir.path().join("b"), "2").unwrap();
        let t = Instant::now();
        assert_eq!(inline.wait(&[], Duration::from_secs(30)), 0);
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "blocked with changes waiting"
        );
        let told = told.lock().unwrap().clone();
        for name in ["a", "b"] {
            assert!(
                told.contains(&dir.path().join(name)),
                "{name} not told: {told:?}"
            );
        }
    }

    #[test]
    fn a_wait_ends_for_a_change_a_readable_descriptor_or_its_time() {
        let (dir, inline, told) = watched();
        // Nothing: the time runs out, nothing told, nothing ready.
        assert_eq!(inline.wait(&[], Duration::from_millis(20)), 0);
        assert!(told.lock().unwrap().is_empty());
        // A file arriving from another thread ends a long wait and is told.
        let arrive = dir.path().join("task.json");
        let writer = {
            let arrive = arrive.clone();
            std::thread::spawn(move || std::fs::write(arrive, "{}").unwrap())
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !told.lock().unwrap().contains(&arrive) {
            assert!(Instant::now() < deadline, "the arrival was never told");
            inline.wait(&[], Duration::from_secs(30));
        }
        writer.join().unwrap();
        // A readable descriptor among several is named by its bit.
        let (quiet_r, _quiet_w) = nix::unistd::pipe().unwrap();
        let (ready_r, ready_w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&ready_w, b"x").unwrap();
        // (The writer's close may still be waiting to be told: a wait that tells it
        // returns at once, with no descriptor named.)
        let deadline = Instant::now() + Duration::from_secs(30);
        let bits = loop {
            let bits = inline.wait(&[quiet_r.as_fd(), ready_r.as_fd()], Duration::from_secs(30));
            if bits != 0 || Instant::now() >= deadline {
                break bits;
            }
        };
        assert_eq!(bits, 0b10);
    }
}
