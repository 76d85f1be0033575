//! Directory locks (`.lock/`, `keys/<k>.lock/`, `slots/<i>.lock/`) with provable staleness.
//!
//! `mkdir` is the atomic step; `pid` and `owner.json` inside say who holds it. A lock is
//! stale only when its owner is proven gone (docs/ARCHITECTURE.md, "Directory locks"). Acquisition, takeover,
//! heartbeat and release all happen under a small flock beside the lock
//! (`<lock>.guard`), so two recoverers can never both win and a release never removes a
//! lock that somebody else has taken over.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::host;
use crate::protocol::now_rfc3339;

mod judge;
pub use judge::{verdict, LockRead, OwnerRead, ProcessFacts, Vantage, STARTED_AFTER_MARGIN};

/// How often a lock may vanish (released, or taken and released) between our failing
/// to create it and our reading it, before we report it busy instead of retrying.
const VANISH_RETRIES: usize = 5;

/// How long to wait before judging locks stale in the cases that need time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// A lock directory with no owner yet is young (its holder may be between `mkdir`
    /// and its first write) until it is this old.
    pub grace: Duration,
    /// A lock held from another host is alive until its heartbeat is this old.
    pub lease: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            grace: Duration::from_secs(10),
            lease: Duration::from_secs(120),
        }
    }
}

/// `owner.json`: who holds a lock, with enough to prove them gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockOwner {
    pub pid: u32,
    pub host: String,
    pub boot_id: String,
    /// Clock ticks since boot at which `pid` started (detects pid reuse).
    #[serde(default)]
    pub start_time: Option<u64>,
    pub nonce: String,
    pub acquired_at: String,
    /// Renewed by long holders; what other hosts judge the lease by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<String>,
}

impl LockOwner {
    fn for_this_process() -> LockOwner {
        let pid = std::process::id();
        LockOwner {
            pid,
            host: host::hostname().to_string(),
            boot_id: host::boot_id().to_string(),
            start_time: host::own_start_time(),
            nonce: fsio::nonce(),
            acquired_at: now_rfc3339(),
            heartbeat_at: None,
        }
    }
}

/// Whether a lock's holder is still there, and why we think so.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    Alive(String),
    Stale(String),
}

impl Liveness {
    pub fn is_stale(&self) -> bool {
        matches!(self, Liveness::Stale(_))
    }
}

/// What we know about the holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub path: PathBuf,
    pub owner: Option<LockOwner>,
    /// From `pid` (or `owner.json` when `pid` is missing).
    pub pid: Option<u32>,
    pub liveness: Liveness,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.liveness, &self.owner) {
            (Liveness::Alive(why) | Liveness::Stale(why), Some(o)) => {
                write!(f, "{why} (since {})", o.acquired_at)
            }
            (Liveness::Alive(why) | Liveness::Stale(why), None) => f.write_str(why),
        }
    }
}

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
}

/// The flock beside a lock that serializes acquire, takeover, heartbeat and release.
struct Guard(#[allow(dead_code)] Flock<File>);

impl Guard {
    fn lock(lock_path: &Path) -> Result<Guard> {
        let mut name = lock_path.as_os_str().to_owned();
        name.push(".guard");
        let gpath = PathBuf::from(name);
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&gpath)
        };
        let file = match open() {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = gpath.parent() {
                    fsio::ensure_dir(parent)?;
                }
                open().map_err(|e| Error::io("create lock guard", &gpath, e))?
            }
            Err(e) => return Err(Error::io("open lock guard", &gpath, e)),
        };
        Flock::lock(file, FlockArg::LockExclusive)
            .map(Guard)
            .map_err(|(_, errno)| Error::io("flock", &gpath, errno.into()))
    }
}

fn owner_file(lock: &Path) -> PathBuf {
    lock.join("owner.json")
}

fn pid_file(lock: &Path) -> PathBuf {
    lock.join("pid")
}

