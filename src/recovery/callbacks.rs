//! The callbacks (and hooks) a worker started and has not reaped yet, recorded in its
//! slot (`workers/<N>/callbacks/<pgid>.json`, [`crate::hooks::tracked`]): whoever
//! recovers the slot after the worker died ends them, since nobody else would ever
//! time them out.
//!
//! A record is written once the callback's process group exists and removed once its
//! worker reaped it. Recovery signals a recorded group only when it is still the one
//! started for the task (leader's start time, our uid, the task's marker in its
//! environment: see [`super::leftover_agent_is_ours`]), never a reused pid, and only
//! on the host that started it.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::group;
use crate::layout::WorkerPaths;
use crate::protocol::TaskId;

/// How long a recovered slot's callbacks get after SIGTERM before SIGKILL (what their
/// own worker would have given them).
pub const KILL_GRACE: Duration = Duration::from_secs(2);

pub use crate::hooks::tracked::{forget, record};
use crate::hooks::tracked::{records, Record};

/// Whether the slot holds a record of a callback started on this host by a worker now
/// gone: it died before reaping it.
pub fn any_left_here(paths: &WorkerPaths) -> bool {
    records(paths).iter().any(|(_, r)| left_here(r))
}

/// A record of a callback started on this host by a worker that is gone.
fn left_here(r: &Record) -> bool {
    r.host_id == crate::host::host_id()
        && !crate::host::same_process_alive(r.worker_pid, r.worker_start_time)
}

/// End the callbacks a dead worker left on its slot (the caller holds its gate): each
/// group still the one started for its task gets SIGTERM, then SIGKILL after
/// [`KILL_GRACE`]; their records go. Records of another host's callbacks stay, for
/// that host's recovery, and so do those of a worker still alive (its own threads
/// time them out). Returns how many groups were signalled.
pub fn end_left(paths: &WorkerPaths) -> usize {
    let mut ended = Vec::new();
    for (path, r) in records(paths) {
        if !left_here(&r) {
            continue;
        }
        let id = TaskId::from(r.task_id.as_str());
        match group::find(r.pid, r.start_time, &id) {
            group::Found::Ours => {
                tracing::warn!(
                    "stopping callback group {} of task {id}: its worker died before it ended",
                    r.pid
                );
                crate::agent::signal_group(r.pid, Signal::SIGTERM);
                ended.push(r.pid);
            }
            group::Found::Stranger => tracing::info!(
                "callback record of task {id}: group {} is no longer its callback",
                r.pid
            ),
            group::Found::Gone => {}
        }
        forget(&path);
    }
    let deadline = std::time::Instant::now() + KILL_GRACE;
    for pgid in &ended {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !group::wait_gone(*pgid, left) {
            crate::agent::signal_group(*pgid, Signal::SIGKILL);
            group::wait_gone(*pgid, Duration::from_secs(5));
        }
    }
    ended.len()
}
