//! Directory locks (`.lock/`, `keys/<k>.lock/`, `slots/<i>.lock/`) with provable staleness.
//!
//! A lock is born complete (built aside, renamed into place); `pid` and `owner.json`
//! inside say who holds it, with its epoch (fencing token). A lock is
//! stale only when its owner is proven gone (docs/ARCHITECTURE.md, "Directory locks"). Acquisition, takeover,
//! heartbeat and release all happen under a small flock beside the lock
//! (`<lock>.guard`), so two recoverers can never both win and a release never removes a
//! lock that somebody else has taken over.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::host;
use guard::Guard;

mod age;
mod by_path;
pub use age::visible_skew;
mod files;
mod fresh;
mod guard;
mod judge;
mod pid_only;
mod seen_notes;
mod takeover;
// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use judge::{verdict, LockRead, OwnerRead, ProcessFacts, Vantage};

/// How often a lock may vanish (released, or taken and released) between our failing
/// to create it and our reading it, before we report it busy instead of retrying.
const VANISH_RETRIES: usize = 5;

mod owner;
mod reading;
use owner::lease_stamp;
pub use owner::{Holder, Liveness, LockOptions, LockOwner};
// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use owner::ENV_DEBUG_CLOCK_OFFSET;
pub use reading::read_lock;
use reading::judge;

/// How many more times a holder looks for its lock when it cannot read it in place,
/// and how long it waits between looks: another host that moved it aside on a stale
/// read puts it back within a few round trips (see `takeover`).
pub const UNSEEN_LOOKS: u32 = 5;
pub const UNSEEN_PAUSE: Duration = Duration::from_millis(100);

/// The outcome of [`DirLock::try_acquire`].
#[derive(Debug)]
pub enum Acquire {
    Acquired(DirLock),
    /// Somebody alive (or possibly alive) holds it.
    Held(Holder),
}

/// A directory lock we hold. Dropping it releases it (errors are logged).
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    owner: LockOwner,
    released: bool,
    /// Released by renaming to this process's spare name instead of removing.
    reusable: bool,
    /// [`host::boot_clock`] when the last write of our record that succeeded began
    /// (placing the lock, or a renewal): no other host can have seen a newer one of
    /// ours, so none judges us gone before this plus its lease.
    renewed: Duration,
}


impl DirLock {
    /// Take the lock if it is free or provably stale; otherwise report the holder.
    pub fn try_acquire(path: &Path, opts: &LockOptions) -> Result<Acquire> {
        Self::acquire(path, opts, false)
    }

    /// Like [`DirLock::try_acquire`], for a process that takes the same lock over and
    /// over (a worker's `.lock`): on release the directory is parked under a name private
    /// to this process (`<lock>.spare.<pid>@<host id>`) and renamed back into place on the next
    /// acquire. What others see is the same — `<lock>/` exists, with `pid` and
    /// `owner.json`, exactly while it is held — but no inode is created or freed per
    /// task, which is the expensive part of a lock on many filesystems (and NFS).
    pub fn try_acquire_reusable(path: &Path, opts: &LockOptions) -> Result<Acquire> {
        Self::acquire(path, opts, true)
    }