impl DirLock {
    /// Take the lock if it is free or provably stale; otherwise report the holder.
    pub fn try_acquire(path: &Path, opts: &LockOptions) -> Result<Acquire> {
        Self::acquire(path, opts, false)
    }

    /// Like [`DirLock::try_acquire`], for a process that takes the same lock over and
    /// over (a worker's `.lock`): on release the directory is parked under a name private
    /// to this process (`<lock>.spare.<pid>`) and renamed back into place on the next
    /// acquire. What others see is the same — `<lock>/` exists, with `pid` and
    /// `owner.json`, exactly while it is held — but no inode is created or freed per
    /// task, which is the expensive part of a lock on many filesystems (and NFS).
    pub fn try_acquire_reusable(path: &Path, opts: &LockOptions) -> Result<Acquire> {
        Self::acquire(path, opts, true)
    }

    fn acquire(path: &Path, opts: &LockOptions, reusable: bool) -> Result<Acquire> {
        let _guard = Guard::lock(path)?;
        let owner = LockOwner::for_this_process();
        for _ in 0..VANISH_RETRIES {
            if place(path, &owner, reusable)? {
                return Ok(Acquire::Acquired(DirLock {
                    path: path.to_path_buf(),
                    owner,
                    released: false,
                    reusable,
                }));
            }
            // Gone again before we could read it (released by a holder outside the
            // guard protocol): free now, try again.
            let Some(holder) = judge(path, opts, false)? else {
                continue;
            };
            if !holder.liveness.is_stale() {
                return Ok(Acquire::Held(holder));
            }
            tracing::info!(lock = %path.display(), "taking over stale lock: {holder}");
            discard_lock_dir(path)?;
            // If placing fails now, someone outside the guard protocol got in between:
            // judge theirs on the next round.
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

    pub fn owner(&self) -> &LockOwner {
        &self.owner
    }

    /// Renew `heartbeatAt` (what other hosts judge our lease by).
    pub fn heartbeat(&mut self) -> Result<()> {
        let _guard = Guard::lock(&self.path)?;
        self.ensure_still_ours()?;
        self.owner.heartbeat_at = Some(now_rfc3339());
        fsio::write_json(&owner_file(&self.path), &self.owner, Durability::Atomic)
    }

    /// Release the lock — only if it is still ours (our nonce in `owner.json`).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&self) -> Result<()> {
        let _guard = Guard::lock(&self.path)?;
        self.ensure_still_ours()?;
        if self.reusable {
            let spare = spare_path(&self.path);
            // A leftover from an earlier process that had our pid would block the rename.
            remove_lock_dir(&spare)?;
            match fs::rename(&self.path, &spare) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!("parking {} failed ({e}); removing it", self.path.display())
                }
            }
        }
        discard_lock_dir(&self.path)
    }

    fn ensure_still_ours(&self) -> Result<()> {
        let current: Option<LockOwner> =
            fsio::read_json(&owner_file(&self.path), SMALL_FILE_LIMIT).unwrap_or(None);
        match current {
            Some(o) if o.nonce == self.owner.nonce => Ok(()),
            _ => Err(Error::LockLost {
                path: self.path.clone(),
            }),
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

/// This process's private name beside `lock`: where a reusable lock is parked, where
/// any lock is built before it is renamed into place, and where it is moved to be removed.
/// A leftover under it (a crash) is cleared by [`clear_spares`] once we are gone.
fn spare_path(lock: &Path) -> PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(format!(".spare.{}", std::process::id()));
    PathBuf::from(name)
}

/// Remove parked spares of `lock` left by processes that are gone (and our own).
pub fn clear_spares(lock: &Path) -> Result<()> {
    let (Some(dir), Some(base)) = (lock.parent(), lock.file_name()) else {
        return Ok(());
    };
    let prefix = format!("{}.spare.", base.to_string_lossy());
    clear_spares_where(dir, |name| name.strip_prefix(&prefix)?.parse().ok())
}

/// Remove every lock spare in `dir` (`<name>.lock.spare.<pid>`) whose process is gone:
/// a process killed while it built or parked a lock leaves one behind, and nobody else
/// would ever take it back.
pub fn clear_dead_spares_in(dir: &Path) -> Result<()> {
    clear_spares_where(dir, |name| name.split_once(".lock.spare.")?.1.parse().ok())
}

/// Remove the spares in `dir` whose name `pid_of` reads a dead (or our own) pid from.
fn clear_spares_where(dir: &Path, pid_of: impl Fn(&str) -> Option<u32>) -> Result<()> {
    let Some(entries) = fsio::read_dir_if_exists(dir)? else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(&pid_of) else {
            continue;
        };
        if pid == std::process::id() || !host::pid_alive(pid) {
            remove_lock_dir(&entry.path())?;
        }
    }
    Ok(())
}

