//! What recovery found on a slot (`Found`: the task a dead worker left in hand) and
//! what it did about it (`RecoveryReport`).

use crate::error::Error;
use crate::fsio::{self, SMALL_FILE_LIMIT};
use crate::layout::WorkerPaths;
use crate::protocol::{Status, Task, TaskId, TaskResult};

use super::decide::Leftover;

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
    /// Callback groups the dead worker left running, stopped.
    pub ended_callbacks: usize,
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
        if self.ended_callbacks > 0 {
            did.push(format!(
                "stopped {} callback(s) left running",
                self.ended_callbacks
            ));
        }
        if did.is_empty() {
            f.write_str("nothing to recover")
        } else {
            f.write_str(&did.join("; "))
        }
    }
}

/// What a dead worker left in `running.json`, with what its status said.
pub(super) struct Found {
    pub(super) id: TaskId,
    pub(super) task: Option<Task>,
    pub(super) status: Option<Status>,
    pub(super) queued: bool,
}

impl Found {
    pub(super) fn facts(&self, paths: &WorkerPaths) -> Leftover {
        let cancel_requested = fsio::read_bounded(&paths.cancel(), SMALL_FILE_LIMIT)
            .ok()
            .flatten()
            .is_some_and(|b| String::from_utf8_lossy(&b).trim() == self.id.to_string());
        Leftover {
            has_result: kept_result(paths, &self.id),
            cancel_requested,
            attempts: self.task.as_ref().map(|t| (t.attempt(), t.max_attempts())),
            queued: self.queued,
            deferring: self
                .task
                .as_ref()
                .and_then(Task::not_before)
                .is_some_and(|t| t > std::time::SystemTime::now()),
        }
    }

    pub(super) fn why(&self) -> String {
        match self.status.as_ref().and_then(|s| s.worker_pid) {
            Some(p) => format!("interrupted: worker pid {p} died"),
            None => "interrupted: the worker died".to_string(),
        }
    }
}

/// Whether the dead worker kept a result for `id` (it died after publishing it). A
/// damaged one (cut short by a crash on a filesystem without ordering, or by hand) is
/// no result: it is set aside, and the task ends as if none had been written.
fn kept_result(paths: &WorkerPaths, id: &TaskId) -> bool {
    let kept = paths.result_for(id);
    match TaskResult::read(&kept) {
        Ok(found) => found.is_some(),
        Err(Error::BadFile { problem, .. }) => {
            let aside = fsio::set_aside_damaged(&kept);
            tracing::warn!(
                "kept result {} {problem}: not the task's result; set aside ({aside:?})",
                kept.display()
            );
            false
        }
        // Unreadable for another reason: announcing it will say why.
        Err(_) => true,
    }
}
