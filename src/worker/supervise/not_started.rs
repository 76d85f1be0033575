//! Why a task's agent was not started: for good, for a stop request, or a shortage that
//! passes (processes, memory, descriptors), waited out for a bounded time.

use std::time::Duration;

use super::put_back;
use crate::protocol::TaskResult;

/// How long a task waits out a passing shortage before its agent can start.
pub(super) const TRANSIENT_SPAWN_BOUND: Duration = Duration::from_secs(120);

/// Why the agent of a task was not started.
pub(super) enum NotStarted {
    /// For good: the task ends with this result.
    Failed(Box<TaskResult>),
    /// The worker was asked to stop while the task waited to start.
    Stopping(Box<TaskResult>),
    /// Out of processes: the task went back to wait.
    WentBack(put_back::ShortBack),
}

/// A shortage that passes: processes (EAGAIN), memory, descriptors.
pub(super) fn is_transient(e: &crate::error::Error) -> bool {
    use nix::libc::{EAGAIN, EMFILE, ENFILE, ENOMEM};
    match e {
        crate::error::Error::Spawn { source, .. } => {
            matches!(
                source.raw_os_error(),
                Some(EAGAIN | ENOMEM | ENFILE | EMFILE)
            )
        }
        _ => false,
    }
}
