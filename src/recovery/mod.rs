//! Crash recovery: finish what a dead worker left on its slot, exactly once.
//!
//! What to do with a leftover task is decided by pure functions ([`disposition`],
//! [`leftover_agent_is_ours`], [`is_abandoned`]); the rest of this module reads the
//! facts they need and carries out their verdict through [`crate::ledger`].

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::agent;
use crate::config::Config;
use crate::dirlock::{self, Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::gate::Gate;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::ledger::{self, Ledger};
use crate::procfs;
use crate::protocol::{AgentRecord, Status, Task, TaskId, WorkerState};
use crate::queue;

pub mod callbacks;
mod decide;
mod group;
mod lease_watch;
mod report;
mod settle;
mod sweep;
pub use lease_watch::look_at_refused_slot;

// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use decide::{
    disposition, is_abandoned, leftover_agent_is_ours, Disposition, Leftover, ProcFacts,
};
pub use report::RecoveryReport;
use report::Found;
use settle::settle_leftover;
use sweep::break_stale_locks_in;
pub use sweep::free_dead_shared_locks;

/// A slot whose worker is gone and whose status has been silent this long is
/// recovered by any idle worker (live workers refresh their status every heartbeat).
pub const ABANDONED_AFTER: Duration = Duration::from_secs(10);

/// Finish what a dead worker left on `slot`: remove a stale lock, kill a leftover
/// agent, and give an in-flight task its one terminal result (or re-deliver it when
/// its `maxAttempts` allows). The caller must hold the slot's gate.
pub fn recover_slot(root: &Root, slot: Slot, lock_opts: &LockOptions) -> Result<RecoveryReport> {
    let paths = root.worker(slot);
    let mut report = RecoveryReport {
        // Its worker is gone: nobody else would ever time its callbacks out.
        ended_callbacks: callbacks::end_left(&paths),
        ..RecoveryReport::default()
    };
    if nothing_left(&paths) {
        return Ok(report);
    }
    // The dead holder's host: its agent pid means nothing (or a stranger) elsewhere.
    let mut ran_elsewhere = false;
    if let Some(h) = dirlock::break_if_stale_under_gate(&paths.lock_dir(), lock_opts)? {
        ran_elsewhere = h.owner.as_ref().is_some_and(|o| !o.is_this_host());
        report.stale_lock = Some(h.to_string());
    }
    // Held until we return: released by its Drop on every path.
    let lock = match DirLock::try_acquire(&paths.lock_dir(), lock_opts)? {
        Acquire::Acquired(l) => l,
        Acquire::Held(h) => return Err(slot_busy(slot, &paths, &h)),
    };
    if let Some(id) = finish_rejection(root, &paths)? {
        report.interrupted = Some(id);
    }
    let Some(found) = read_leftover(root, &paths)? else {
        return Ok(report);
    };
    stop_leftover_processes(root, slot, &paths, &found, ran_elsewhere, &mut report);
    free_shared_locks(root, found.task.as_ref(), lock_opts)?;

    let ledger = Ledger {
        root,
        paths: &paths,
        queued: found.queued,
        claimed_here: false,
        epoch: lock.epoch(),
    };
    settle_leftover(root, &paths, &ledger, &found, &mut report)?;
    Ok(report)
}

/// Stop what is left of task `found`'s processes on this host: its agent's group and
/// any process of it that left that group. Not when it ran on another host
/// (`ran_elsewhere`, or a status another host wrote): its pids mean nothing here.
fn stop_leftover_processes(
    root: &Root,
    slot: Slot,
    paths: &WorkerPaths,
    found: &Found,
    ran_elsewhere: bool,
    report: &mut RecoveryReport,
) {
    let id = &found.id;
    if ran_elsewhere || !found.status.as_ref().is_none_or(status_of_this_host) {
        tracing::info!(
            "task {id} ran on another host: its agent is that host's to stop, never signalled \
             from here"
        );
    } else {
        report.killed_agent = kill_leftover_agent(paths, found.status.as_ref(), id);
        let escaped = kill_escaped(root, slot, id);
        if escaped > 0 {
            tracing::warn!(
                "killed {escaped} process(es) of task {id} that had left its agent's group"
            );
        }
    }
}

