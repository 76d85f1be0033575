//! Group commit: one `syncfs(2)` makes durable every write this process made before it
//! started, shared by every caller that asked while the previous one ran.
//!
//! A durable root used to pay an fsync of each new file and another of its directory,
//! one after another: five journal commits a task on ext4. A commit here is one
//! `syncfs` of the filesystem (its dirty data first, then one journal commit), and a
//! caller waits only for a commit that *started after* it asked — so its write is in
//! it — while everyone who asks during a commit shares the next one. Where `syncfs`
//! may not reach the server (network and FUSE filesystems, or one we cannot name),
//! the caller gets [`Reach::FileByFile`] and keeps the fsyncs of old.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::error::{Error, Result};

pub use super::counted::sync_count;
pub(crate) use super::counted::counted;

/// How a filesystem's writes are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// One `syncfs` covers every file and name on it: local filesystems.
    WholeFilesystem,
    /// Each file and directory is fsynced itself (network and FUSE filesystems, where
    /// `syncfs` may stop at the local cache, and filesystems we do not know).
    FileByFile,
}

/// One filesystem's commits.
struct Group {
    /// A directory on the filesystem, opened once: what `syncfs` is called on.
    fd: File,
    /// The filesystem's device number.
    dev: u64,
    reach: Reach,
    /// Other hosts may mount it (network and FUSE filesystems: no local change events).
    shared: bool,
    /// An fsync of a file commits the names just made for it too (see [`commit_file`]).
    name_with_file: bool,
    /// The commit itself: `syncfs` (a stand-in in the unit tests).
    sync: fn(&File) -> io::Result<()>,
    state: Mutex<State>,
    finished: Condvar,
}

#[derive(Default)]
struct State {
    /// Commits started so far (the number of the latest).
    started: u64,
    /// The latest commit that has ended.
    finished: u64,
    /// A commit is under way (`started` is its number).
    running: bool,
    /// The latest commit that failed, and its error.
    failed: Option<(u64, i32)>,
}

/// The groups of this process, by device number.
fn groups() -> &'static Mutex<HashMap<u64, Arc<Group>>> {
    static GROUPS: OnceLock<Mutex<HashMap<u64, Arc<Group>>>> = OnceLock::new();
    GROUPS.get_or_init(Default::default)
}

fn group_of(dir: &Path) -> Result<Arc<Group>> {
    let dev = std::fs::metadata(dir)
        .map_err(|e| Error::io("look at directory", dir, e))?
        .dev();
    group_on(dev, dir)
}

/// The group of device `dev`, made on first use from `dir`, a directory on it.
fn group_on(dev: u64, dir: &Path) -> Result<Arc<Group>> {
    let mut all = groups().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(g) = all.get(&dev) {
        return Ok(Arc::clone(g));
    }
    let fd = File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
    let kind = crate::fs_kind::of_fd(&fd);
    let reach = match &kind {
        Some(kind) if !kind.eventless && !kind.name.starts_with("filesystem type") => {
            Reach::WholeFilesystem
        }
        _ => Reach::FileByFile,
    };
    let shared = kind.is_some_and(|k| k.eventless);
    let name_with_file = reach == Reach::WholeFilesystem && journals_names(&fd, dev);
    let g = Arc::new(Group {
        fd,
        dev,
        reach,
        shared,
        name_with_file,
        sync: syncfs,
        state: Mutex::new(State::default()),
        finished: Condvar::new(),
    });
    all.insert(dev, Arc::clone(&g));
    Ok(g)
}

/// Make the renames, links and unlinks in `dirs` durable: one shared [`commit`] per
/// filesystem where that covers everything, else an fsync of each directory. Nothing
/// when the root is written without fsyncs.
pub fn commit_dirs(dirs: &[&Path]) -> Result<()> {
    if !super::fsync::fsync_on() {
        return Ok(());
    }
    let mut committed: Vec<u64> = Vec::new();
    for dir in dirs {
        let dev = std::fs::metadata(dir)
            .map_err(|e| Error::io("look at directory", *dir, e))?
            .dev();
        if committed.contains(&dev) {
            continue;
        }
        commit(dir)?;
        if group_on(dev, dir)?.reach == Reach::WholeFilesystem {
            committed.push(dev);
        }
    }
    Ok(())
}

