//! Crash recovery: finish what a dead worker left on its slot, exactly once.

use std::fs;
use std::io;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::agent;
use crate::config::Config;
use crate::dirlock::{self, Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::gate::Gate;
use crate::host;
use crate::layout::{Root, Slot};
use crate::protocol::{Outcome, Status, Task, TaskId, TaskResult, WorkerState};
use crate::queue;
use crate::worker::{publish_result, release, retire_running};

/// What recovery found on a slot left behind by a dead worker.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// A stale `.lock` was removed (who held it).
    pub stale_lock: Option<String>,
    /// A leftover agent group was killed (its pid).
    pub killed_agent: Option<u32>,
    /// Task finished as interrupted.
    pub interrupted: Option<TaskId>,
    /// Task put back in the inbox for another attempt.
    pub redelivered: Option<TaskId>,
    /// `running.json` already had its result; only cleaned up.
    pub already_finished: Option<TaskId>,
}

impl RecoveryReport {
    pub fn is_empty(&self) -> bool {
        *self == RecoveryReport::default()
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut did = Vec::new();
        if let Some(h) = &self.stale_lock {
            did.push(format!("removed stale lock ({h})"));
        }
        if let Some(pid) = self.killed_agent {
            did.push(format!("killed leftover agent group {pid}"));
        }
        if let Some(id) = &self.interrupted {
            did.push(format!("task {id} finished as interrupted"));
        }
        if let Some(id) = &self.redelivered {
            did.push(format!("task {id} re-delivered for another attempt"));
        }
        if let Some(id) = &self.already_finished {
            did.push(format!("task {id} already had its result; cleaned up"));
        }
        if did.is_empty() {
            f.write_str("nothing to recover")
        } else {
            f.write_str(&did.join("; "))
        }
    }
}