/// Refusal to recover `slot` while its `.lock` is held by a live holder `h`.
fn slot_busy(slot: Slot, paths: &WorkerPaths, h: &dirlock::Holder) -> Error {
    let advice = match (&h.owner, h.pid) {
        // No owner record: never one of ours (they are born with it), so its pid
        // is an older version's or another host's, and waiting may never end.
        (None, Some(pid)) => format!(
            "if pid {pid} is no conductor worker of this slot (a lock with only a pid \
             is an older conductor's or another host's), remove the lock: `rm -r {}`",
            paths.lock_dir().display()
        ),
        _ => "stop it first or wait".to_string(),
    };
    Error::SlotBusy {
        slot: slot.0,
        holder: h.to_string(),
        advice,
    }
}

/// A worker that died while rejecting an inbox file left it in `rejecting.json`: finish
/// the rejection (answer it `rejected` when its id is readable, file it in `rejected/`
/// with a reason). Never run it: it was refused. Returns the id answered, if any.
/// No lock, no task in hand, no rejection under way: nothing to recover. With the gate
/// held nobody else can start any of them meanwhile. (Taking the lock just to find
/// that out made and freed three inodes per slot at every start of every slot.)
fn nothing_left(paths: &WorkerPaths) -> bool {
    [paths.lock_dir(), paths.running(), paths.rejecting()]
        .iter()
        .all(|p| matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound))
}

fn finish_rejection(root: &Root, paths: &WorkerPaths) -> Result<Option<TaskId>> {
    let held = paths.rejecting();
    let bytes = match fsio::read_bounded(&held, fsio::TASK_SIZE_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => {
            tracing::warn!("{e}");
            Vec::new()
        }
    };
    let id = Task::salvage_id(&bytes);
    let reason = "refused; its worker stopped while rejecting it (an earlier .reason in \
                  rejected/ says why)";
    if let Some(id) = id.clone() {
        let st = ledger::answer_rejected(root, paths, id, reason)?;
        fsio::write_json(&paths.status(), &st, Durability::Atomic)?;
    }
    let line = format!("{}: {reason}\n", held.display());
    let dest = ledger::note_rejection(paths, id.as_ref(), &line)?;
    std::fs::rename(&held, &dest).map_err(|e| Error::io("move to rejected/", &held, e))?;
    tracing::warn!(
        "finished the rejection of {} left by a dead worker",
        held.display()
    );
    Ok(id)
}

/// Read `running.json` and the status beside it; `None` when no task was in hand.
fn read_leftover(root: &Root, paths: &WorkerPaths) -> Result<Option<Found>> {
    let running = paths.running();
    let limit = Config::load(&root.config_file())
        .map(|c| c.max_task_bytes())
        .unwrap_or(fsio::TASK_SIZE_LIMIT);
    let bytes = match fsio::read_bounded(&running, limit) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => {
            tracing::warn!("unreadable running task: {e}");
            Vec::new()
        }
    };
    let status = Status::read(&paths.status()).unwrap_or_else(|e| {
        tracing::warn!("ignoring the dead worker's status: {e}");
        None
    });
    let task = Task::from_bytes(&running, &bytes).ok();
    let id = task
        .as_ref()
        .and_then(|t| t.id.clone())
        .or_else(|| Task::salvage_id(&bytes))
        // A task claimed without an id died before it was given one. The status names
        // it only if it says `working`; otherwise it names the task before.
        .or_else(|| {
            status
                .as_ref()
                .filter(|s| s.status == WorkerState::Working)
                .and_then(|s| s.task_id.clone())
        })
        .unwrap_or_else(TaskId::generate);
    // Queued if the id registry says so; a file's own `origin` is trusted only for an
    // id the registry has never seen (a root from before it).
    let registered = crate::ids::lookup(root, &id).unwrap_or_else(|e| {
        // Torn by a power loss, say: judge by the file, as for an unregistered id.
        tracing::warn!("ignoring the id registry's entry: {e}");
        None
    });
    let queued = match registered {
        Some(place) => place == crate::ids::Place::Queue,
        None => task
            .as_ref()
            .is_some_and(|t| t.origin.as_deref() == Some(queue::ORIGIN_QUEUE)),
    };
    Ok(Some(Found {
        id,
        task,
        status,
        queued,
    }))
}

