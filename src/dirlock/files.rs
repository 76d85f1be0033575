//! A lock directory's names and files: building it complete and placing it, moving it
//! aside to remove it, spares and tombstones, and the descriptor-relative owner record.
//!
//! Every step here may race with another host that cannot see our guard flock: a name
//! that vanishes (`ENOENT`, `ESTALE`, `ENOTDIR`) or fills (`EEXIST`, `ENOTEMPTY`) under
//! us means "look again", never a fatal error.

use std::fs::{self, DirBuilder, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::stat::Mode;

use super::owner::LockOwner;
use crate::error::{Error, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::host;

pub(super) fn owner_file(lock: &Path) -> PathBuf {
    lock.join("owner.json")
}

pub(super) fn pid_file(lock: &Path) -> PathBuf {
    lock.join("pid")
}

/// The name went away or was replaced under us (another host removed it, or NFS
/// reports a handle to a removed directory as stale).
pub(super) fn vanished(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::ENOENT | Errno::ESTALE | Errno::ENOTDIR)
    )
}

/// [`vanished`] for a library error.
pub(super) fn error_vanished(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if vanished(source))
}

/// This process's private name beside `lock`: where a reusable lock is parked and where
/// any lock is built before it is renamed into place — `<lock>.spare.<pid>@<host id>`,
/// as pids collide across hosts (and pid namespaces). A leftover under it (a crash) is
/// cleared by `clear_spares` once we are gone.
pub(super) fn spare_path(lock: &Path) -> PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(format!(".spare.{}@{}", std::process::id(), host::host_id()));
    PathBuf::from(name)
}

/// The pid and host id a spare's name ends with (`<pid>` in names of older versions).
pub fn spare_suffix(suffix: &str) -> Option<(u32, Option<&str>)> {
    match suffix.split_once('@') {
        Some((pid, host)) => Some((pid.parse().ok()?, Some(host))),
        None => Some((suffix.parse().ok()?, None)),
    }
}

/// A fresh, unique name beside `lock` to move a lock directory to before removing it:
/// the lock's own name is free the moment the rename lands, whatever removal then
/// meets (a file the filesystem keeps as `.nfs*` / `.fuse_hidden*` while someone has
/// it open makes the directory unremovable for a while).
fn tombstone_path(lock: &Path) -> PathBuf {
    let mut name = lock.as_os_str().to_owned();
    name.push(format!(".tomb.{}", fsio::nonce()));
    PathBuf::from(name)
}

/// Whether renaming without replacing has worked here so far (network filesystems
/// answer `EINVAL`; we remember that per process).
static NOREPLACE_WORKS: AtomicBool =
    AtomicBool::new(cfg!(all(target_os = "linux", target_env = "gnu")));

/// Make `path` exist as our lock. `Ok(false)`: the lock exists (or our attempt met a
/// race): look again.
///
/// The directory appears with `pid` and `owner.json` already inside: it is built (or,
/// for a reusable lock, its parked spare rewritten) under our spare name and renamed
/// into place without replacing. Where the filesystem cannot rename without replacing,
/// a plain `rename` is used when the name is free: it fails on an existing non-empty
/// directory (held) and could only replace an *empty* one — which no version of this
/// protocol leaves in place (locks are born complete and moved aside before removal),
/// so only a foreign `mkdir`-based locker caught between its `mkdir` and its first
/// write could lose its lock that way.
pub(super) fn place(path: &Path, owner: &LockOwner, reusable: bool) -> Result<bool> {
    let spare = spare_path(path);
    let parked = reusable && fs::symlink_metadata(&spare).is_ok_and(|m| m.is_dir());
    let written = if parked {
        // In place: nobody else looks at a spare.
        fsio::overwrite_padded_in(
            &spare,
            &[
                ("pid", format!("{}\n", owner.pid).as_bytes()),
                ("owner.json", &fsio::to_json_bytes(owner)),
            ],
        )
    } else {
        // A leftover under our name is from an earlier process with our pid.
        bury(&spare);
        build_lock_dir(&spare, owner)
    };
    if let Err(e) = written {
        // Our spare was removed under us (a sweep that judged it abandoned), or a
        // leftover under our name could not be moved away: look again.
        if error_vanished(&e) || e.io_kind() == Some(io::ErrorKind::AlreadyExists) {
            tracing::debug!("building lock {}: {e}; looking again", path.display());
            return Ok(false);
        }
        return Err(e);
    }
    let placed = if NOREPLACE_WORKS.load(Ordering::Relaxed) {
        match rename_noreplace(&spare, path)? {
            Some(placed) => placed,
            None => {
                NOREPLACE_WORKS.store(false, Ordering::Relaxed);
                rename_if_free(&spare, path)?
            }
        }
    } else {
        rename_if_free(&spare, path)?
    };
    if !placed && !reusable {
        bury(&spare);
    }
    Ok(placed)
}