/// Finish what a dead worker left on `slot`: remove a stale lock, kill a leftover
/// agent, and give an in-flight task its one terminal result (or re-deliver it when
/// its `maxAttempts` allows). The caller must hold the slot's gate.
pub fn recover_slot(root: &Root, slot: Slot, lock_opts: &LockOptions) -> Result<RecoveryReport> {
    let paths = root.worker(slot);
    let mut report = RecoveryReport::default();
    if let Some(h) = dirlock::break_if_stale(&paths.lock_dir(), lock_opts)? {
        report.stale_lock = Some(h.to_string());
    }
    let lock = match DirLock::try_acquire(&paths.lock_dir(), lock_opts)? {
        Acquire::Acquired(l) => l,
        Acquire::Held(h) => {
            return Err(Error::Refused(format!(
                "slot {slot} is locked by a live process ({h}); stop it first or wait"
            )))
        }
    };
    let running = paths.running();
    let limit = Config::load(&root.config_file())
        .map(|c| c.max_task_bytes())
        .unwrap_or(fsio::TASK_SIZE_LIMIT);
    let bytes = match fsio::read_bounded(&running, limit) {
        Ok(Some(b)) => b,
        Ok(None) => {
            release(lock);
            return Ok(report);
        }
        Err(e) => {
            tracing::warn!("unreadable running task: {e}");
            Vec::new()
        }
    };
    let status: Option<Status> = fsio::read_json(&paths.status(), SMALL_FILE_LIMIT).unwrap_or(None);
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

    // Kill the dead worker's agent, if it outlived it: only the exact process
    // recorded for this task, never a process that merely reused its pid.
    if let Some(st) = status.as_ref().filter(|s| s.task_id.as_ref() == Some(&id)) {
        if let Some(pid) = st.agent_pid {
            // The agent leads its own group. Its leader died with the worker (parent-death
            // signal), but descendants may live on in the group. The group id cannot be
            // reused while any member lives, so with the leader gone we signal the group;
            // with the pid alive it must still be the very process we started.
            let leader_alive = host::pid_alive(pid);
            let ours = match (st.agent_start_time, host::process_start_time(pid)) {
                (Some(recorded), Some(now)) => recorded == now,
                _ => !leader_alive,
            };
            if ours {
                tracing::warn!("killing leftover agent group {pid} of task {id}");
                agent::signal_group(pid, Signal::SIGKILL);
                // Not our child, so there is no wait(): watch it go, with a bound.
                let deadline = Instant::now() + Duration::from_secs(5);
                while leader_alive
                    && host::same_process_alive(pid, st.agent_start_time)
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                report.killed_agent = Some(pid);
            }
        }
    }

    // Queued if the id registry says so; a file's own `origin` is trusted only for an
    // id the registry has never seen (a root from before it).
    let queued = match crate::ids::lookup(root, &id)? {
        Some(place) => place == crate::ids::Place::Queue,
        None => task
            .as_ref()
            .is_some_and(|t| t.origin.as_deref() == Some(queue::ORIGIN_QUEUE)),
    };
    // The dead worker's key lock and run slot: free them now rather than at the next
    // acquirer's stale check, so status shows them free at once.
    if let Some(k) = task.as_ref().and_then(|t| t.key.as_deref()) {
        dirlock::break_if_stale(&root.key_lock(k), lock_opts)?;
    }
    for entry in fs::read_dir(root.slots_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().ends_with(".lock") {
            dirlock::break_if_stale(&entry.path(), lock_opts)?;
        }
    }

    if paths.result_for(&id).exists() {
        // The worker died after the durable result but maybe before result.json or
        // the status told anyone: finish telling them.
        let kept = paths.result_for(&id);
        fsio::link_replace(&kept, &paths.result())?;
        if queued {
            queue::publish_queue_result(root, &kept, &id)?;
        }
        if let Ok(Some(r)) = fsio::read_json::<TaskResult>(&kept, fsio::RESULT_SIZE_LIMIT) {
            let mut st = Status::new(if r.success {
                WorkerState::Done
            } else {
                WorkerState::Error
            });
            st.task_id = Some(id.clone());
            st.attempt = r.attempt;
            fsio::write_json(&paths.status(), &st, Durability::Atomic)?;
        }
        retire_running(&paths, &id)?;
        report.already_finished = Some(id);
        release(lock);
        return Ok(report);
    }

    let dead_pid = status.as_ref().and_then(|s| s.worker_pid);
    let why = match dead_pid {
        Some(p) => format!("interrupted: worker pid {p} died"),
        None => "interrupted: the worker died".to_string(),
    };
    let attempt = task.as_ref().map_or(1, Task::attempt);
    // A cancel asked for while the worker was dying is honoured: no further attempt.
    let cancelled = fsio::read_bounded(&paths.cancel(), SMALL_FILE_LIMIT)
        .ok()
        .flatten()
        .is_some_and(|b| String::from_utf8_lossy(&b).trim() == id.to_string());
    let task = task.filter(|_| !cancelled);
    if let Some(mut t) = task.filter(|t| t.attempt() < t.max_attempts()) {
        t.attempt = Some(t.attempt() + 1);
        t.id = Some(id.clone());
        if queued {
            // Back to the queue, for whichever worker is free first.
            queue::requeue(root, &running, &t)?;
            tracing::info!("requeued task {id} as attempt {} ({why})", t.attempt());
            report.redelivered = Some(id);
            release(lock);
            return Ok(report);
        }
        let bytes = fsio::to_json_bytes(&t);
        match fsio::write_new(&paths.task(), &bytes, Durability::Durable) {
            Ok(()) => {
                fsio::remove_file_if_exists(&running)?;
                tracing::info!("re-delivered task {id} as attempt {} ({why})", t.attempt());
                report.redelivered = Some(id);
                release(lock);
                return Ok(report);
            }
            Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                // An earlier recovery may have re-delivered it and died before removing
                // running.json: then the inbox already holds this very task.
                let waiting = fsio::read_bounded(&paths.task(), fsio::TASK_SIZE_LIMIT)
                    .ok()
                    .flatten()
                    .and_then(|b| Task::salvage_id(&b));
                if waiting.as_ref() == Some(&id) {
                    fsio::remove_file_if_exists(&running)?;
                    report.redelivered = Some(id);
                    release(lock);
                    return Ok(report);
                }
                tracing::warn!("cannot re-deliver task {id}: the inbox holds another task");
            }
            Err(e) => return Err(e),
        }
    }
    let mut r = if cancelled {
        let _ = fsio::remove_file_if_exists(&paths.cancel());
        TaskResult::failed(id.clone(), Outcome::Cancelled, "cancelled")
    } else {
        TaskResult::failed(id.clone(), Outcome::Interrupted, why)
    };
    r.worker = Some(slot.0);
    r.attempt = Some(attempt);
    r.started_at = status.as_ref().and_then(|s| s.started_at.clone());
    publish_result(&paths, &r, true)?;
    if queued {
        queue::publish_queue_result(root, &paths.result_for(&id), &id)?;
    }
    let mut st = Status::new(WorkerState::Error);
    st.task_id = Some(id.clone());
    fsio::write_json(&paths.status(), &st, Durability::Atomic)?;
    retire_running(&paths, &id)?;
    report.interrupted = Some(id);
    release(lock);
    Ok(report)
}

/// `conductor recover`: recover a slot whose worker is gone for good. Refuses (with
/// the holder named) if a worker still serves the slot.
pub fn recover_abandoned(root: &Root, slot: Slot) -> Result<RecoveryReport> {
    let paths = root.worker(slot);
    if !paths.dir.is_dir() {
        return Err(Error::Usage(format!(
            "no worker slot {slot} under {}",
            root.path().display()
        )));
    }
    let _gate = Gate::acquire(&paths.worker_gate(), &format!("recovery of worker {slot}"))?;
    let config = Config::load(&root.config_file())?;
    recover_slot(root, slot, &config.lock_options())
}
