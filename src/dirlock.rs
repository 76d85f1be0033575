//! Directory locks (`.lock/`, `keys/<k>.lock/`, `slots/<i>.lock/`) with provable staleness.
//!
//! `mkdir` is the atomic step; `pid` and `owner.json` inside say who holds it. A lock is
//! stale only when its owner is proven gone (DESIGN.md section 4). Acquisition, takeover,
//! heartbeat and release all happen under a small flock beside the lock
//! (`<lock>.guard`), so two recoverers can never both win and a release never removes a
//! lock that somebody else has taken over.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::host;
use crate::protocol::{now_rfc3339, parse_rfc3339};

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
        if !place(path, &owner, reusable)? {
            let holder = judge(path, opts)?;
            if !holder.liveness.is_stale() {
                return Ok(Acquire::Held(holder));
            }
            tracing::info!(lock = %path.display(), "taking over stale lock: {holder}");
            remove_lock_dir(path)?;
            if !place(path, &owner, reusable)? {
                // Someone outside the guard protocol got in between: theirs now.
                return Ok(Acquire::Held(judge(path, opts)?));
            }
        }
        Ok(Acquire::Acquired(DirLock {
            path: path.to_path_buf(),
            owner,
            released: false,
            reusable,
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
        remove_lock_dir(&self.path)
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

/// This process's parking place for a reusable lock.
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
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || !host::pid_alive(pid) {
            remove_lock_dir(&entry.path())?;
        }
    }
    Ok(())
}

/// Make `path` exist as our lock: from our parked spare if there is one, else by
/// `mkdir` and writing the owner files. `Ok(false)`: the lock already exists.
fn place(path: &Path, owner: &LockOwner, reusable: bool) -> Result<bool> {
    if reusable {
        if let Some(placed) = place_spare(path, owner)? {
            return Ok(placed);
        }
    }
    if !make_lock_dir(path)? {
        return Ok(false);
    }
    let written = fsio::write_replace(
        &pid_file(path),
        format!("{}\n", owner.pid).as_bytes(),
        Durability::Atomic,
    )
    .and_then(|()| fsio::write_json(&owner_file(path), owner, Durability::Atomic));
    if let Err(e) = written {
        let _ = remove_lock_dir(path);
        return Err(e);
    }
    Ok(true)
}

/// Rename our parked spare into place, its owner rewritten first (in place: nobody
/// else looks at a spare). `None` when there is no spare or the filesystem cannot
/// rename without replacing.
fn place_spare(path: &Path, owner: &LockOwner) -> Result<Option<bool>> {
    let spare = spare_path(path);
    match fs::symlink_metadata(&spare) {
        Ok(m) if m.is_dir() => {}
        _ => return Ok(None),
    }
    fsio::overwrite_padded(&pid_file(&spare), format!("{}\n", owner.pid).as_bytes())?;
    fsio::overwrite_padded(&owner_file(&spare), &fsio::to_json_bytes(owner))?;
    rename_noreplace(&spare, path)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(from: &Path, to: &Path) -> Result<Option<bool>> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(Some(true)),
        Err(Errno::EEXIST | Errno::ENOTEMPTY) => Ok(Some(false)),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {
            // This filesystem cannot do it: fall back to mkdir from now on.
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

fn remove_lock_dir(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove lock directory", path, e)),
    }
}

/// Who holds the lock at `path` and whether they are alive; `None` if it is free.
pub fn inspect(path: &Path, opts: &LockOptions) -> Result<Option<Holder>> {
    match fs::symlink_metadata(path) {
        Ok(_) => judge(path, opts).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat lock", path, e)),
    }
}

/// Remove the lock at `path` only if its holder is proven gone; returns who it was.
/// A live holder's lock is never touched.
pub fn break_if_stale(path: &Path, opts: &LockOptions) -> Result<Option<Holder>> {
    let _guard = Guard::lock(path)?;
    match inspect(path, opts)? {
        Some(h) if h.liveness.is_stale() => {
            tracing::info!(lock = %path.display(), "removing stale lock: {h}");
            remove_lock_dir(path)?;
            Ok(Some(h))
        }
        _ => Ok(None),
    }
}

fn age_of(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// Decide whether the lock at `path` (which exists) is held by somebody alive.
fn judge(path: &Path, opts: &LockOptions) -> Result<Holder> {
    let owner = match fsio::read_json::<LockOwner>(&owner_file(path), SMALL_FILE_LIMIT) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("ignoring unreadable lock owner: {e}");
            None
        }
    };
    let pid_text = fsio::read_bounded(&pid_file(path), 64).ok().flatten();
    let pid = pid_text
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .or(owner.as_ref().map(|o| o.pid));

    let liveness = match (&owner, pid) {
        (Some(o), _) => judge_owner(o, opts),
        // Only a pid (an original-conductor lock, or owner.json lost): same host assumed.
        (None, Some(pid)) if host::pid_alive(pid) => {
            Liveness::Alive(format!("held by live pid {pid} (no owner.json)"))
        }
        (None, Some(pid)) => Liveness::Stale(format!("holder pid {pid} is dead (no owner.json)")),
        (None, None) => {
            let mtime = fs::symlink_metadata(path)
                .and_then(|m| m.modified())
                .map_err(|e| Error::io("stat lock", path, e))?;
            let age = age_of(mtime);
            if age > opts.grace {
                Liveness::Stale(format!(
                    "no owner recorded for {}s (grace {}s)",
                    age.as_secs(),
                    opts.grace.as_secs()
                ))
            } else {
                Liveness::Alive(format!(
                    "being acquired: no owner recorded yet ({}ms old)",
                    age.as_millis()
                ))
            }
        }
    };
    Ok(Holder {
        path: path.to_path_buf(),
        owner,
        pid,
        liveness,
    })
}

fn judge_owner(o: &LockOwner, opts: &LockOptions) -> Liveness {
    let pid = o.pid;
    if o.host != host::hostname() {
        let last = o
            .heartbeat_at
            .as_deref()
            .and_then(parse_rfc3339)
            .or_else(|| parse_rfc3339(&o.acquired_at));
        return match last {
            Some(t) if age_of(t) <= opts.lease => Liveness::Alive(format!(
                "held by pid {pid} on host {}, renewed {}s ago (lease {}s)",
                o.host,
                age_of(t).as_secs(),
                opts.lease.as_secs()
            )),
            Some(t) => Liveness::Stale(format!(
                "held by pid {pid} on host {}, not renewed for {}s (lease {}s)",
                o.host,
                age_of(t).as_secs(),
                opts.lease.as_secs()
            )),
            None => Liveness::Stale(format!(
                "held by pid {pid} on host {} with no readable timestamp",
                o.host
            )),
        };
    }
    let my_boot = host::boot_id();
    if !o.boot_id.is_empty() && !my_boot.is_empty() && o.boot_id != my_boot {
        return Liveness::Stale(format!("held by pid {pid} before this machine rebooted"));
    }
    if !host::pid_alive(pid) {
        return Liveness::Stale(format!("holder pid {pid} is dead"));
    }
    if let (Some(expected), Some(actual)) = (o.start_time, host::process_start_time(pid)) {
        if expected != actual {
            return Liveness::Stale(format!(
                "pid {pid} now belongs to another process (start time {actual}, lock says {expected})"
            ));
        }
    }
    Liveness::Alive(format!("held by live pid {pid}"))
}