/// `rename` `from` onto `to` only when `to` does not exist; `Ok(false)` when it does
/// (or `from` vanished: look again).
fn rename_if_free(from: &Path, to: &Path) -> Result<bool> {
    // A name this host's caches still show may be gone on the server (another host
    // freed it): asked there, as the judging of the lock does.
    if fs::symlink_metadata(to).is_ok() && !super::fresh::gone_on_server(to) {
        return Ok(false);
    }
    match fs::rename(from, to) {
        Ok(()) => Ok(true),
        Err(e) if taken(&e) || vanished(&e) => Ok(false),
        // sshfs answers a rename onto an existing directory with EPERM (SFTP's generic
        // failure): someone placed theirs between our look and our rename.
        Err(e) if fs::symlink_metadata(to).is_ok() => {
            tracing::debug!("renaming onto {}: {e}; it exists: held", to.display());
            Ok(false)
        }
        Err(e) => Err(Error::io("rename spare lock into", to, e)),
    }
}

/// The target name is occupied.
fn taken(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EEXIST | Errno::ENOTEMPTY)
    )
}

/// Make the directory `dir` with our `pid` and `owner.json` inside (nobody else looks
/// at it until it is renamed into place).
fn build_lock_dir(dir: &Path, owner: &LockOwner) -> Result<()> {
    make_dir(dir)?;
    let written = write_owner_files(dir, owner);
    if written.is_err() {
        bury(dir);
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

/// `Some(false)`: `to` exists or `from` vanished. `None`: this filesystem cannot
/// rename without replacing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(from: &Path, to: &Path) -> Result<Option<bool>> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(Some(true)),
        Err(Errno::EEXIST | Errno::ENOTEMPTY | Errno::ENOENT | Errno::ESTALE) => Ok(Some(false)),
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => Ok(None),
        Err(e) => Err(Error::io("rename spare lock into", to, e.into())),
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(_from: &Path, _to: &Path) -> Result<Option<bool>> {
    Ok(None)
}

/// `mkdir` `path` (0700), creating its parent if needed; an existing one is refused.
fn make_dir(path: &Path) -> Result<()> {
    let mk = || DirBuilder::new().mode(0o700).create(path);
    match mk() {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                fsio::ensure_dir(parent)?;
            }
            mk().map_err(|e| Error::io("create lock directory", path, e))
        }
        Err(e) => Err(Error::io("create lock directory", path, e)),
    }
}

/// Move the lock directory at `path` aside in one step and remove it there (best
/// effort). `Ok(false)`: there was none. The name is free once this returns `Ok`.
pub(super) fn discard(path: &Path) -> Result<bool> {
    let tomb = tombstone_path(path);
    match fs::rename(path, &tomb) {
        Ok(()) => {
            bury(&tomb);
            Ok(true)
        }
        Err(e) if vanished(&e) => Ok(false),
        Err(e) => Err(Error::io("move lock aside", path, e)),
    }
}

/// Move the lock directory at `path` to a fresh tombstone name, to be judged there
/// before it is removed; `None`: there was none.
pub(super) fn move_aside(path: &Path) -> Result<Option<PathBuf>> {
    let tomb = tombstone_path(path);
    match fs::rename(path, &tomb) {
        Ok(()) => Ok(Some(tomb)),
        Err(e) if vanished(&e) => Ok(None),
        Err(e) => Err(Error::io("move lock aside", path, e)),
    }
}

/// Rename the lock moved aside to `tomb` back to `path`, without replacing whatever
/// took its place meanwhile; `Ok(false)` when something did (the tomb stays).
pub(super) fn put_back(tomb: &Path, path: &Path) -> Result<bool> {
    if NOREPLACE_WORKS.load(Ordering::Relaxed) {
        if let Some(back) = rename_noreplace(tomb, path)? {
            return Ok(back);
        }
        NOREPLACE_WORKS.store(false, Ordering::Relaxed);
    }
    rename_if_free(tomb, path)
}

/// Remove a directory that nobody looks at any more (a spare or tombstone), best
/// effort: what cannot go now (a silly-renamed open file inside) is moved to a
/// tombstone name if it is not one already, and swept later by [`clear_tombstones`].
pub(super) fn bury(dir: &Path) {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if vanished(&e) => {}
        Err(e) => {
            let is_tomb = dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".tomb."));
            tracing::debug!("cannot remove {} yet ({e}); left for gc", dir.display());
            if !is_tomb {
                let _ = fs::rename(dir, tombstone_path(dir));
            }
        }
    }
}

/// How long a tombstone is left alone: its remover may still be at work on it.
const TOMBSTONE_AGE: Duration = Duration::from_secs(60);

