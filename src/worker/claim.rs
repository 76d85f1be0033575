//! Claiming a task: from the slot's inbox or the shared queue into `running.json`.

use std::fs;
use std::io;
use std::time::{Instant, SystemTime};

use crossbeam_channel::Receiver;

use super::admit::{self, Hold};
use super::inbox::{self, Inbox};
use super::slot_server::{Pickup, Shared, SlotServer};
use super::supervise;
use crate::dirlock::{Acquire, DirLock};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::ids;
use crate::protocol::{Task, TaskId};
use crate::queue;

/// Take the slot's own `.lock` (parked between tasks, so reusable). `None`: someone
/// else holds it.
fn slot_lock(shared: &Shared, slot: &SlotServer) -> Result<Option<DirLock>> {
    if let Some(kept) = slot.take_kept_lock(shared) {
        return Ok(Some(kept));
    }
    match DirLock::try_acquire_reusable(&slot.paths.lock_dir(), &shared.lock_opts)? {
        Acquire::Acquired(l) => Ok(Some(l)),
        Acquire::Held(h) => {
            tracing::warn!(
                "slot {} is locked by someone else: {h}; will retry",
                slot.slot()
            );
            Ok(None)
        }
    }
}

/// Look at the inbox once; claim and run a task if there is one.
/// `paused`: the pauses in force, as this look read them.
pub(crate) fn from_inbox(
    shared: &Shared,
    slot: &SlotServer,
    paused: &queue::pause::Paused,
    wake: &Receiver<()>,
    shutdown: &Receiver<()>,
) -> Result<Pickup> {
    let looked = Instant::now();
    let inbox_path = slot.paths.task();
    if let Err(e) = fs::symlink_metadata(&inbox_path) {
        if e.kind() == io::ErrorKind::NotFound {
            return Ok(Pickup::Empty);
        }
        return Err(Error::io("stat", &inbox_path, e));
    }
    slot.dirs_check.verify(&shared.opts.root, &slot.paths, true)?;
    let later = Pickup::NotYet(Instant::now() + shared.opts.rescan);
    let Some(lock) = slot_lock(shared, slot)? else {
        return Ok(later);
    };
    let (task, bytes) = match inbox::read(shared, slot)? {
        Inbox::Empty => return Ok(Pickup::Empty),
        Inbox::Incomplete(wait) => return Ok(Pickup::NotYet(Instant::now() + wait)),
        Inbox::Bad { reason, id } => {
            inbox::reject(slot, &inbox_path, &reason, id.clone())?;
            rejected_callback(shared, slot, id.as_ref(), &reason);
            return Ok(Pickup::Ran);
        }
        Inbox::Ready { task, bytes, file } => (*task, (bytes, file)),
    };
    match serve(shared, &task) {
        queue::Serve::Now => {}
        // Deferred, or its agent usage-limited: it waits in the inbox until then.
        queue::Serve::Later(due) => return Ok(Pickup::Deferred(instant_at(due))),
        _ => {
            let reason = not_served(shared, &task);
            inbox::reject(slot, &inbox_path, &reason, task.id.clone())?;
            rejected_callback(shared, slot, task.id.as_ref(), &reason);
            return Ok(Pickup::Ran);
        }
    }
    let Some(hold) =
        admit::admit_inbox_task(shared, paused, task.key.as_deref(), task.group.as_deref())?
    else {
        return Ok(later);
    };
    let Some(task) = take_inbox(shared, slot, task, bytes)? else {
        return Ok(Pickup::Empty);
    };
    tracing::debug!(
        "claimed in {}us (lock, read, rename)",
        looked.elapsed().as_micros()
    );
    supervise::run(shared, slot, task, lock, hold, wake, shutdown)
}

