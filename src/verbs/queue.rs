//! The `queue` verb (`conductor queue --json`, the MCP `queue` tool): the shared queue's pending tasks in run order, each with why it waits.

use std::path::PathBuf;

use serde::Serialize;

use crate::queue::{PendingTask, Queue};
use crate::text::age_since;
use crate::{Root, TaskId};

/// The answer: the root and its pending tasks, first to run first.
#[derive(Debug, Clone, Serialize)]
pub struct QueueView {
    /// The root.
    pub root: PathBuf,
    /// The pending tasks, in the order they will be taken.
    pub pending: Vec<Pending>,
}

/// One pending task as the answer shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// 1 for the task the next idle worker takes.
    pub position: usize,
    /// `None` for an entry not written by `submit` (dropped in by hand).
    pub id: Option<TaskId>,
    /// Its priority as given, 0-9.
    pub priority: u8,
    /// The priority raised by waiting.
    pub effective_priority: u8,
    /// Its serialization key.
    pub key: Option<String>,
    /// RFC 3339.
    pub submitted_at: String,
    /// How long it has waited, in seconds.
    pub age_secs: f64,
    /// Why it does not run yet, when that can be told.
    pub waiting: Option<String>,
    /// The tasks it runs after.
    pub after: Vec<TaskId>,
    /// Its file in the queue.
    pub path: PathBuf,
}

impl Pending {
    /// `p`, the `position`th to run.
    pub fn of(position: usize, p: &PendingTask) -> Pending {
        Pending {
            position,
            id: p.id.clone(),
            priority: p.priority,
            effective_priority: p.effective_priority,
            key: p.key.clone(),
            submitted_at: crate::protocol::rfc3339(p.submitted_at),
            age_secs: (age_since(p.submitted_at).as_millis() as f64) / 1000.0,
            waiting: p.waiting.clone(),
            after: p.after.clone(),
            path: p.path.clone(),
        }
    }
}

/// The answer for `pending` (as [`Queue::pending`] lists them) on `root`.
pub fn view(root: &Root, pending: &[PendingTask]) -> QueueView {
    QueueView {
        root: root.path().to_path_buf(),
        pending: pending
            .iter()
            .enumerate()
            .map(|(i, p)| Pending::of(i + 1, p))
            .collect(),
    }
}

/// The `queue` verb: `root`'s pending tasks in run order.
pub fn queue(root: &Root) -> crate::Result<QueueView> {
    let pending = Queue::new(root.clone()).pending()?;
    Ok(view(root, &pending))
}
