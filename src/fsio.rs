//! Atomic file I/O: staged temp files, rename/link publication, bounded safe reads.

use std::ffi::{OsStr, OsString};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{self, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;
use nix::unistd::{self, UnlinkatFlags};
use serde::Serialize;

use crate::error::{Error, FileProblem, Result};

pub mod commit;
pub mod commit_owed;
mod counted;
mod read;
pub mod space;
pub use commit::{
    commit_dirs, commit_file, commit_file_at, commit_moved, fsync_dir, in_one_commit, sync_count,
};
pub use commit_owed::{owing, Debt};
pub use read::{
    open_regular, parse_json, read_bounded, read_bounded_open, read_json, reread_bounded,
};
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) use read::statx_from_server;
mod swap;
use swap::swap_in_at_via;
pub use swap::{next_name, refused_in as swap_refused_in, swap_in_at};
mod fsync;
use fsync::fsync_on;
pub use fsync::{set_fsync, set_fsync_for_root};
mod flags;
pub use flags::set_nonblocking;

/// Default size limit for a task file.
pub const TASK_SIZE_LIMIT: u64 = 4 * 1024 * 1024;
/// Size limit for status, owner and other small control files.
pub const SMALL_FILE_LIMIT: u64 = 1024 * 1024;
/// Size limit for result files (they carry agent output inline).
pub const RESULT_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// Whether a write must survive a power loss once it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and its directory: records rewritten in place of an old version.
    Durable,
    /// Durable once the call returns, by one commit shared with the writes of every
    /// other thread (`fsio/commit.rs`) after the name is published. A machine crash
    /// *before* it returns may leave the new name empty or cut short: only for a name
    /// that did not exist and whose readers treat such a file as never written (a
    /// task delivered, a queue entry, a result).
    Grouped,
    /// Atomic but not fsynced: status and other state that is rewritten often.
    Atomic,
}

/// A string unique to this process and call: used in temp names and lock nonces.
pub fn nonce() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:x}-{:x}-{:x}",
        crate::host::pid(),
        nanos & 0xffff_ffff_ffff,
        seq
    )
}

/// Create a directory (and its parents) with mode 0700.
pub fn ensure_dir(path: &Path) -> Result<()> {
    // Nearly always there already: one look, where mkdir's "exists" and the look std
    // makes after it were two (~4 a task on a worker's path).
    if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    // "Exists" from mkdir, then "not found" from the look that follows: another host
    // made it, and this client still has its earlier miss cached (GlusterFS, for about
    // its entry timeout). Looked at again, bounded.
    let deadline = std::time::Instant::now() + ENTRY_CACHE_WAIT;
    loop {
        match DirBuilder::new().recursive(true).mode(0o700).create(path) {
            Ok(()) => return Ok(()),
            Err(e)
                if e.kind() == io::ErrorKind::AlreadyExists
                    && fs::symlink_metadata(path).is_err()
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(Error::io("create directory", path, e)),
        }
    }
}