/// Whether renaming without replacing has worked here so far (it falls back to
/// `mkdir` on filesystems that cannot do it, and we remember that).
static NOREPLACE_WORKS: AtomicBool =
    AtomicBool::new(cfg!(all(target_os = "linux", target_env = "gnu")));

/// Make `path` exist as our lock. `Ok(false)`: the lock already exists.
///
/// The directory appears with `pid` and `owner.json` already inside: it is built (or,
/// for a reusable lock, its parked spare rewritten) under our spare name and renamed
/// into place without replacing, so a crash can never leave an ownerless or pid-only
/// lock. Where that rename is not available: `mkdir`, then write the files.
fn place(path: &Path, owner: &LockOwner, reusable: bool) -> Result<bool> {
    if NOREPLACE_WORKS.load(Ordering::Relaxed) {
        let spare = spare_path(path);
        let parked = reusable && fs::symlink_metadata(&spare).is_ok_and(|m| m.is_dir());
        if parked {
            // In place: nobody else looks at a spare.
            fsio::overwrite_padded(&pid_file(&spare), format!("{}\n", owner.pid).as_bytes())?;
            fsio::overwrite_padded(&owner_file(&spare), &fsio::to_json_bytes(owner))?;
        } else {
            // A leftover under our name is from an earlier process with our pid.
            remove_lock_dir(&spare)?;
            build_lock_dir(&spare, owner)?;
        }
        match rename_noreplace(&spare, path)? {
            Some(true) => return Ok(true),
            Some(false) => {
                if !reusable {
                    remove_lock_dir(&spare)?;
                }
                return Ok(false);
            }
            None => NOREPLACE_WORKS.store(false, Ordering::Relaxed),
        }
    }
    if !make_lock_dir(path)? {
        return Ok(false);
    }
    if let Err(e) = write_owner_files(path, owner) {
        let _ = remove_lock_dir(path);
        return Err(e);
    }
    Ok(true)
}

/// Make the directory `dir` with our `pid` and `owner.json` inside (nobody else looks
/// at it until it is renamed into place).
fn build_lock_dir(dir: &Path, owner: &LockOwner) -> Result<()> {
    make_lock_dir(dir)?;
    let written = write_owner_files(dir, owner);
    if written.is_err() {
        let _ = remove_lock_dir(dir);
    }
    written
}

/// `pid` first: the original conductor's clients read only that.
fn write_owner_files(dir: &Path, owner: &LockOwner) -> Result<()> {
    fsio::write_replace(
        &pid_file(dir),
        format!("{}\n", owner.pid).as_bytes(),
        Durability::Atomic,
    )?;
    fsio::write_json(&owner_file(dir), owner, Durability::Atomic)
}

/// `Some(false)`: `to` exists. `None` (with `from` removed): this filesystem cannot
/// rename without replacing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(from: &Path, to: &Path) -> Result<Option<bool>> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(Some(true)),
        Err(Errno::EEXIST | Errno::ENOTEMPTY) => Ok(Some(false)),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {
            remove_lock_dir(from)?;
            Ok(None)
        }
        Err(e) => Err(Error::io("rename spare lock into", to, e.into())),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(from: &Path, _to: &Path) -> Result<Option<bool>> {
    remove_lock_dir(from)?;
    Ok(None)
}

