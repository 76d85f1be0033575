//! The `status` verb (`conductor status`, the MCP `status` tool): every slot's report, the shared queue's capacity, and whether any live worker serves the root.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::inspect::{self, SlotReport};
use crate::queue::{Capacity, Queue};
use crate::review::ReviewSummary;
use crate::{Client, Slot};

/// What the status view covers.
#[derive(Debug, Clone, Default)]
pub struct StatusRequest {
    /// Only this slot (`None`: every slot).
    pub slot: Option<Slot>,
    /// Also where each worktree task's change stands, read from git (a `git` call per
    /// such task: the CLI's `--json` asks for it, the MCP tool, called often, does not).
    pub review: bool,
}

/// The status view: what `conductor status` renders and `--json` and the MCP `status`
/// tool serialize (through [`StatusAnswer::to_json`]).
#[derive(Debug)]
pub struct StatusAnswer {
    /// The root's directory.
    pub root: PathBuf,
    /// One report per slot, in slot order.
    pub workers: Vec<SlotReport>,
    /// The shared queue's capacity (running against the cap, pending by priority, keys,
    /// groups), or why it could not be read.
    pub capacity: crate::Result<Capacity>,
    /// Whether a live worker serves the root (`None`: could not be told).
    pub served_by_live_worker: Option<bool>,
    /// Where each worktree task's change stands (with [`StatusRequest::review`]).
    pub review: Option<crate::Result<ReviewSummary>>,
}

/// The status `request` asks for.
pub fn status(client: &Client, request: &StatusRequest) -> crate::Result<StatusAnswer> {
    let root = client.root();
    Ok(StatusAnswer {
        root: root.path().to_path_buf(),
        workers: inspect::slot_reports(root, request.slot)?,
        capacity: Queue::new(root.clone()).capacity(),
        served_by_live_worker: crate::wait::root_served(root).ok(),
        review: request.review.then(|| crate::review::summary(client)),
    })
}

impl StatusAnswer {
    /// One JSON document with camelCase keys: {"root", "workers", the capacity's keys
    /// ("slots", "byKey", "pending", "locks", …) or "capacityError", "servedByLiveWorker",
    /// and with a review "review" or "reviewError"}.
    pub fn to_json(&self) -> Value {
        let mut doc = json!({ "root": self.root, "workers": self.workers });
        match &self.capacity {
            Ok(c) => {
                if let (Some(doc), Ok(Value::Object(cap))) =
                    (doc.as_object_mut(), serde_json::to_value(c))
                {
                    doc.extend(cap);
                }
            }
            Err(e) => doc["capacityError"] = e.to_string().into(),
        }
        doc["servedByLiveWorker"] = json!(self.served_by_live_worker);
        match &self.review {
            Some(Ok(r)) => doc["review"] = json!(r),
            Some(Err(e)) => doc["reviewError"] = e.to_string().into(),
            None => {}
        }
        doc
    }
}
