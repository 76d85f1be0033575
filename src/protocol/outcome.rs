//! How a task ended: the `outcome` of its result.

use serde::{Deserialize, Serialize};

/// How a task ended. Every accepted task ends with exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The agent exited 0.
    Success,
    /// The agent failed (non-zero exit, a signal, or it could not start).
    Failure,
    /// It ran past its limit and was stopped.
    Timeout,
    /// Someone cancelled it.
    Cancelled,
    /// Its worker stopped or died while it ran.
    Interrupted,
    /// The worker refused it (unreadable, or not allowed) without running it.
    Rejected,
}