/// How long [`ensure_dir`] waits for a client's cached miss of a directory another host
/// made to expire (GlusterFS's FUSE client keeps entries 1 s by default).
const ENTRY_CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Open `path` for writing, empty, readable by its owner only (mode 0600, also when it
/// existed with a wider mode); a symbolic link there is refused. For logs, which quote
/// prompts and agent output.
pub fn create_private(path: &Path) -> Result<File> {
    use std::os::unix::fs::PermissionsExt;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("restrict the permissions of", path, e))?;
    Ok(file)
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The directory a write goes into, opened without following a link at its last
/// component: every name below is then created, linked and renamed relative to this
/// descriptor, so a directory swapped for a link is refused, not written through.
struct Dir {
    fd: File,
    path: PathBuf,
    /// Its filesystem, looked up at the first step that asks (`None`: it could not be).
    fs: std::cell::OnceCell<Option<commit::DirFs>>,
}

impl Dir {
    fn open(path: &Path) -> Result<Dir> {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
            .open(path);
        match opened {
            Ok(fd) => Ok(Dir {
                fd,
                path: path.to_path_buf(),
                fs: std::cell::OnceCell::new(),
            }),
            Err(_) if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                Err(link_refusal(path))
            }
            Err(e) => Err(Error::io("open directory", path, e)),
        }
    }

    /// The directory of `path`, and `path`'s name in it.
    fn of(path: &Path) -> Result<(Dir, &OsStr)> {
        let name = path.file_name().ok_or_else(|| {
            Error::io(
                "write",
                path,
                io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
            )
        })?;
        Ok((Dir::open(parent_of(path))?, name))
    }

    fn sync(&self) -> Result<()> {
        if !fsync_on() {
            return Ok(());
        }
        commit::counted(|| self.fd.sync_all())
            .map_err(|e| Error::io("fsync directory", &self.path, e))
    }

    /// Whether a [`Durability::Grouped`] write here is made durable by one shared
    /// commit after it is published (else file by file, as a durable one).
    fn commits_whole(&self, durability: Durability) -> bool {
        durability == Durability::Grouped
            && fsync_on()
            && self.fs().is_some_and(|f| f.reach() == commit::Reach::WholeFilesystem)
    }

    fn fs(&self) -> Option<&commit::DirFs> {
        let found = || commit::DirFs::of(&self.fd, &self.path).ok();
        self.fs.get_or_init(found).as_ref()
    }

    /// Make `file`, just published here, durable with its name, as `durability` asks.
    fn make_durable(&self, durability: Durability, whole: bool, file: &File) -> Result<()> {
        match durability {
            Durability::Atomic => Ok(()),
            Durability::Grouped if whole => match self.fs() {
                Some(fs) => fs.commit_file(&self.path, file),
                None => commit::commit_file(&self.path, file),
            },
            _ => self.sync(),
        }
    }

    fn unlink(&self, name: &OsStr) {
        let _ = unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir);
    }

    /// Create `name` fresh (O_EXCL, O_NOFOLLOW, 0600).
    fn create_new(&self, name: &OsStr) -> Result<File> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
        fcntl::openat(
            &self.fd,
            name,
            flags | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map(File::from)
        .map_err(|e| Error::io("create temp file", self.path.join(name), e.into()))
    }

    /// Rename `from` over `to`, both in this directory.
    fn rename(&self, from: &OsStr, to: &OsStr) -> Result<()> {
        fcntl::renameat(&self.fd, from, &self.fd, to)
            .map_err(|e| Error::io("rename into place", self.path.join(to), e.into()))
    }
}

/// A temp name for `name`: `.NAME.<nonce>.tmp`.
fn temp_name(name: &OsStr) -> OsString {
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{}.tmp", nonce()));
    tmp
}

/// Stage `bytes` for `name` in a fresh temp file in `dir` (same filesystem as the
/// target); returns the temp file's name, and the file.
/// A [`Durability::Grouped`] write whose commit comes after the publication
/// (`whole`: see [`Dir::commits_whole`]) is not fsynced here.
fn stage_in(
    dir: &Dir,
    name: &OsStr,
    bytes: &[u8],
    durability: Durability,
    whole: bool,
) -> Result<(OsString, File)> {
    let tmp = temp_name(name);
    let mut f = dir.create_new(&tmp)?;
    let res = f.write_all(bytes).and_then(|()| {
        if durability != Durability::Atomic && !whole && fsync_on() {
            commit::counted(|| f.sync_all())
        } else if whole && dir.fs().is_some_and(commit::DirFs::owes) {
            // Its commit is owed to a later one: the bytes go out before the name.
            commit_owed::write_out(&f)
        } else {
            Ok(())
        }
    });
    if let Err(e) = res {
        dir.unlink(&tmp);
        return Err(Error::io("write temp file", dir.path.join(&tmp), e));
    }
    Ok((tmp, f))
}

/// Atomically replace `path` with `bytes` (temp file + rename).
pub fn write_replace(path: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    let whole = dir.commits_whole(durability);
    let (tmp, file) = stage_in(&dir, name, bytes, durability, whole)?;
    if let Err(e) = dir.rename(&tmp, name) {
        dir.unlink(&tmp);
        return Err(e);
    }
    dir.make_durable(durability, whole, &file)
}