/// Remove the tombstones in `dir` (`*.tomb.<nonce>`) older than a minute, best effort.
pub fn clear_tombstones(dir: &Path) -> Result<()> {
    let Some(entries) = fsio::read_dir_if_exists(dir)? else {
        return Ok(());
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let is_tomb = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.contains(".tomb."));
        let old = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .is_some_and(|t| now.duration_since(t).unwrap_or_default() >= TOMBSTONE_AGE);
        if is_tomb && old {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    Ok(())
}

/// Remove the spares in `dir` whose name `suffix_of` reads a pid (and host id) from,
/// when that spare is provably abandoned: our own, or one of this host whose pid is
/// dead. A spare of another host (by its name, or the `owner.json` inside) is left
/// until it is older than `lease` (its pid means nothing here); one with neither is
/// judged by its pid here — if that was wrong (it was being built elsewhere), its
/// builder finds it gone and builds it again.
pub(super) fn clear_spares_where(
    dir: &Path,
    lease: Duration,
    suffix_of: impl Fn(&str) -> Option<&str>,
) -> Result<()> {
    let Some(entries) = fsio::read_dir_if_exists(dir)? else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, host_id)) = name.to_str().and_then(&suffix_of).and_then(spare_suffix) else {
            continue;
        };
        let path = entry.path();
        let owner: Option<LockOwner> =
            fsio::read_json(&owner_file(&path), SMALL_FILE_LIMIT).unwrap_or(None);
        let ours = match (host_id, &owner) {
            (Some(id), _) => id == host::host_id(),
            (None, Some(o)) => o.is_this_host(),
            (None, None) => true,
        };
        let abandoned = if ours {
            pid == std::process::id() || !host::pid_alive(pid)
        } else {
            entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .is_some_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() > lease)
        };
        if abandoned {
            bury(&path);
        }
    }
    clear_tombstones(dir)
}

/// `owner.json` of the lock directory open as `dir` — the directory itself, wherever it
/// has been moved to since: a holder checking whether the lock is still its own must
/// not be fooled by a new lock under the same name.
pub(super) fn read_owner_at(dir: &File, path: &Path) -> Option<LockOwner> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    // Without an access-time update where we may (our own file): a heartbeat reads the
    // record it is about to replace, and dirtying its inode each time costs a write-back.
    let fd = fcntl::openat(dir, "owner.json", flags | OFlag::O_NOATIME, Mode::empty())
        .or_else(|_| fcntl::openat(dir, "owner.json", flags, Mode::empty()))
        .ok()?;
    // Room for a whole record up front: read in one call, not in growing probes.
    let mut bytes = Vec::with_capacity(4096);
    File::from(fd)
        .take(SMALL_FILE_LIMIT)
        .read_to_end(&mut bytes)
        .ok()?;
    fsio::parse_json(&owner_file(path), &bytes).ok()
}

/// Replace `owner.json` in the lock directory open as `dir` (relative to it): if the
/// lock was moved aside, the write lands in the moved one. Swapped with its second name
/// `.owner.json.next` where the filesystem can ([`fsio::swap_in_at`]): a renewal then
/// makes and frees no inode — creating the temp file was most of a heartbeat's cost
/// (on ext4 ~0.5 ms, of ~1,000 gate leases renewed every 30 s). The record swapped out
/// is rewritten one renewal later, at least 0.5 s on. Else a temp file + rename.
pub(super) fn write_owner_at(dir: &File, path: &Path, owner: &LockOwner) -> Result<()> {
    let record = fsio::to_json_bytes(owner);
    let name = std::ffi::OsStr::new("owner.json");
    if let Some(done) = fsio::swap_in_at(dir, name, &owner_file(path), &record) {
        return done;
    }
    let tmp = format!(".owner.json.{}.tmp", fsio::nonce());
    let fd = fcntl::openat(
        dir,
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| Error::io("create temp file in", path, e.into()))?;
    let written = File::from(fd).write_all(&record);
    let renamed = written
        .and_then(|()| fcntl::renameat(dir, tmp.as_str(), dir, "owner.json").map_err(Into::into));
    if let Err(e) = renamed {
        let _ = nix::unistd::unlinkat(dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Err(Error::io("renew lock owner in", path, e));
    }
    Ok(())
}

/// Make the owner record's second name (`.owner.json.next`) now, empty, so that no
/// renewal of a long-held lock creates a file: a gate's first renewal came in the
/// worker's first idle minute, a thousand file creations where the idle cost is
/// measured. Best effort: a renewal makes it if this could not.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn ready_owner_swap(path: &Path) {
    let Some(dir) = open_dir(path) else {
        return;
    };
    if fsio::swap_refused_in(&dir) {
        return; // renewals replace the record with a temp file there
    }
    let next = fsio::next_name(std::ffi::OsStr::new("owner.json"));
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if let Err(e) = fcntl::openat(
        &dir,
        next.as_os_str(),
        flags,
        Mode::from_bits_truncate(0o600),
    ) {
        tracing::debug!("readying {}: {e}", path.join(&next).display());
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn ready_owner_swap(_path: &Path) {}

/// Open the lock directory at `path` (no link followed); `None` when it is gone.
pub(super) fn open_dir(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .ok()
}
