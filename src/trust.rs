//! Who may write this root: every protocol directory is ours, private, and not a link.
//!
//! A worker acts on what the root's files say: it runs `task.json`, and recovery kills
//! the process a dead worker's `status.json` names. So a directory another user can
//! change (theirs, or writable by group or others) lets that user have this one's
//! agent run their task or kill any process; and a directory replaced by a symbolic link
//! makes every write land wherever the link points. Both are refused with the fix.

use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, FileProblem, Result};
use crate::layout::{Root, Slot, WorkerPaths};

/// Mode bits that let someone other than the owner create, remove or rename entries.
const FOREIGN_WRITE: u32 = 0o022;

/// Check the root and every protocol directory under it that exists: workers/, each
/// workers/<N>/ with its tasks/, results/ and rejected/, queue/ and its directories,
/// keys/, slots/ and .locks/. Each must be a real directory (not a link), owned by the
/// user running this, and not writable by group or others. A missing directory is fine
/// (it is created 0700 when needed); so is a missing root.
///
/// The root path itself may be reached through a link the user chose; the check is on
/// the directory it names.
pub fn verify_root(root: &Root) -> Result<()> {
    verify_shared(root)?;
    for slot in slot_names(&root.workers_dir())? {
        verify_slot_dirs(&root.worker(slot))?;
    }
    Ok(())
}

/// The check before a write into the root's shared directories only (the queue, `ids/`):
/// the root and each shared directory, not the slots. O(1) in the number of slots.
pub fn verify_shared(root: &Root) -> Result<()> {
    #[cfg(test)]
    SHARED_CHECKS.with(|n| n.set(n.get() + 1));
    let top = root.path();
    match fs::metadata(top) {
        Ok(meta) => check_dir(top, &meta)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("stat", top, e)),
    }
    for dir in root.shared_dirs() {
        verify_dir(&dir)?;
    }
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// The [`verify_shared`] checks of this test's thread (the unit tests run side by side).
    static SHARED_CHECKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many [`verify_shared`] checks this test thread has made so far.
#[cfg(test)]
pub(crate) fn shared_checks() -> usize {
    SHARED_CHECKS.with(|n| n.get())
}

/// The check before a client writes into one slot: [`verify_shared`] plus that slot's
/// own directories. Another slot's directories are its worker's to refuse (at start and
/// before every claim): checking all of them made each send O(slots), 35 ms at 1,000.
pub fn verify_for_slot(root: &Root, slot: Slot) -> Result<()> {
    verify_shared(root)?;
    verify_slot_dirs(&root.worker(slot))
}

fn verify_slot_dirs(w: &WorkerPaths) -> Result<()> {
    for dir in [
        w.dir.clone(),
        w.tasks_dir(),
        w.results_dir(),
        w.rejected_dir(),
        w.trash_dir(),
    ] {
        verify_dir(&dir)?;
    }
    Ok(())
}

/// The cheap check a worker makes before it writes a task's files: the directories it
/// writes into (and those leading to them from the root) are still real, private
/// directories of ours. One `lstat` each.
pub fn verify_task_dirs(root: &Root, paths: &WorkerPaths) -> Result<()> {
    task_dirs(root, paths).iter().try_for_each(|d| verify_dir(d))
}

/// [`verify_task_dirs`] for a task from the slot's inbox, whose files never go into
/// `queue/` (only a queued task's result is linked into `queue/results/`).
pub fn verify_inbox_task_dirs(root: &Root, paths: &WorkerPaths) -> Result<()> {
    task_dirs(root, paths)[..INBOX_TASK_DIRS]
        .iter()
        .try_for_each(|d| verify_dir(d))
}

/// How many of [`task_dirs`], from the first, an inbox task's files go into.
const INBOX_TASK_DIRS: usize = 6;

/// The directories a task's files go into, and those leading to them from the root:
/// an inbox task's first, then the queue's.
pub(crate) fn task_dirs(root: &Root, paths: &WorkerPaths) -> [std::path::PathBuf; 8] {
    [
        root.workers_dir(),
        paths.dir.clone(),
        paths.tasks_dir(),
        paths.results_dir(),
        paths.rejected_dir(),
        root.ids_dir(),
        root.queue_dir(),
        root.queue_results(),
    ]
}

/// The slot-named entries of `workers/` (links included: they are refused, not skipped).
fn slot_names(workers: &Path) -> Result<Vec<Slot>> {
    let Some(entries) = crate::fsio::read_dir_if_exists(workers)? else {
        return Ok(Vec::new());
    };
    let mut slots = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", workers, e))?;
        if let Some(Ok(slot)) = entry.file_name().to_str().map(str::parse::<Slot>) {
            slots.push(slot);
        }
    }
    Ok(slots)
}

/// `lstat` one protocol directory: missing is fine, a link or a file is refused, and a
/// directory must pass [`check_dir`].
fn verify_dir(dir: &Path) -> Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(crate::fsio::link_refusal(dir)),
        Ok(meta) => check_dir(dir, &meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("stat", dir, e)),
    }
}

fn check_dir(dir: &Path, meta: &Metadata) -> Result<()> {
    if !meta.is_dir() {
        return Err(refuse(
            dir,
            format!(
                "is not a directory, but conductor keeps a directory here. Fix: move it \
                 away (`mv {0} {0}.bad`); the directory is recreated by the next worker \
                 start or `conductor init`",
                dir.display()
            ),
        ));
    }
    let me = crate::host::euid();
    if meta.uid() != me {
        return Err(refuse(
            dir,
            format!(
                "is owned by {}, not by {} who runs this; conductor refuses a directory \
                 another user controls, since whoever can change it can have this user's \
                 agent run their task or kill a process. Fix: `chown {} {}` if it is \
                 yours, or use a root of your own",
                user_name(meta.uid()),
                user_name(me),
                chown_name(me),
                dir.display()
            ),
        ));
    }
    if meta.mode() & FOREIGN_WRITE != 0 {
        return Err(refuse(
            dir,
            format!(
                "is writable by group or others (mode {:04o}); conductor refuses a \
                 directory other users can change, since they could plant tasks and \
                 process ids a worker acts on. Fix: `chmod 700 {}`",
                meta.mode() & 0o7777,
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn refuse(dir: &Path, why: String) -> Error {
    Error::bad(dir, FileProblem::Invalid(why))
}

fn lookup(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// `name (uid N)`, or just the uid when it has no name.
fn user_name(uid: u32) -> String {
    match lookup(uid) {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// What `chown` takes for `uid`: its name, else the number.
fn chown_name(uid: u32) -> String {
    lookup(uid).unwrap_or_else(|| uid.to_string())
}