/// Rename the inbox to `running.json` (durably) and return what it holds now; `None`
/// when it was withdrawn first.
/// `read`: the bytes read from the inbox, and the inbox still open (with its `fstat`).
fn take_inbox(
    shared: &Shared,
    slot: &SlotServer,
    task: Task,
    (read, (file, meta)): (Vec<u8>, (fs::File, fs::Metadata)),
) -> Result<Option<Task>> {
    let (inbox, running) = (slot.paths.task(), slot.paths.running());
    match fs::rename(&inbox, &running) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("claim (rename to running.json)", &inbox, e)),
    }
    slot.stop_if_asked_before_paying();
    // Normally the rename moved the very file we read and hold open: it is made private
    // and read again through that descriptor, not by opening `running.json` twice more.
    // A client that replaced `task.json` by a new file after our read had that one
    // renamed instead: it is handled by its name.
    // The look at the new name is the file's state now too (one `fstat` spared).
    let now = fs::symlink_metadata(&running).ok().filter(|m| {
        use std::os::unix::fs::MetadataExt;
        meta.is_file() && m.ino() == meta.ino() && m.dev() == meta.dev()
    });
    let renamed_ours = match &now {
        Some(now) => inbox::make_private_now(&running, &file, now),
        None => false,
    };
    if now.is_none() {
        inbox::make_private(&running);
    }
    // The claim must survive a power loss, or task.json could reappear and the task
    // run a second time. One commit, which also makes the task's own bytes durable
    // where its sender left that to us: an fsync of the renamed file where that commits
    // its new name (a journaled ext4, xfs), else shared with this process's other slots.
    if renamed_ours {
        fsio::commit_file(&slot.paths.dir, &file)?;
    } else {
        fsio::commit_dirs(&[&slot.paths.dir])?;
    }
    // That commit carried the last task's result too, where its commit was owed.
    slot.owed_paid_by_claim(shared);
    // A non-atomic client may have rewritten the file in place between our read and
    // the rename: what is in running.json now is what runs.
    let limit = shared.config.max_task_bytes();
    let now = if renamed_ours {
        fsio::reread_bounded(&file, limit, Some(read.len() as u64))
            .ok()
            .filter(|b| b.len() as u64 <= limit)
    } else {
        fsio::read_bounded(&running, limit).ok().flatten()
    };
    let task = match now {
        Some(now) if now != read => match Task::from_bytes(&running, &now) {
            Ok(mut newer) if newer.id == task.id => {
                tracing::warn!(
                    "task.json changed while it was being claimed; running what it holds now"
                );
                newer.origin = None;
                newer
            }
            Ok(_) => {
                tracing::warn!("task.json changed while it was being claimed, to a task with another id; running what was read");
                task
            }
            Err(e) => {
                tracing::warn!("task.json changed while it was being claimed, to something unreadable ({e}); running what was read");
                task
            }
        },
        _ => task,
    };
    ensure_id(shared, slot, task).map(Some)
}

/// With an empty inbox: pull the best eligible task from the shared queue.
/// `paused`: the pauses in force, as this look read them. `empty` is set when the
/// claim's listing found `queue/pending/` empty (kept until the watcher tells of a
/// change: no listing of its own before the claim's).
pub(crate) fn from_queue(
    shared: &Shared,
    slot: &SlotServer,
    paused: &queue::pause::Paused,
    (wake, shutdown): (&Receiver<()>, &Receiver<()>),
    empty: &mut bool,
) -> Result<Pickup> {
    let pending = shared.opts.root.queue_pending();
    let (lock_dir, lock_opts) = (slot.paths.lock_dir(), shared.lock_opts);
    // The claim's directories are checked once the listing found a task to take (not
    // at each look that finds the queue empty: eight `statx` a look where the check is
    // made each time), before anything is renamed.
    let take_lock = || {
        slot.dirs_check.verify(&shared.opts.root, &slot.paths, false)?;
        match slot.take_kept_lock(shared) {
            Some(kept) => Ok(Some(kept)),
            None => match DirLock::try_acquire_reusable(&lock_dir, &lock_opts)? {
                Acquire::Acquired(l) => Ok(Some(l)),
                Acquire::Held(_) => Ok(None),
            },
        }
    };
    let serve = |t: &Task| serve(shared, t);
    let claim = match queue::claim_next_seeing(
        &shared.opts.root,
        &slot.paths,
        &shared.config,
        &serve,
        take_lock,
        paused,
    )? {
        queue::Claim::Taken(claim) => claim,
        queue::Claim::NotYet(wait) => return Ok(Pickup::NotYet(Instant::now() + wait)),
        queue::Claim::Empty => {
            *empty = true;
            return Ok(Pickup::Empty);
        }
        _ => return Ok(Pickup::Empty),
    };
    // The move out of pending/ and into running.json must both survive a power loss
    // (one rename: an fsync of the file where that commits its names, `fsio::commit_moved`).
    fsio::commit_moved(&slot.paths.running(), &[&pending, &slot.paths.dir])?;
    // That commit carried the last task's result too, where its commit was owed.
    slot.owed_paid_by_claim(shared);
    let task = Task::from_bytes(&slot.paths.running(), &claim.task_bytes)?;
    let task = ensure_id(shared, slot, task)?;
    let id = task.id.clone().expect("id ensured");
    let hold = Hold {
        key_lock: claim.key_lock,
        run_slot: claim.run_slot,
        group_slot: claim.group_slot,
        port: None,
        queued: true,
    };
    if slot.paths.result_for(&id).exists() {
        // A direct task of this slot used the same id: its result stays untouched.
        let reason = format!(
            "task id {id} was already used on worker {} (results/{id}.json exists)",
            slot.slot()
        );
        queue::reject_in_hand(
            &shared.opts.root,
            &slot.paths,
            &format!("{id}.json"),
            &reason,
            Some(id.clone()),
        )?;
        super::callback::run_rejected(
            &shared.config,
            &shared.opts.root,
            slot.slot(),
            &id,
            &reason,
            shared.opts.root.queue_results().join(format!("{id}.json")),
        );
        return Ok(Pickup::Ran);
    }
    tracing::debug!("claimed queued task {id}");
    supervise::run(shared, slot, task, claim.slot_lock, hold, wake, shutdown)
}

