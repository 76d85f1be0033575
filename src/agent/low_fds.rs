//! Three low descriptors held for agents' pipes, so a child copies only a few of ours.
//!
//! Why: a worker of a thousand slots holds a thousand gate files open.
//! A child made without `CLONE_FILES` gets a copy of the whole descriptor table and
//! closes every entry at exec: in a burst of a thousand tasks that was about a quarter
//! of the worker's CPU. With three reserved, the child's pipe ends are put there, the
//! child shares the table (`CLONE_FILES`) and leaves it with `close_range(N, ~0,
//! CLOSE_RANGE_UNSHARE)`, N the one after the highest reserved, which copies only the
//! descriptors below N. (A worker started with descriptors 3–5 taken — under `perf`, by
//! a service manager — once failed to reserve any and copied the whole table again.)
//! The three are 3–5 unless the process inherited some there.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use nix::libc;

/// Reserved descriptors must lie below this: the kernel copies the table in words of
/// 64 entries, so a child keeps at most the first 64 (placeholders and strays alike).
const RESERVE_BELOW: libc::c_int = 64;

/// The three descriptors the child's stdin, stdout and stderr pipe ends are lent to,
/// and `/dev/null` open, which they hold between spawns.
pub(super) struct Reserved {
    pub(super) fds: [libc::c_int; 3],
    null: OwnedFd,
}

impl Reserved {
    /// The first descriptor a child does not keep.
    pub(super) fn keep_below(&self) -> libc::c_uint {
        self.fds[2] as libc::c_uint + 1
    }
}

/// Where a child finds its pipe ends, and what it keeps of our descriptors.
pub(super) struct Placed {
    /// The ends lent to the reserved three, until dropped (after the clone).
    pub lent: Option<LentLowFds<'static>>,
    /// The child's stdin, stdout and stderr ends, as it finds them.
    pub stdio: [libc::c_int; 3],
    /// The first descriptor the child does not keep (0: it gets a whole copy).
    pub keep_below: libc::c_uint,
    /// The child closes every descriptor from this one on once its stdio is in place
    /// (0: none).
    pub close_from: libc::c_uint,
}

/// Place the child's pipe `ends` (stdin, stdout, stderr). Ends low enough already (a
/// worker of one slot) stay where they are: the child keeps the descriptors below the
/// highest and closes all but its stdio itself (one call), where lending the ends to the
/// reserved three and taking them back cost six `dup3`. Hold the spawn lock.
pub(super) fn place(ends: [libc::c_int; 3]) -> io::Result<Placed> {
    let placed = match reserved() {
        Some(r) if all_low(ends) => Placed {
            lent: None,
            stdio: ends,
            keep_below: keep_below_all(ends),
            // From above the reserved three, not from 3: a descriptor the worker
            // inherited without close-on-exec (below them) is its agents' too, as on
            // the lending path (docs/SCALE.md).
            close_from: r.keep_below(),
        },
        Some(r) => Placed {
            lent: Some(LentLowFds::lend(r, ends)?),
            stdio: r.fds,
            keep_below: r.keep_below(),
            close_from: 0,
        },
        None => Placed {
            lent: None,
            stdio: ends,
            keep_below: 0,
            close_from: 0,
        },
    };
    Ok(placed)
}

/// Whether every one of `ends` lies below the first descriptor a child never keeps
/// anyway (the kernel copies the table in words of 64): then they need no lending.
fn all_low(ends: [libc::c_int; 3]) -> bool {
    ends.iter().all(|fd| (3..RESERVE_BELOW).contains(fd))
}

/// The first descriptor a child given `ends` as they are does not keep.
fn keep_below_all(ends: [libc::c_int; 3]) -> libc::c_uint {
    ends.into_iter().max().unwrap_or(2) as libc::c_uint + 1
}

/// `None` when no three descriptors could be reserved low enough (a child then gets a
/// copy of the whole table, as before).
static RESERVED: OnceLock<Option<Reserved>> = OnceLock::new();

/// Reserve the three lowest free descriptors from 3 on (3–5, unless the process
/// inherited some there) for the stdio of agents this process starts, so that each
/// child copies only the descriptors below them (see the module's documentation). To
/// be called before the process opens many descriptors (a worker: before it takes its
/// gates). Returns the three, or `None` when none low enough were free (agents are
/// then started the old way).
pub fn reserve_low_fds() -> Option<[libc::c_int; 3]> {
    RESERVED.get_or_init(reserve).as_ref().map(|r| r.fds)
}

/// The reservation, if [`reserve_low_fds`] made one.
pub(super) fn reserved() -> Option<&'static Reserved> {
    RESERVED.get().and_then(Option::as_ref)
}

fn reserve() -> Option<Reserved> {
    let null = OwnedFd::from(
        File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .ok()?,
    );
    // Four descriptors from 3 on: the opened one lands below 3 when the process was
    // started with one of 0–2 closed, and is then only the source of the copies.
    let source = null.as_raw_fd();
    let mut held = Vec::with_capacity(4);
    let below_3 = if source >= 3 {
        held.push(null);
        None
    } else {
        Some(null)
    };
    while held.len() < 4 {
        // SAFETY: duplicates a descriptor we own; the result, if any, is owned below.
        let fd = unsafe { libc::fcntl(source, libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just made by fcntl and belongs to nobody else.
        held.push(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    drop(below_3);
    // The three lowest are lent at each spawn; the highest is the spare put back
    // after it. Dropping `held` on a refusal closes what we opened.
    held.sort_by_key(AsRawFd::as_raw_fd);
    let fds = [0, 1, 2].map(|i| held[i].as_raw_fd());
    if fds[2] >= RESERVE_BELOW {
        return None;
    }
    let null = held.pop()?;
    held.into_iter().for_each(std::mem::forget);
    Some(Reserved { fds, null })
}

/// The child's pipe ends lent to the reserved descriptors for one spawn; dropping it
/// puts the placeholders back (closing the copies there), on every path.
pub(super) struct LentLowFds<'a> {
    reserved: &'a Reserved,
}

impl<'a> LentLowFds<'a> {
    /// Lend `ends` (stdin, stdout, stderr) to the reserved descriptors. Hold
    /// the spawn lock (`spawn::SPAWN_LOCK`).
    pub(super) fn lend(
        reserved: &'a Reserved,
        ends: [libc::c_int; 3],
    ) -> io::Result<LentLowFds<'a>> {
        let lent = LentLowFds { reserved };
        for (fd, target) in ends.into_iter().zip(reserved.fds) {
            // SAFETY: replaces our own reserved placeholder, atomically.
            if unsafe { libc::dup3(fd, target, libc::O_CLOEXEC) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(lent)
    }
}

impl Drop for LentLowFds<'_> {
    fn drop(&mut self) {
        for target in self.reserved.fds {
            // SAFETY: puts our placeholder back over our own lent copy.
            unsafe { libc::dup3(self.reserved.null.as_raw_fd(), target, libc::O_CLOEXEC) };
        }
    }
}
