//! Owed commits: a task's result published now and made durable by the journal commit of
//! the slot's next claim, one commit a task instead of two in a row (issue 39.1).
//!
//! Only where an fsync of one file commits every name made before it — an ordered
//! journal: ext4 with its journal, xfs ([`super::commit::commit_file`]). There a
//! crash keeps a prefix of the metadata changes, in order, whole transactions at a time.
//! A result's bytes are written out (`sync_file_range`, waited for) *before* its name is
//! linked, so any prefix that holds the name holds the blocks and size it needs, and the
//! commit that carries the name flushes them; the slot's `running.json` is removed after
//! the link, so no prefix has the task gone without its result. Anything else commits
//! as it goes.

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::counted::counted;
use crate::error::{Error, Result};

thread_local! {
    /// Inside [`owing`]: the commits this thread put off.
    static OWING: RefCell<Option<Vec<Owed>>> = const { RefCell::new(None) };
}

/// A file published under a new name whose commit is owed.
#[derive(Debug)]
struct Owed {
    /// Its filesystem's device: a commit of the same filesystem pays it.
    dev: u64,
    dir: PathBuf,
    file: File,
}

/// What [`owing`] left to commit: paid by the next commit of a name on the same
/// filesystem that changes after them ([`Debt::paid_by_commit_on`]), or by
/// [`Debt::pay`]. Nobody may be told of what it covers before then. Dropped unpaid, it
/// pays (an error is logged).
#[derive(Debug, Default)]
#[must_use = "a debt must be paid before anyone is told of what it covers"]
pub struct Debt(Vec<Owed>);

impl Debt {
    /// Nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A commit of a name changed after every owed one, on device `dev` (the slot's
    /// claim: a rename into `running.json` and its fsync, or a `syncfs`), has returned:
    /// what was owed there is durable. The journal commits in order, so the later
    /// change's commit carries the earlier ones.
    pub fn paid_by_commit_on(&mut self, dev: u64) {
        self.0.retain(|o| o.dev != dev);
    }

    /// Commit what is owed: one fsync a filesystem, of its last owed file (whose change
    /// is the latest, so its transaction holds every earlier one).
    pub fn pay(mut self) -> Result<()> {
        self.pay_now()
    }

    fn pay_now(&mut self) -> Result<()> {
        let mut done = Ok(());
        while let Some(last) = self.0.pop() {
            self.0.retain(|o| o.dev != last.dev);
            let synced = counted(|| last.file.sync_all())
                .map_err(|e| Error::io("fsync the file in", &last.dir, e));
            done = done.and(synced);
        }
        done
    }
}

impl Drop for Debt {
    fn drop(&mut self) {
        if let Err(e) = self.pay_now() {
            tracing::error!("committing a result: {e}");
        }
    }
}

/// Run `make` with this thread's commits of files on ordered-journal filesystems put
/// off ([`super::commit::commit_file`] and what calls it): the names are published, and
/// what that owes is returned to be paid by the slot's next claim or at once.
pub fn owing<T>(make: impl FnOnce() -> T) -> (T, Debt) {
    /// Gives the thread back what it had, even when `make` panics (the debt so far
    /// is then paid on drop).
    struct Restore(Option<Option<Vec<Owed>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                let mine = OWING.with(|o| std::mem::replace(&mut *o.borrow_mut(), outer));
                drop(Debt(mine.unwrap_or_default()));
            }
        }
    }
    let mut restore = Restore(Some(OWING.with(|o| o.borrow_mut().replace(Vec::new()))));
    let made = make();
    let outer = restore.0.take().unwrap_or_default();
    let mine = OWING.with(|o| std::mem::replace(&mut *o.borrow_mut(), outer));
    (made, Debt(mine.unwrap_or_default()))
}

/// Whether this thread is inside [`owing`].
pub(super) fn owing_now() -> bool {
    OWING.with(|o| o.borrow().is_some())
}

/// Inside [`owing`]: note `file`, just published in `dir` on device `dev`, as owed
/// and say so (`false`: commit it now).
pub(super) fn owe(dev: u64, dir: &Path, file: &File) -> bool {
    OWING.with(|o| match o.borrow_mut().as_mut() {
        Some(owed) => match file.try_clone() {
            Ok(file) => {
                owed.push(Owed {
                    dev,
                    dir: dir.to_path_buf(),
                    file,
                });
                true
            }
            Err(_) => false,
        },
        None => false,
    })
}

/// Write `file`'s bytes to the device and wait (no journal commit): before its name is
/// published when that name's commit will be owed, so that the commit that carries
/// the name — whoever makes it — carries blocks holding the bytes. What an fsync does
/// first, split from its journal commit.
pub(super) fn write_out(file: &File) -> std::io::Result<()> {
    use nix::libc;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain system call on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Owed files are one debt; paying it is one fsync a filesystem, and a commit on
    /// their filesystem pays it.
    #[test]
    fn a_debt_is_paid_once_per_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        let ((), debt) = owing(|| {
            assert!(owing_now());
            assert!(owe(1, dir.path(), &f));
            assert!(owe(1, dir.path(), &f));
            assert!(owe(2, dir.path(), &f));
        });
        assert!(!owing_now(), "the scope ended");
        assert!(!owe(1, dir.path(), &f), "nothing is owed outside the scope");
        let before = super::super::counted::mine();
        let mut d = debt;
        d.paid_by_commit_on(2);
        assert_eq!(d.0.len(), 2);
        d.pay().unwrap();
        assert_eq!(
            super::super::counted::mine(),
            before + 1,
            "one fsync for the two owed on one filesystem"
        );
    }

    /// A panic inside leaves the thread committing as before.
    #[test]
    fn a_panic_inside_owes_nothing_after() {
        let caught = std::panic::catch_unwind(|| owing(|| panic!("a result went wrong")));
        assert!(caught.is_err());
        assert!(!owing_now());
    }

    #[test]
    fn bytes_are_written_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        write_out(&File::open(&path).unwrap()).unwrap();
    }
}