/// The root's callback for an inbox task this worker refused (when its id is known):
/// its answer is the slot's `results/<id>.json`, or only `result.json` when that id's
/// earlier result must stand.
fn rejected_callback(shared: &Shared, slot: &SlotServer, id: Option<&TaskId>, reason: &str) {
    let Some(id) = id else {
        return;
    };
    let kept = slot.paths.result_for(id);
    let path = if kept.exists() {
        kept
    } else {
        slot.paths.result()
    };
    super::callback::run_rejected(
        &shared.config,
        &shared.opts.root,
        slot.slot(),
        id,
        reason,
        path,
    );
}

/// Whether this worker runs `task` now: it must serve the task's agent preset, that
/// preset must not be usage-limited (`agents/<preset>.limited`), and a deferred task's
/// `notBefore` must have come.
pub(crate) fn serve(shared: &Shared, task: &Task) -> queue::Serve {
    let Some((preset, _)) = shared.opts.agent_for(task.agent.as_deref()) else {
        return queue::Serve::Never;
    };
    let now = SystemTime::now();
    // Only a preset that can read a usage limit from its agent's output ever records
    // one: the command preset's file never exists (a failed open a task, spared).
    let limited = (preset != crate::preset::Preset::Command)
        .then(|| queue::limits::active(&shared.opts.root, &preset.to_string(), now))
        .flatten();
    let deferred = task.not_before().filter(|t| *t > now);
    match limited.into_iter().chain(deferred).max() {
        Some(t) => queue::Serve::Later(t),
        None => queue::Serve::Now,
    }
}

/// Why an inbox task naming a preset this worker does not run is refused.
fn not_served(shared: &Shared, task: &Task) -> String {
    let wanted = task.agent.as_deref().unwrap_or("?");
    format!(
        "the task names agent preset {wanted}, but this worker runs only {} \
         (start a worker with --preset {wanted}, or submit it to the queue)",
        shared.opts.preset_names().join(", ")
    )
}

/// The monotonic instant of wall-clock time `t` (now, if it has passed).
fn instant_at(t: SystemTime) -> Instant {
    let ahead = t.duration_since(SystemTime::now()).unwrap_or_default();
    Instant::now() + ahead + std::time::Duration::from_millis(5)
}

/// A task without an id gets one now, written into `running.json` so recovery knows it.
fn ensure_id(shared: &Shared, slot: &SlotServer, mut task: Task) -> Result<Task> {
    if task.id.is_none() {
        let id = ids::fresh(&shared.opts.root)?;
        ids::claim(&shared.opts.root, &id, ids::Place::Worker(slot.slot()))?;
        task.id = Some(id);
        fsio::write_json(&slot.paths.running(), &task, Durability::Durable)?;
    }
    Ok(task)
}
