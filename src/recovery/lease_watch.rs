//! Looking at another host's busy slot's locks before its slot looks abandoned, so each
//! lock's lease wait starts when its host stops renewing, not when recovery reaches it.
//!
//! Another host's lock is taken only once this host has seen its record unchanged for
//! a lease (`dirlock::age::unchanged_for`): a wait that starts at the first look. The
//! slot's gate lease, its task lock and its task's key lock were each looked at first
//! only when recovery needed it — one after the other, one lease each (issue 38.3: a
//! dead host's task ended 2.5 leases after its death). Looked at together, early and
//! then every so often, their waits run side by side, and the host's notes in the root
//! keep them across restarts of the looking process.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::dirlock::{self, LockOptions};
use crate::error::Error;
use crate::fsio;
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{Status, Task};

/// Every lock another host may hold for the slot at `paths`: its gate's lease, its
/// task lock, and the key lock of the task in hand.
fn slot_locks(root: &Root, paths: &WorkerPaths) -> Vec<PathBuf> {
    let mut locks = vec![
        crate::gate::lease_path(&paths.worker_gate()),
        paths.lock_dir(),
    ];
    let running = paths.running();
    if let Ok(Some(bytes)) = fsio::read_bounded(&running, fsio::TASK_SIZE_LIMIT) {
        if let Some(key) = Task::from_bytes(&running, &bytes).ok().and_then(|t| t.key) {
            locks.push(root.key_lock(&key));
        }
    }
    locks
}

/// A start at the slot at `paths` (`<root>/workers/<N>`) was refused, its gate held
/// (perhaps by another host's lease): look at the slot's locks, so that the next start
/// — a supervisor's — finds their waits under way. Returns the refusal.
pub fn look_at_refused_slot(paths: &WorkerPaths, refusal: Error) -> Error {
    if let Some(root) = paths.dir.parent().and_then(|w| w.parent()) {
        let root = Root::new(root);
        look_at_slot_locks(&root, paths, &crate::inspect::lock_options(&root));
    }
    refusal
}

/// Look at the slot's locks now (their judgement notes what is seen of them).
fn look_at_slot_locks(root: &Root, paths: &WorkerPaths, opts: &LockOptions) {
    for lock in slot_locks(root, paths) {
        if let Err(e) = dirlock::inspect(&lock, opts) {
            tracing::debug!("looking at {}: {e}", lock.display());
        }
    }
}

/// [`look_at_slot_locks`] for a slot with a task in hand whose status names another
/// host, at most once per a fraction of a renewal interval: the wait then starts at
/// most that much after the record's last change.
pub(super) fn watch_if_foreign(root: &Root, paths: &WorkerPaths, opts: &LockOptions) {
    static LAST: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);
    let every = (crate::gate::renew_every(opts.lease) / 2).max(Duration::from_millis(250));
    {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        let last = last.get_or_insert_with(HashMap::new);
        if last.len() > 4096 {
            last.retain(|_, t| t.elapsed() < Duration::from_secs(3600));
        }
        let due = last.get(&paths.dir).is_none_or(|t| t.elapsed() >= every);
        if !due {
            return;
        }
        last.insert(paths.dir.clone(), Instant::now());
    }
    if std::fs::symlink_metadata(paths.running()).is_err() {
        return;
    }
    let foreign = Status::read(&paths.status())
        .ok()
        .flatten()
        .and_then(|s| s.host_id)
        .is_some_and(|h| h != crate::host::host_id());
    if foreign {
        look_at_slot_locks(root, paths, opts);
    }
}