/// Kill the dead worker's agent group if it outlived it: only the processes recorded
/// for this task (see [`leftover_agent_is_ours`]), never a process that merely reused
/// its pid.
fn kill_leftover_agent(paths: &WorkerPaths, status: Option<&Status>, id: &TaskId) -> Option<u32> {
    let (pid, agent_start_time) = recorded_agent(paths, status, id)?;
    match group::find(pid, agent_start_time, id) {
        group::Found::Ours => {}
        group::Found::Gone => return None,
        group::Found::Stranger => {
            tracing::warn!(
                "not killing process group {pid}: its processes are not task {id}'s agent"
            );
            return None;
        }
    }
    tracing::warn!("killing leftover agent group {pid} of task {id}");
    agent::signal_group(pid, Signal::SIGKILL);
    group::wait_gone(pid, Duration::from_secs(5));
    Some(pid)
}

/// Kill what is left of task `id` outside its agent's group (a child that made a
/// session of its own, as tool runners do): the processes of our uid that carry the
/// task's marker and this slot's (`CONDUCTOR_TASK_ID`, `CONDUCTOR_WORKER`) and, where
/// they name an absolute root, this root. Waits (bounded) until they are gone, since a
/// dead holder's key and run slot stay taken while any lives. Returns how many.
fn kill_escaped(root: &Root, slot: Slot, id: &TaskId) -> usize {
    let marker = agent::task_marker(&id.to_string());
    let uid = nix::unistd::getuid().as_raw();
    let our_root = std::fs::canonicalize(root.path()).ok();
    let ours = |pid: u32| {
        let worker = procfs::environ_value(pid, crate::env::ENV_WORKER);
        let home = procfs::environ_value(pid, crate::env::ENV_HOME)
            .map(|h| std::path::PathBuf::from(String::from_utf8_lossy(&h).into_owned()));
        worker.as_deref() == Some(slot.to_string().as_bytes())
            && match (home, &our_root) {
                (Some(h), Some(ours)) if h.is_absolute() => {
                    std::fs::canonicalize(&h).is_ok_and(|h| &h == ours)
                }
                _ => true,
            }
    };
    let left: Vec<u32> = procfs::with_environ_entry(&marker, uid)
        .into_iter()
        .filter(|p| ours(*p))
        .collect();
    for pid in &left {
        tracing::warn!("killing pid {pid}: a leftover of task {id} outside its agent's group");
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), Signal::SIGKILL);
    }
    // Not our children: watch them go, with a bound.
    let deadline = Instant::now() + Duration::from_secs(5);
    while left
        .iter()
        .any(|p| procfs::stat(*p).is_some_and(|s| !s.is_zombie()))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    left.len()
}

/// Whether `status.json` was written on this host (one that names no host at all is
/// from before hosts were recorded: a single-host root).
fn status_of_this_host(st: &Status) -> bool {
    st.host.is_none() && st.host_id.is_none()
        || crate::host::is_this_host(st.host_id.as_deref(), st.host.as_deref())
}