/// `mkdir` the lock: `Ok(true)` if we created it, `Ok(false)` if it exists.
fn make_lock_dir(path: &Path) -> Result<bool> {
    let mk = || DirBuilder::new().mode(0o700).create(path);
    match mk() {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                fsio::ensure_dir(parent)?;
            }
            match mk() {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(Error::io("create lock directory", path, e)),
            }
        }
        Err(e) => Err(Error::io("create lock directory", path, e)),
    }
}

/// Take the lock at `path` away in one step (renamed to our spare name, then removed
/// there), so that it is never seen, nor left by a crash, emptied but in place.
fn discard_lock_dir(path: &Path) -> Result<()> {
    let spare = spare_path(path);
    remove_lock_dir(&spare)?;
    match fs::rename(path, &spare) {
        Ok(()) => remove_lock_dir(&spare),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            tracing::debug!("moving {} aside failed ({e}); removing it", path.display());
            remove_lock_dir(path)
        }
    }
}

fn remove_lock_dir(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove lock directory", path, e)),
    }
}

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
        Some(h) if h.liveness.is_stale() => {
            tracing::info!(lock = %path.display(), "removing stale lock: {h}");
            discard_lock_dir(path)?;
            Ok(Some(h))
        }
        _ => Ok(None),
    }
}

/// Read the lock directory at `path`; `None` if there is none (or it vanished while
/// being read).
pub fn read_lock(path: &Path) -> Result<Option<LockRead>> {
    let stat = |path: &Path| match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat lock", path, e)),
    };
    let Some(meta) = stat(path)? else {
        return Ok(None);
    };
    let modified = meta
        .modified()
        .map_err(|e| Error::io("stat lock", path, e))?;
    let owner = match fsio::read_json::<LockOwner>(&owner_file(path), SMALL_FILE_LIMIT) {
        Ok(Some(o)) => OwnerRead::Valid(o),
        Ok(None) => OwnerRead::Missing,
        Err(e) => OwnerRead::Corrupt(e.to_string()),
    };
    let pid_file = fsio::read_bounded(&pid_file(path), 64)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.trim().parse::<u32>().ok());
    let read = LockRead {
        pid_file,
        owner,
        modified,
        created: meta.created().ok(),
    };
    // Files missing may mean the whole lock went away while we read it.
    if read.pid().is_none() && stat(path)?.is_none() {
        return Ok(None);
    }
    Ok(Some(read))
}

/// What this host knows about the process a lock names (nothing for another host's).
fn facts_about(read: &LockRead) -> Option<ProcessFacts> {
    let pid = read.pid()?;
    if matches!(&read.owner, OwnerRead::Valid(o) if o.host != host::hostname()) {
        return None;
    }
    let alive = host::pid_alive(pid);
    Some(ProcessFacts {
        alive,
        start_time: alive.then(|| host::process_start_time(pid)).flatten(),
        started_at: alive.then(|| host::process_started_at(pid)).flatten(),
    })
}

/// Whether the lock at `path` is held by somebody alive; `None` if there is no lock.
fn judge(path: &Path, opts: &LockOptions, gated: bool) -> Result<Option<Holder>> {
    let Some(read) = read_lock(path)? else {
        return Ok(None);
    };
    if let OwnerRead::Corrupt(e) = &read.owner {
        tracing::warn!("ignoring unreadable lock owner: {e}");
    }
    let at = Vantage {
        host: host::hostname().to_string(),
        boot_id: host::boot_id().to_string(),
        now: SystemTime::now(),
        gated,
    };
    let facts = facts_about(&read);
    let Some(liveness) = verdict(Some(&read), facts.as_ref(), &at, opts) else {
        return Ok(None);
    };
    Ok(Some(Holder {
        path: path.to_path_buf(),
        pid: read.pid(),
        owner: match read.owner {
            OwnerRead::Valid(o) => Some(o),
            _ => None,
        },
        liveness,
    }))
}