/// Atomically replace `path` with `bytes` by swapping it with its second name
/// `.NAME.next` (see [`swap_in_at`]): no inode made or freed per write. Where the
/// filesystem cannot swap names, a temp file + rename. For small files rewritten often
/// by one writer at a time (a slot's status). Not fsynced.
pub fn write_swapped(path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    swapped_or_replaced(&dir, name, &next_name(name), path, bytes)
}

/// [`write_swapped`] with a second name of the caller's choosing, in `path`'s directory
/// (one per process where several processes replace one file).
pub fn write_swapped_via(path: &Path, next: &OsStr, bytes: &[u8]) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    swapped_or_replaced(&dir, name, next, path, bytes)
}

fn swapped_or_replaced(
    dir: &Dir,
    name: &OsStr,
    next: &OsStr,
    path: &Path,
    bytes: &[u8],
) -> Result<()> {
    match swap_in_at_via(&dir.fd, name, next, path, bytes) {
        Some(done) => done,
        None => write_replace(path, bytes, Durability::Atomic),
    }
}

/// Hard-link `from_name` in `from` as `path` (never replacing), then drop the temp name.
fn publish(from: &Dir, tmp: &OsStr, to: &Dir, name: &OsStr, path: &Path) -> Result<()> {
    let linked = unistd::linkat(&from.fd, tmp, &to.fd, name, AtFlags::empty());
    from.unlink(tmp);
    linked.map_err(|e| Error::io("publish", path, e.into()))
}

/// Atomically create `path` with `bytes`, never replacing an existing file
/// (temp file + link). An existing file gives an `Io` error of kind `AlreadyExists`.
pub fn write_new(path: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    let whole = dir.commits_whole(durability);
    let (tmp, file) = stage_in(&dir, name, bytes, durability, whole)?;
    publish(&dir, &tmp, &dir, name, path)?;
    dir.make_durable(durability, whole, &file)
}

/// Overwrite a private file in place without truncating it: `text` is padded with
/// spaces (before its final newline) to the file's current length, so the same blocks
/// are rewritten and nothing is freed — freeing file data is the expensive step on
/// many filesystems. Only for whitespace-tolerant text (JSON, a pid) that nobody else
/// reads while we write it. An unchanged file is not written at all.
pub fn overwrite_padded(path: &Path, text: &[u8]) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    overwrite_padded_at(&dir, name, text)
}

/// [`overwrite_padded`] for several files of one directory, opened once: `(name, text)`
/// in order, stopping at the first failure.
pub fn overwrite_padded_in(dir: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    let dir = Dir::open(dir)?;
    for (name, text) in files {
        overwrite_padded_at(&dir, OsStr::new(name), text)?;
    }
    Ok(())
}

fn overwrite_padded_at(dir: &Dir, name: &OsStr, text: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let path = &dir.path.join(name);
    let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let f = fcntl::openat(&dir.fd, name, flags, Mode::from_bits_truncate(0o600))
        .map(File::from)
        .map_err(|e| Error::io("open", path, e.into()))?;
    let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len() as usize;
    let mut bytes = text.to_vec();
    if bytes.len() < len {
        let body = bytes
            .strip_suffix(b"\n")
            .map(<[u8]>::len)
            .unwrap_or(bytes.len());
        let pad = len - bytes.len();
        bytes.splice(body..body, std::iter::repeat_n(b' ', pad));
    }
    if bytes.len() == len {
        let mut current = vec![0; len];
        if f.read_exact_at(&mut current, 0).is_ok() && current == bytes {
            return Ok(());
        }
    }
    f.write_all_at(&bytes, 0)
        .map_err(|e| Error::io("write", path, e))
}