    fn acquire(path: &Path, opts: &LockOptions, reusable: bool) -> Result<Acquire> {
        let guard = Guard::lock(path)?;
        let mut owner = LockOwner::for_this_process();
        let mut last_epoch = guard.epoch();
        for _ in 0..VANISH_RETRIES {
            owner.epoch = last_epoch + 1;
            let began = host::boot_clock();
            if files::place(path, &owner, reusable)? {
                guard.set_epoch(owner.epoch);
                return Ok(Acquire::Acquired(DirLock {
                    path: path.to_path_buf(),
                    owner,
                    released: false,
                    reusable,
                    renewed: began,
                }));
            }
            // Gone again before we could read it (released by a holder outside the
            // guard protocol, or on another host): free now, try again.
            let Some(holder) = judge(path, opts, false)? else {
                continue;
            };
            if !holder.liveness.is_stale() {
                return Ok(Acquire::Held(holder));
            }
            match takeover::take_away(path, opts, false)? {
                takeover::Takeover::Removed(h) => {
                    if let Some(o) = &h.owner {
                        last_epoch = last_epoch.max(o.epoch);
                    }
                    tracing::info!(lock = %path.display(), "took over stale lock: {h}");
                }
                takeover::Takeover::PutBack(h) => return Ok(Acquire::Held(h)),
                takeover::Takeover::Gone => {}
            }
            // If placing fails now, someone else got in between: judge theirs on the
            // next round.
        }
        Ok(Acquire::Held(Holder {
            path: path.to_path_buf(),
            owner: None,
            pid: None,
            liveness: Liveness::Alive(format!(
                "changed hands {VANISH_RETRIES} times while we tried to take it"
            )),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make what a renewal writes into now, so that renewing a lock held for long (a
    /// gate) never creates a file ([`files::ready_owner_swap`]).
    pub fn ready_for_renewals(&self) {
        files::ready_owner_swap(&self.path);
    }

    /// The owner record this holding wrote (the tests compare it with what readers see).
    #[cfg(any(test, feature = "internals"))]
    pub fn owner(&self) -> &LockOwner {
        &self.owner
    }

    /// This holding's fencing token.
    pub fn epoch(&self) -> u64 {
        self.owner.epoch
    }

    /// [`host::boot_clock`] when the last successful write of our record (the acquire or
    /// a renewal) began. Another host judges us by the newest record it saw, which it
    /// cannot have seen before this: it takes the lock no earlier than this plus the
    /// lease (by its own clock), which is what a holder fences itself by.
    pub fn renewed_at(&self) -> Duration {
        self.renewed
    }

    /// Renew `heartbeatAt` (what other hosts judge our lease by) — only while the lock
    /// in place is still ours; else [`Error::LockLost`]: we were judged gone (paused
    /// past the lease, cut off) and someone took it, so we must stop at once. The record
    /// is read and written through the directory we placed, so a new lock under the
    /// same name is never written into.
    pub fn heartbeat(&mut self) -> Result<()> {
        match self.beat(UNSEEN_LOOKS)? {
            true => Ok(()),
            false => Err(self.lost()),
        }
    }

    /// [`DirLock::heartbeat`] that looks once and does not wait for a lock it cannot
    /// see in place: `Ok(false)` then, and the caller decides when to look again (one
    /// thread renewing many leases must not sleep on one of them).
    pub fn heartbeat_once(&mut self) -> Result<bool> {
        self.beat(0)
    }

    fn beat(&mut self, looks: u32) -> Result<bool> {
        let began = host::boot_clock();
        let _guard = Guard::existing(&self.path)?;
        // Written through the directory just read as ours, opened afresh: no descriptor
        // is kept between heartbeats (a worker of a thousand slots held a thousand, and
        // every agent it started closed them all at exec), and a client that saw the
        // directory vanish (moved aside by another host and put back) may know it by a
        // new inode now.
        let Some(dir) = self.ours_in_place(looks)? else {
            return Ok(false);
        };
        self.owner.heartbeat_at = Some(lease_stamp());
        match files::write_owner_at(&dir, &self.path, &self.owner) {
            // Removed under us since the check (another host took it over).
            Err(e) if files::error_vanished(&e) => Err(self.lost()),
            Err(e) => Err(e),
            Ok(()) => {
                self.renewed = began;
                Ok(true)
            }
        }
    }

    /// Record in the lock that it is held for task `task` (before the task's agent
    /// starts), renewing it as [`DirLock::heartbeat`] does: a holder that dies then
    /// leaves the lock held while the task's processes outlive it.
    pub fn record_task(&mut self, task: &str) -> Result<()> {
        self.owner.task = Some(task.to_string());
        self.heartbeat()
    }

    /// Whether the lock is still ours, without renewing it.
    pub fn check(&self) -> Result<()> {
        // In one open where it can (see `by_path`); the same facts: our nonce and
        // epoch in the record of the lock in place.
        match by_path::read_owner(&self.path) {
            Some(o) if o.nonce == self.owner.nonce && o.epoch == self.owner.epoch => Ok(()),
            Some(_) => Err(self.lost()),
            None => self.ensure_still_ours().map(drop),
        }
    }

    /// Release the lock — only if it is still ours (our nonce in `owner.json`).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&self) -> Result<()> {
        let _guard = Guard::existing(&self.path)?;
        self.ensure_still_ours()?;
        if self.reusable {
            let spare = files::spare_path(&self.path);
            // A leftover from an earlier process that had our pid would block the rename.
            files::bury(&spare);
            match fs::rename(&self.path, &spare) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!("parking {} failed ({e}); removing it", self.path.display())
                }
            }
        }
        files::discard(&self.path).map(|_| ())
    }

    /// Ours = the directory in place holds our nonce and epoch (read through it, so a
    /// lock re-made under the name is not ours: its nonce differs). Returns it, open.
    /// Not the inode: a FUSE client that saw the name vanish gives the same directory a
    /// new one when it comes back. A lock not seen in place at all is looked for again,
    /// a few times over half a second: another host may have moved it aside on a stale
    /// read and be putting it back. Another holder's lock in place is lost at once.
    fn ensure_still_ours(&self) -> Result<File> {
        self.ours_in_place(UNSEEN_LOOKS)?.ok_or_else(|| self.lost())
    }

    /// [`DirLock::ensure_still_ours`] looking `looks` more times for a lock not seen in
    /// place: `Ok(None)` if it was not seen at all, `LockLost` if another's is there.
    fn ours_in_place(&self, looks: u32) -> Result<Option<File>> {
        for look in 0..=looks {
            let current = files::open_dir(&self.path)
                .and_then(|d| files::read_owner_at(&d, &self.path).map(|o| (d, o)));
            match current {
                Some((d, o)) if o.nonce == self.owner.nonce && o.epoch == self.owner.epoch => {
                    return Ok(Some(d))
                }
                Some(_) => return Err(self.lost()),
                None if look < looks => std::thread::sleep(UNSEEN_PAUSE),
                None => {}
            }
        }
        Ok(None)
    }

    fn lost(&self) -> Error {
        Error::LockLost {
            path: self.path.clone(),
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if let Err(e) = self.release_now() {
            tracing::warn!("releasing lock on drop: {e}");
        }
    }
}

/// Remove parked spares of `lock` left by processes that are gone (and our own), and
/// its old tombstones.
pub fn clear_spares(lock: &Path) -> Result<()> {
    let (Some(dir), Some(base)) = (lock.parent(), lock.file_name()) else {
        return Ok(());
    };
    let prefix = format!("{}.spare.", base.to_string_lossy());
    let lease = LockOptions::default().lease;
    files::clear_spares_where(dir, lease, |name| name.strip_prefix(&prefix))
}

/// Remove every lock spare in `dir` (`<name>.lock.spare.<pid>@<host id>`) whose process is gone:
/// a process killed while it built or parked a lock leaves one behind, and nobody else
/// would ever take it back. Old tombstones go too.
pub fn clear_dead_spares_in(dir: &Path) -> Result<()> {
    let lease = LockOptions::default().lease;
    files::clear_spares_where(dir, lease, |name| Some(name.split_once(".lock.spare.")?.1))
}

pub use files::spare_suffix;

/// Who holds the lock at `path` and whether they are alive; `None` if it is free.
pub fn inspect(path: &Path, opts: &LockOptions) -> Result<Option<Holder>> {
    judge(path, opts, false)
}

/// Remove the lock at `path` only if its holder is proven gone; returns who it was.
/// A live holder's lock is never touched.
pub fn break_if_stale(path: &Path, opts: &LockOptions) -> Result<Option<Holder>> {
    break_judged(path, opts, false)
}

/// [`break_if_stale`] for a caller that holds a gate every taker of this lock holds
/// while taking it (a worker slot's gate, for its `.lock`). Nobody can then be between
/// creating the lock and recording themselves in it, so a lock with no pid recorded is
/// a dead holder's leftover at once, without waiting out the grace period.
pub fn break_if_stale_under_gate(path: &Path, opts: &LockOptions) -> Result<Option<Holder>> {
    break_judged(path, opts, true)
}

fn break_judged(path: &Path, opts: &LockOptions, gated: bool) -> Result<Option<Holder>> {
    let _guard = Guard::lock(path)?;
    match judge(path, opts, gated)? {
        Some(h) if h.liveness.is_stale() => match takeover::take_away(path, opts, gated)? {
            takeover::Takeover::Removed(h) => {
                tracing::info!(lock = %path.display(), "removed stale lock: {h}");
                Ok(Some(h))
            }
            _ => Ok(None),
        },
        _ => Ok(None),
    }
}
