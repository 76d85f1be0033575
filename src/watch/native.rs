//! Linux inotify with a mask of changes only: reads of a watched directory wake nobody.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchMask};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{count_events, How, OnChange};

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

fn read_loop(
    mut ino: Inotify,
    stop: OwnedFd,
    dir_of: HashMap<inotify::WatchDescriptor, PathBuf>,
    on_change: OnChange,
) {
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
        loop {
            match ino.read_events(&mut buf) {
                Ok(events) => {
                    let (mut n, mut last) = (0, None);
                    for ev in events {
                        n += 1;
                        let dir = dir_of.get(&ev.wd);
                        // Only the batch's last path is kept for the debug counter:
                        // joined once, after the loop.
                        last = dir.map(|d| (d, ev.name));
                        deliver(dir, ev.mask, ev.name.map(Path::new), &on_change);
                    }
                    let last = last.map(|(d, name)| name.map_or_else(|| d.clone(), |n| d.join(n)));
                    count_events(n, last.as_deref());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    on_change(None);
                    return;
                }
            }
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