/// Make every write this process made on `dir`'s filesystem before this call durable,
/// through a `syncfs` that starts after the call — shared with every other caller of
/// this process waiting for the same one. Only for a [`Reach::WholeFilesystem`]
/// filesystem (the caller asked [`reach`]); elsewhere this fsyncs `dir` alone.
pub fn commit(dir: &Path) -> Result<()> {
    commit_in(&*group_of(dir)?, dir)
}

/// [`commit`] of `dir`, on the filesystem of group `g`.
fn commit_in(g: &Group, dir: &Path) -> Result<()> {
    if g.reach == Reach::WholeFilesystem && deferred(dir) {
        return Ok(());
    }
    if g.reach == Reach::FileByFile {
        let d = File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
        return counted(|| d.sync_all()).map_err(|e| Error::io("fsync directory", dir, e));
    }
    g.commit()
        .map_err(|e| Error::io("sync the filesystem of", dir, e))
}

/// Make `file`, just published in `dir` under a new name (linked or renamed there),
/// durable with that name. Where the filesystem's journal logs a link or rename in the
/// transaction that changes the file's own inode (its ctime, its link count), and an
/// fsync of the file commits that transaction — ext4 with a journal, xfs — one fsync of
/// the file does it: a journal commit that the kernel shares between the processes
/// fsyncing at once, without `syncfs`'s writeback of every dirty file of the filesystem
/// (on a journaled ext4 here, 4.0 ms p50 against 6.2). Elsewhere the shared [`commit`]
/// of `dir`'s filesystem. Nothing when the root is written without fsyncs.
pub fn commit_file(dir: &Path, file: &File) -> Result<()> {
    if !super::fsync::fsync_on() {
        return Ok(());
    }
    commit_file_in(&*group_of(dir)?, dir, file)
}

/// [`commit_file`] on the filesystem of group `g`.
fn commit_file_in(g: &Group, dir: &Path, file: &File) -> Result<()> {
    if g.name_with_file && !deferring() {
        // Inside `commit_owed::owing` (a task's end): the slot's next claim pays it.
        if super::commit_owed::owe(g.dev, dir, file) {
            return Ok(());
        }
        return counted(|| file.sync_all()).map_err(|e| Error::io("fsync the file in", dir, e));
    }
    commit_in(g, dir)
}

/// The filesystem of a directory a write goes into, found once by an `fstat` of the
/// directory's descriptor: each step of the write asks it ([`DirFs::reach`], whether
/// the commit is owed, whether other hosts share it, the commit) instead of looking
/// the directory up by path again — two `statx` and an `fstatfs` a write (issue 39).
#[derive(Clone)]
pub(crate) struct DirFs(Arc<Group>);

impl DirFs {
    /// The filesystem of the directory open as `fd` (at `dir`).
    pub(crate) fn of(fd: &File, dir: &Path) -> Result<DirFs> {
        let dev = fd
            .metadata()
            .map_err(|e| Error::io("look at directory", dir, e))?
            .dev();
        group_on(dev, dir).map(DirFs)
    }

    pub(crate) fn reach(&self) -> Reach {
        self.0.reach
    }

    /// Other hosts may mount it (no local change events).
    pub(crate) fn shared(&self) -> bool {
        self.0.shared
    }

    /// Whether a file about to be published here has its commit owed
    /// ([`super::commit_owed::owing`]): then its bytes are written out before its name.
    pub(crate) fn owes(&self) -> bool {
        super::fsync::fsync_on()
            && super::commit_owed::owing_now()
            && !deferring()
            && self.0.name_with_file
    }

    /// [`commit_file`] of `file`, just published in `dir` (on this filesystem).
    pub(crate) fn commit_file(&self, dir: &Path, file: &File) -> Result<()> {
        if !super::fsync::fsync_on() {
            return Ok(());
        }
        commit_file_in(&self.0, dir, file)
    }
}