/// The agent recorded for task `id` (pid, start time): in `status.json` once the
/// worker published it, else in `.agent.json`, written before the agent could run.
fn recorded_agent(
    paths: &WorkerPaths,
    status: Option<&Status>,
    id: &TaskId,
) -> Option<(u32, Option<u64>)> {
    if let Some(st) = status.filter(|s| s.task_id.as_ref() == Some(id)) {
        if let Some(pid) = st.agent_pid {
            return Some((pid, st.agent_start_time));
        }
    }
    let record = AgentRecord::read(&paths.agent_record()).unwrap_or_else(|e| {
        tracing::warn!("ignoring the agent record: {e}");
        None
    })?;
    if record
        .host_id
        .as_deref()
        .is_some_and(|h| h != crate::host::host_id())
    {
        tracing::info!("the agent of task {id} was started on another host: not ours to stop");
        return None;
    }
    // By text: the agent records the id as a string, whatever its JSON type.
    (record.task_id.to_string() == id.to_string())
        .then_some((record.agent_pid, record.agent_start_time))
}

/// The dead worker's key lock, run slots and port: free them now rather than at the next
/// acquirer's stale check, so status shows them free at once.
fn free_shared_locks(root: &Root, task: Option<&Task>, lock_opts: &LockOptions) -> Result<()> {
    if let Some(k) = task.and_then(|t| t.key.as_deref()) {
        dirlock::break_if_stale(&root.key_lock(k), lock_opts)?;
    }
    break_stale_locks_in(&root.slots_dir(), lock_opts)?;
    break_stale_locks_in(&root.groups_dir(), lock_opts)?;
    break_stale_locks_in(&root.ports_dir(), lock_opts)
}

/// `conductor recover`: recover a slot whose worker is gone for good. Refuses (with
/// the holder named) if a worker still serves the slot.
pub fn recover_abandoned(root: &Root, slot: Slot) -> Result<RecoveryReport> {
    let paths = root.existing_slot(slot)?;
    let _gate = Gate::acquire(&paths.worker_gate(), &format!("recovery of worker {slot}"))?;
    let config = Config::load(&root.config_file())?;
    recover_slot(root, slot, &config.lock_options())
}

/// Finish, on their behalf, tasks left by workers that died for good: every slot but
/// `own` with a `running.json` whose gate nobody holds. Exactly once: the gate admits one.
pub fn sweep_abandoned(root: &Root, slots: &[Slot], own: Slot, lock_opts: &LockOptions) {
    for &slot in slots.iter().filter(|s| **s != own) {
        let w = root.worker(slot);
        // A worker restarted right after a crash recovers its own slot: leave the slot
        // to it unless its status has been silent for a while. Left behind: a task in
        // hand, or (looked for only once silent) callbacks nobody reaps.
        // Its locks' lease waits start now, not when it looks abandoned.
        lease_watch::watch_if_foreign(root, &w, lock_opts);
        let silent = silent_for(&w.status());
        let left = w.running().exists()
            || (silent.is_none_or(|s| s >= ABANDONED_AFTER) && callbacks::any_left_here(&w));
        if !is_abandoned(left, silent, ABANDONED_AFTER) {
            continue;
        }
        tracing::debug!(
            "worker {slot} looks abandoned: running.json exists, status silent for {:?}",
            silent_for(&w.status())
        );
        let _gate = match Gate::acquire(&w.worker_gate(), &format!("recovery of worker {slot}")) {
            Ok(g) => g,
            // A live worker serves it (here or, by its lease, on another host), or
            // another recoverer is at it.
            Err(crate::error::Error::GateHeld { .. }) => continue,
            Err(e) => {
                tracing::warn!("cannot take worker {slot}'s gate to recover it: {e}");
                continue;
            }
        };
        match recover_slot(root, slot, lock_opts) {
            Ok(r) if !r.is_empty() => tracing::warn!("recovered abandoned worker {slot}: {r}"),
            Ok(_) => {}
            Err(e) => tracing::warn!("recovering abandoned worker {slot}: {e}"),
        }
    }
}

fn silent_for(path: &Path) -> Option<Duration> {
    let modified = fs::metadata(path).and_then(|m| m.modified()).ok()?;
    Some(modified.elapsed().unwrap_or_default())
}
