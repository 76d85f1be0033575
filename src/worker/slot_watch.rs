//! What a worker watches for news: its slot's inbox and cancel file and the shared
//! directories that may make a queued task claimable (read inline or by a watcher's
//! thread), or, started by an owner, that owner's pipes.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver};

use super::shared_seen::SharedNews;
use crate::error::{Error, Result};
use crate::fsio;
use crate::layout::{Root, WorkerPaths};
use crate::watch::{DirWatcher, InlineWatcher, Listed, WatchMode};

/// The shared directories whose changes may make a queued task claimable: the queue,
/// key and run-slot locks coming free (a skipped task may have become eligible), a
/// group's cap or run slots, and pauses made or lifted.
pub(super) fn shared_dirs(root: &Root) -> [PathBuf; 5] {
    [
        root.queue_pending(),
        root.keys_dir(),
        root.slots_dir(),
        root.groups_dir(),
        root.paused_dir(),
    ]
}

/// The directory where other hosts add entries nobody can predict the names of and
/// whose news is worth the most: the queue. On GlusterFS it is read before each poll's
/// stat (a request that reaches the server, where a stat is answered from the client's
/// cache for up to 1 s).
pub(super) fn listed_dirs(root: &Root) -> [PathBuf; 1] {
    [root.queue_pending()]
}

/// The pauses a queued task may wait for: on GlusterFS read before their stat only
/// while the queue holds a task (a pause lifted on another host was seen up to a second
/// late). Not the lock directories (`keys/`, `slots/`, `groups/`): a listing of a
/// directory of lock directories there made live locks vanish for their own holders in
/// the two-host burst (2 of 5 runs, 0 of 3 without), while `paused/` holds only files.
/// Each read costs a request to the server, so an idle worker with an empty queue reads
/// the queue alone (idle cost on GlusterFS, measured: BENCHMARKS, "Several hosts").
pub(super) fn read_while_waiting(root: &Root) -> [PathBuf; 1] {
    [root.paused_dir()]
}

/// [`listed_dirs`] and [`read_while_waiting`], as the watcher takes them.
pub(super) fn listed<'a>(always: &'a [PathBuf], while_waiting: &'a [PathBuf]) -> Listed<'a> {
    Listed {
        always,
        while_waiting,
    }
}

/// Whether a change at `p` in one of `shared` (or, when polling, to the directory
/// itself) is worth a look at the queue: not a lock's guard or spare, not a temp file.
pub(super) fn shared_change(shared: &[PathBuf], p: &Path) -> bool {
    if shared.iter().any(|s| s == p) {
        return true;
    }
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.')
        && !name.ends_with(".guard")
        && p.parent().is_some_and(|d| shared.iter().any(|s| s == d))
}

/// Whether `p` is `dir` or an entry of it.
fn in_dir(dir: &Path, p: &Path) -> bool {
    p == dir || p.parent() == Some(dir)
}

/// The wake-ups of a worker its owner feeds through stdin ([`WorkerOptions::wake_pipes`]):
/// every byte is news of its inbox; the pipe's end stops the worker as SIGTERM would.
/// The pauses and the queue, which others may change in the owner's root without a
/// word, are not news to it: their reading is kept no longer than an idle look
/// ([`Shared::idle_look`]), as a task put in the queue waits that long for an idle one.
pub(super) fn owner_pipes(
    paths: &WorkerPaths,
) -> Result<(Option<DirWatcher>, Option<InlineWatcher>, Receiver<()>)> {
    let (tx, wake) = bounded(1);
    let on_change: crate::watch::OnChange = Arc::new(move |_: Option<&Path>| {
        let _ = tx.try_send(());
    });
    let stdin = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("take the owner's pipe (stdin) of", &paths.dir, e))?;
    let on_end: crate::watch::OnEnd = Box::new(|| {
        tracing::info!("the process that started this worker is gone: stopping");
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGTERM);
    });
    let inline = InlineWatcher::from_pipe(stdin, on_change, on_end)
        .map_err(|e| Error::io("read the owner's pipe (stdin) of", &paths.dir, e))?;
    Ok((None, Some(inline), wake))
}

/// Our end of the pipe the owner is told on (stdout), never blocking.
pub(super) fn owner_out(paths: &WorkerPaths) -> Result<std::fs::File> {
    let out = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("take the owner's pipe (stdout) of", &paths.dir, e))?;
    fsio::set_nonblocking(&out, true)
        .map_err(|e| Error::io("make stdout non-blocking for", &paths.dir, e))?;
    Ok(std::fs::File::from(out))
}

/// Watch the slot's inbox and cancel file and the shared directories: read inline by
/// the worker's thread where events are native, else by a watcher's thread.
pub(super) fn watch_slot(
    root: &Root,
    paths: &WorkerPaths,
    mode: WatchMode,
    news: SharedNews,
) -> Result<(Option<DirWatcher>, Option<InlineWatcher>, Receiver<()>)> {
    let (tx, wake) = bounded(1);
    let shared = shared_dirs(root);
    let shared_dirs = shared.clone();
    let paused_dir = root.paused_dir();
    let on_change: crate::watch::OnChange = Arc::new(move |p: Option<&Path>| {
        let in_shared = p.is_none_or(|p| shared_change(&shared_dirs, p));
        match p {
            Some(p) if in_shared && !in_dir(&paused_dir, p) => news.tell_not_pauses(),
            _ if in_shared => news.tell(),
            _ => {}
        }
        let relevant = in_shared
            || p.is_some_and(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                WorkerPaths::WAKE_NAMES.contains(&name)
            });
        if relevant {
            // A full channel already holds a pending wake-up: nothing is lost.
            let _ = tx.try_send(());
        }
    });
    let dirs: Vec<PathBuf> = shared.to_vec();
    let inbox = std::slice::from_ref(&paths.dir);
    if let Some(inline) = InlineWatcher::start(&dirs, inbox, mode, on_change.clone())? {
        return Ok((None, Some(inline), wake));
    }
    let mut polled = paths.wake_files().to_vec();
    polled.extend(shared.iter().cloned());
    let (always, while_waiting) = (listed_dirs(root), read_while_waiting(root));
    let watcher = DirWatcher::watch_changes_and_inboxes(
        &dirs,
        inbox,
        &polled,
        listed(&always, &while_waiting),
        mode,
        on_change,
    )?;
    Ok((Some(watcher), None, wake))
}