/// The device of the filesystem `dir` is on, as the commits know it (looked up once).
pub(crate) fn device_of(dir: &Path) -> Result<u64> {
    group_of(dir).map(|g| g.dev)
}

/// [`commit_file`] of the file at `path`, opened only when the root is fsynced (where
/// it cannot be opened, the shared commit of `dir`).
pub fn commit_file_at(dir: &Path, path: &Path) -> Result<()> {
    if !super::fsync::fsync_on() {
        return Ok(());
    }
    match File::open(path) {
        Ok(f) => commit_file(dir, &f),
        Err(_) => commit(dir),
    }
}

/// Make a rename of a file into `path` out of and into `dirs` durable: an fsync of the
/// file where all of `dirs` are one filesystem that carries names with the file (one
/// rename changes the file's inode in the transaction that moves it), else
/// [`commit_dirs`].
pub fn commit_moved(path: &Path, dirs: &[&Path]) -> Result<()> {
    if !super::fsync::fsync_on() {
        return Ok(());
    }
    let devs: Vec<u64> = dirs
        .iter()
        .filter_map(|d| std::fs::metadata(d).ok().map(|m| m.dev()))
        .collect();
    let one_fs = devs.len() == dirs.len() && devs.windows(2).all(|w| w[0] == w[1]);
    if let (true, Some(&dev), Some(dir)) = (one_fs, devs.first(), dirs.first()) {
        if group_on(dev, dir)?.name_with_file && !deferring() {
            if let Ok(f) = File::open(path) {
                return counted(|| f.sync_all()).map_err(|e| Error::io("fsync", path, e));
            }
        }
    }
    commit_dirs(dirs)
}

thread_local! {
    /// Inside [`in_one_commit`]: a directory of each filesystem whose commit this
    /// thread put off.
    static DEFERRED: RefCell<Option<Vec<PathBuf>>> = const { RefCell::new(None) };
}

fn deferring() -> bool {
    DEFERRED.with(|d| d.borrow().is_some())
}

/// Inside [`in_one_commit`]: note that `dir`'s filesystem is to be committed at its
/// end, and say so (`false`: commit now).
fn deferred(dir: &Path) -> bool {
    DEFERRED.with(|d| match d.borrow_mut().as_mut() {
        Some(dirs) => {
            dirs.push(dir.to_path_buf());
            true
        }
        None => false,
    })
}

/// Run `make` with this thread's commits of whole filesystems ([`commit`],
/// [`commit_file`], [`commit_dirs`]) put off, then make everything it wrote durable by
/// one shared commit per filesystem: what one process writing many new names (a
/// `submit --batch`) pays once instead of once a name. Nothing `make` wrote is durable
/// until this returns `Ok`, so nobody may be told of it before (file-by-file
/// filesystems still fsync as they go). The commit runs even when `make` failed, for
/// what it did write.
pub fn in_one_commit<T>(make: impl FnOnce() -> T) -> (T, Result<()>) {
    /// Gives the thread back the deferral it had, even when `make` panics: a thread
    /// left deferring would never commit again.
    struct Restore(Option<Option<Vec<PathBuf>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                DEFERRED.with(|d| *d.borrow_mut() = outer);
            }
        }
    }
    let mut restore = Restore(Some(DEFERRED.with(|d| d.borrow_mut().replace(Vec::new()))));
    let made = make();
    let outer = restore.0.take().unwrap_or_default();
    let dirs = DEFERRED.with(|d| std::mem::replace(&mut *d.borrow_mut(), outer));
    let mut seen: Vec<u64> = Vec::new();
    let mut done = Ok(());
    for dir in dirs.unwrap_or_default() {
        let dev = match std::fs::metadata(&dir) {
            Ok(m) => m.dev(),
            Err(e) => {
                done = done.and(Err(Error::io("look at directory", &dir, e)));
                continue;
            }
        };
        if !seen.contains(&dev) {
            seen.push(dev);
            done = done.and(commit(&dir));
        }
    }
    (made, done)
}