/// Atomically make `path` another name for the existing file `src` (link to a temp
/// name, then rename over `path`). Not fsynced.
pub fn link_replace(src: &Path, path: &Path) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    let tmp = temp_name(name);
    unistd::linkat(AT_FDCWD, src, &dir.fd, tmp.as_os_str(), AtFlags::empty())
        .map_err(|e| Error::io("link", dir.path.join(&tmp), e.into()))?;
    if let Err(e) = dir.rename(&tmp, name) {
        dir.unlink(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Link `src` as `path`, a name that must not exist yet (`AlreadyExists` then): one
/// `linkat` into the directory opened without following a link, the file whole from
/// its first moment under the name.
pub fn link_new(src: &Path, path: &Path) -> Result<()> {
    let (dir, name) = Dir::of(path)?;
    unistd::linkat(AT_FDCWD, src, &dir.fd, name, AtFlags::empty())
        .map_err(|e| Error::io("link", path, e.into()))
}

/// Like [`write_new`], staging in `tmp_dir` (e.g. `queue/tmp/`) so that nothing
/// half-written ever appears in `path`'s directory, even under a temp name. Durable.
///
/// On a network or FUSE filesystem the new name is then announced by a create and an
/// unlink of a temp name in `path`'s directory ([`announce_in`]): nfs-ganesha keeps
/// serving a directory's pre-LINK attributes after a LINK into it, so another host
/// polling them would not see the new entry for minutes; a create changes them for
/// every client.
pub fn write_new_via(tmp_dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    write_new_via_as(tmp_dir, path, bytes, Durability::Durable)
}

/// [`write_new_via`], [`Durability::Grouped`] (the staging directory on `path`'s
/// filesystem): for a new queue entry, which a crash before this returns may leave cut
/// short — the queue then refuses it as not a task.
pub fn write_new_via_grouped(tmp_dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    write_new_via_as(tmp_dir, path, bytes, Durability::Grouped)
}

fn write_new_via_as(
    tmp_dir: &Path,
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> Result<()> {
    let staging = Dir::open(tmp_dir)?;
    let (dir, name) = Dir::of(path)?;
    let whole = dir.commits_whole(durability);
    let (tmp, file) = stage_in(&staging, name, bytes, durability, whole)?;
    publish(&staging, &tmp, &dir, name, path)?;
    if dir_is_shared(&dir) {
        announce_in(&dir, name);
    }
    dir.make_durable(durability, whole, &file)
}

/// Whether `dir` is on a filesystem other hosts may share (no local change events).
fn dir_is_shared(dir: &Dir) -> bool {
    match dir.fs() {
        Some(fs) => fs.shared(),
        None => crate::fs_kind::of_fd(&dir.fd).is_some_and(|k| k.eventless),
    }
}

/// Create and remove a temp name (a dot name: never an entry) in `dir`, so that its
/// attributes change for every client of a server that did not change them for a link
/// (best effort: the link is done either way).
fn announce_in(dir: &Dir, name: &OsStr) {
    let tmp = temp_name(name);
    match dir.create_new(&tmp) {
        Ok(f) => {
            drop(f);
            dir.unlink(&tmp);
        }
        Err(e) => tracing::debug!("announcing {}: {e}", dir.path.join(name).display()),
    }
}

/// Serialize `value` as pretty JSON with a trailing newline (what `cat` users like).
pub fn to_json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(value).expect("protocol types always serialize");
    v.push(b'\n');
    v
}

/// Write `value` as JSON, replacing any existing file.
pub fn write_json<T: Serialize>(path: &Path, value: &T, durability: Durability) -> Result<()> {
    write_replace(path, &to_json_bytes(value), durability)
}

/// The entries of `dir`, or `None` when it does not exist (a directory not made yet
/// holds nothing); any other failure names `dir`.
pub fn read_dir_if_exists(dir: &Path) -> Result<Option<fs::ReadDir>> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("list", dir, e)),
    }
}

/// Move a file to a name that must be free, in one step (`RENAME_NOREPLACE`); where the
/// filesystem cannot, a hard link then the unlink of the old name (both names are the
/// same file for that moment). An existing `to` is `AlreadyExists`, and nothing moved.
pub fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(Error::io("move (without replacing) to", to, e.into())),
        }
    }
    fs::hard_link(from, to).map_err(|e| Error::io("link (without replacing) to", to, e))?;
    fs::remove_file(from).map_err(|e| Error::io("remove", from, e))
}