/// Whether an fsync of a file on this filesystem (of device `dev`, a directory of it
/// open as `fd`) commits the names made for the file before it: xfs (every change is
/// logged, in order), ext4 with a journal (seen by its `jbd2` journal in `/proc`; an
/// ext4 without one writes names back on its own schedule). Not btrfs, whose fsync
/// writes a log of its own for the file, and nothing we do not know.
fn journals_names(fd: &File, dev: u64) -> bool {
    match crate::fs_kind::of_fd(fd) {
        Some(kind) if kind.name == "xfs" => true,
        Some(kind) if kind.name == "ext2/3/4" => ext4_journal_in(Path::new("/"), dev),
        _ => false,
    }
}

/// Whether the ext4 on device `dev` has its journal inside (`/proc/fs/jbd2/NAME-8`, the
/// journal's inode 8 on the block device `/sys/dev/block/MAJOR:MINOR` names), under
/// `top` (`/`; a stand-in tree in the tests). An external journal is not recognized: the
/// caller then keeps `syncfs`.
fn ext4_journal_in(top: &Path, dev: u64) -> bool {
    #[allow(clippy::unnecessary_cast)] // dev_t's width differs between platforms
    let dev = dev as nix::libc::dev_t;
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let block = top.join(format!("sys/dev/block/{major}:{minor}"));
    let Some(name) = std::fs::read_link(block)
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
    else {
        return false;
    };
    top.join(format!("proc/fs/jbd2/{name}-8")).exists()
}

fn syncfs(fd: &File) -> io::Result<()> {
    nix::unistd::syncfs(fd).map_err(io::Error::from)
}

impl State {
    /// How commit `ours` went, once it (or a later one) has ended.
    fn outcome(&self, ours: u64) -> Option<io::Result<()>> {
        if self.finished < ours {
            return None;
        }
        Some(match self.failed {
            // A later commit's failure may be a write of ours that the failed commit
            // reported first (the kernel reports a writeback error once): failed too.
            Some((n, errno)) if n >= ours => Err(io::Error::from_raw_os_error(errno)),
            _ => Ok(()),
        })
    }
}

impl Group {
    fn commit(&self) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // A commit already under way may have started before our write: ours is the
        // next one.
        let ours = s.started + 1;
        loop {
            if let Some(done) = s.outcome(ours) {
                return done;
            }
            if s.running {
                s = self.finished.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            s.running = true;
            s.started += 1;
            let n = s.started;
            drop(s);
            let done = counted(|| (self.sync)(&self.fd));
            s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.running = false;
            s.finished = n;
            if let Err(e) = done {
                s.failed = Some((n, e.raw_os_error().unwrap_or(EIO)));
            }
            self.finished.notify_all();
        }
    }
}

const EIO: i32 = nix::errno::Errno::EIO as i32;

/// fsync a directory so a rename, link or unlink inside it is durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    if !super::fsync::fsync_on() {
        return Ok(());
    }
    let d = File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
    counted(|| d.sync_all()).map_err(|e| Error::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    static SLOW_SYNCS: AtomicU64 = AtomicU64::new(0);


    /// A commit that takes a while, so that callers pile up behind it.
    fn slow_sync(_: &File) -> io::Result<()> {
        SLOW_SYNCS.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        Ok(())
    }

    /// Eight callers asking at once share commits — fewer commits than callers — and
    /// each returns only after a commit that started after it asked.
    #[test]
    fn callers_waiting_together_share_commits() {
        let g = Group {
            fd: File::open("/").unwrap(),
            dev: 0,
            reach: Reach::WholeFilesystem,
            shared: false,
            name_with_file: false,
            sync: slow_sync,
            state: Mutex::new(State::default()),
            finished: Condvar::new(),
        };
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    let asked = g.state.lock().unwrap().started;
                    g.commit().unwrap();
                    let st = g.state.lock().unwrap();
                    assert!(
                        st.finished > asked,
                        "returned before a commit started after it asked"
                    );
                });
            }
        });
        let made = SLOW_SYNCS.load(Ordering::SeqCst);
        assert!(
            (1..8).contains(&made),
            "{made} commits for 8 callers waiting together"
        );
        let st = g.state.lock().unwrap();
        assert!(!st.running && st.finished == st.started && st.started == made);
    }

    /// A failed commit fails its callers, and callers of an earlier one that had not
    /// looked yet; a caller whose commit came after the failure is not failed by it.
    #[test]
    fn a_failed_commit_is_reported_to_its_callers() {
        let st = State {
            started: 5,
            finished: 5,
            running: false,
            failed: Some((4, EIO)),
        };
        assert_eq!(
            st.outcome(4).unwrap().unwrap_err().raw_os_error(),
            Some(EIO)
        );
        assert_eq!(
            st.outcome(3).unwrap().unwrap_err().raw_os_error(),
            Some(EIO)
        );
        assert!(st.outcome(5).unwrap().is_ok());
        assert!(st.outcome(6).is_none(), "commit 6 has not run");
    }

    /// The counter counts the commits of this process.
    #[test]
    fn a_commit_on_a_local_filesystem_is_one_counted_sync() {
        let dir = tempfile::tempdir().unwrap();
        let before = sync_count();
        commit(dir.path()).unwrap();
        assert!(sync_count() > before);
    }

    /// An ext4's journal is told from `/proc/fs/jbd2/` by its block device's name; a
    /// device without one (an ext4 made without a journal) or unknown is not journaled.
    #[test]
    fn an_ext4_journal_is_found_by_its_block_device() {
        let top = tempfile::tempdir().unwrap();
        let t = top.path();
        std::fs::create_dir_all(t.join("sys/dev/block")).unwrap();
        std::fs::create_dir_all(t.join("proc/fs/jbd2/loop3-8")).unwrap();
        let link = |mm: &str, name: &str| {
            std::os::unix::fs::symlink(
                format!("../../devices/virtual/block/{name}"),
                t.join("sys/dev/block").join(mm),
            )
            .unwrap();
        };
        link("7:3", "loop3");
        link("253:1", "vda1");
        let dev = |major, minor| nix::sys::stat::makedev(major, minor) as u64;
        assert!(ext4_journal_in(t, dev(7, 3)));
        assert!(!ext4_journal_in(t, dev(253, 1)), "no jbd2 entry: no journal");
        assert!(!ext4_journal_in(t, dev(8, 0)), "no such block device");
    }

    /// Where the root is not fsynced, committing a file is nothing; on tmpfs (no
    /// journal to ride on) it is the shared commit.
    #[test]
    fn a_file_on_a_filesystem_without_a_journal_takes_the_shared_commit() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let f = File::open(&path).unwrap();
        commit_file(dir.path(), &f).unwrap();
        let g = group_of(dir.path()).unwrap();
        if crate::fs_kind::of_fd(&g.fd).is_some_and(|k| k.name == "tmpfs") {
            assert!(!g.name_with_file, "tmpfs has no journal to carry a name");
        }
    }

    /// Inside `in_one_commit`, many commits of one filesystem are one, made at its end.
    #[test]
    fn commits_put_off_together_are_one_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let f = File::open(&path).unwrap();
        if group_of(dir.path()).unwrap().reach == Reach::FileByFile {
            return; // a temp directory on a network filesystem: commits are not put off
        }
        let before = crate::fsio::counted::mine();
        let ((), done) = in_one_commit(|| {
            for _ in 0..5 {
                commit(dir.path()).unwrap();
                commit_file(dir.path(), &f).unwrap();
            }
            assert_eq!(crate::fsio::counted::mine(), before, "a commit was made inside");
        });
        done.unwrap();
        assert_eq!(crate::fsio::counted::mine(), before + 1, "one commit at the end");
        assert!(!deferring(), "the scope ended");
    }

    /// A `make` that panics leaves the thread committing as before, not deferring
    /// forever (every later write would then go uncommitted).
    #[test]
    fn a_panic_inside_puts_nothing_off_after() {
        let caught = std::panic::catch_unwind(|| {
            in_one_commit(|| {
                assert!(deferring());
                panic!("a line of a batch went wrong");
            })
        });
        assert!(caught.is_err());
        assert!(!deferring(), "the thread still defers its commits");
    }
}