/// Remove a file; a missing file is fine. Returns whether something was removed.
pub fn remove_file_if_exists(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

/// The refusal for a protocol directory found to be a symbolic link.
pub fn link_refusal(dir: &Path) -> Error {
    let target = fs::read_link(dir)
        .map(|t| format!(" (pointing to {})", t.display()))
        .unwrap_or_default();
    Error::bad(
        dir,
        FileProblem::Invalid(format!(
            "is a symbolic link{target}; conductor never writes through links inside its \
             root. Fix: remove the link (`rm {}`); the directory is recreated (0700) by the \
             next worker start or `conductor init`",
            dir.display()
        )),
    )
}

/// Entries of `dir` (sorted by name; symlinks not followed); a missing directory has none.
pub fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let Some(rd) = read_dir_if_exists(dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue; // gone meanwhile
        };
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
            meta,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Regular files in `dir`, sorted by name; a missing directory has none.
pub fn regular_files(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let mut all = sorted_entries(dir)?;
    all.retain(|(_, _, meta)| meta.file_type().is_file());
    Ok(all)
}

/// `.NAME.<nonce>.tmp`: a file being written atomically, or what an interrupted write
/// left behind.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > ".tmp".len() + 1
}

/// The prefix of a damaged file's name once set aside ([`set_aside_damaged`]).
pub const DAMAGED_PREFIX: &str = ".damaged-";

/// Move a damaged file out of the way, beside itself as `.damaged-<name>.<nonce>`
/// (never read as a record again, listed by `doctor`); returns where it went. A file
/// gone meanwhile is no error (`None`).
pub fn set_aside_damaged(path: &Path) -> Result<Option<PathBuf>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let aside = dir.join(format!(
        "{DAMAGED_PREFIX}{}.{}",
        name.to_string_lossy(),
        nonce()
    ));
    match fs::rename(path, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("set aside damaged file", path, e)),
    }
}

/// The first `limit` bytes of a regular file, never through a link and never blocking
/// (a planted FIFO); `None` for anything else or on error. For reading what can be read
/// of a file too large (or too broken) to read whole: an id to answer it by.
pub fn read_head(path: &Path, limit: usize) -> Option<Vec<u8>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = Vec::new();
    f.take(limit as u64).read_to_end(&mut head).ok()?;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim's case: the inbox read, renamed, rewritten in place under its new name
    /// by a non-atomic client; read again through the descriptor, what it holds now.
    #[test]
    fn a_file_read_again_through_its_descriptor_is_what_its_new_name_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (inbox, running) = (
            dir.path().join("task.json"),
            dir.path().join("running.json"),
        );
        fs::write(&inbox, "first").unwrap();
        let (file, meta, bytes) = read_bounded_open(&inbox, 100).unwrap().unwrap();
        assert_eq!((bytes.as_slice(), meta.len()), (&b"first"[..], 5));
        fs::rename(&inbox, &running).unwrap();
        fs::write(&running, "second, longer").unwrap();
        assert_eq!(reread_bounded(&file, 100, None).unwrap(), b"second, longer");
        // One byte past the limit tells a file grown too large.
        assert_eq!(reread_bounded(&file, 3, None).unwrap().len(), 4);
    }

    use std::os::unix::fs::MetadataExt;

    /// The announcement changes the directory's times (what a poller on another host
    /// compares) and leaves no name behind.
    #[test]
    fn an_announcement_changes_the_directorys_times_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("t.json"), "{}").unwrap();
        let mtime = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.mtime(), m.mtime_nsec())
        };
        // Old times, as a server that kept the pre-link attributes would show them.
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        File::open(d.path()).unwrap().set_modified(old).unwrap();
        let before = mtime(d.path());
        let dir = Dir::open(d.path()).unwrap();
        announce_in(&dir, OsStr::new("t.json"));
        assert_ne!(
            before,
            mtime(d.path()),
            "the directory's mtime is unchanged"
        );
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [OsStr::new("t.json")]);
    }
}
