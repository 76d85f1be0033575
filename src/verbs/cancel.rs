//! The `cancel` verb (`conductor cancel`, `conductor queue cancel`, the MCP `cancel` tool, the dashboard's `c`): withdraw waiting tasks, stop running ones — by id, by selection, or a slot's running task.

use serde::Serialize;

use crate::maintenance::request_cancel;
pub use crate::maintenance::CancelOutcome;
use crate::tasks::{CancelTask, ListOptions, TaskState};
use crate::{Client, Error, Slot, TaskId};

/// What to cancel.
#[derive(Debug, Clone)]
pub enum CancelRequest {
    /// These tasks, by id, in this order.
    Tasks(Vec<TaskId>),
    /// The unfinished tasks a selection names, oldest first.
    Selected(Selection),
    /// The task running on `slot`; with `only`, only if it is that one.
    Slot {
        /// The worker slot whose running task is to stop.
        slot: Slot,
        /// Stop it only if it is this task.
        only: Option<TaskId>,
    },
}

/// `cancel --all | --state | --key | --group`: unfinished tasks by state, key and group.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// The states to take (`waiting`, `queued`, `running`); empty: all three.
    pub states: Vec<TaskState>,
    /// Only the tasks with this key.
    pub key: Option<String>,
    /// Only the tasks of this group.
    pub group: Option<String>,
}

/// The states a task can be cancelled in.
pub const UNFINISHED: [TaskState; 3] = [TaskState::Waiting, TaskState::Queued, TaskState::Running];

/// The answer to a [`CancelRequest`].
#[derive(Debug)]
pub enum CancelAnswer {
    /// Each task, as far as cancelling went: `stopped_by` is the error that ended it
    /// early (an unknown id), the tasks before it having been cancelled and reported.
    Tasks {
        /// What cancelling each task did, in the request's order.
        done: Vec<TaskCancelled>,
        /// The error that stopped the run early, if one did.
        stopped_by: Option<Error>,
    },
    /// What asking `slot`'s worker to stop its running task did.
    Slot {
        /// The slot asked.
        slot: Slot,
        /// The task it was to be, if one was named.
        only: Option<TaskId>,
        /// What the request did.
        outcome: CancelOutcome,
    },
}

/// What cancelling one task did: `cancel --json`'s line, `{"id", "outcome", …}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskCancelled {
    /// The task.
    pub id: TaskId,
    /// What became of it.
    #[serde(flatten)]
    pub done: Done,
}

/// What became of one task asked to be cancelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Done {
    /// Taken out of `slot`'s inbox (or, `None`, the queue) before it started, and
    /// answered `cancelled`.
    Withdrawn {
        /// The slot whose inbox held it; `None`: the queue.
        slot: Option<u32>,
    },
    /// Running on `slot`: its worker was asked to stop it.
    Requested {
        /// The slot running it.
        slot: u32,
    },
    /// Left running on `slot`, which no live worker serves: nobody can stop it.
    NoLiveWorker {
        /// The slot it runs on.
        slot: u32,
    },
    /// It had already finished, in `state`; nothing was done.
    Finished {
        /// The state it ended in.
        state: TaskState,
    },
}

impl Done {
    /// Nothing could be done (exit 1 for the CLI, a tool error for MCP).
    pub fn failed(&self) -> bool {
        matches!(self, Done::NoLiveWorker { .. } | Done::Finished { .. })
    }
}

impl From<CancelTask> for Done {
    fn from(c: CancelTask) -> Self {
        match c {
            CancelTask::Withdrawn { slot } => Done::Withdrawn {
                slot: slot.map(|s| s.0),
            },
            CancelTask::Requested { slot } => Done::Requested { slot: slot.0 },
            CancelTask::NoLiveWorker { slot } => Done::NoLiveWorker { slot: slot.0 },
            CancelTask::Finished { state } => Done::Finished { state },
        }
    }
}

/// Cancel what `request` names.
pub fn cancel(client: &Client, request: &CancelRequest) -> crate::Result<CancelAnswer> {
    crate::trust::verify_root(client.root())?;
    let ids = match request {
        CancelRequest::Tasks(ids) => ids.clone(),
        CancelRequest::Selected(sel) => selected(client, sel)?,
        CancelRequest::Slot { slot, only } => {
            let outcome = request_cancel(client.root(), *slot, only.as_ref())?;
            return Ok(CancelAnswer::Slot {
                slot: *slot,
                only: only.clone(),
                outcome,
            });
        }
    };
    let mut done = Vec::with_capacity(ids.len());
    for id in ids {
        match task(client, &id) {
            Ok(d) => done.push(d),
            Err(e) => {
                return Ok(CancelAnswer::Tasks {
                    done,
                    stopped_by: Some(e),
                })
            }
        }
    }
    Ok(CancelAnswer::Tasks {
        done,
        stopped_by: None,
    })
}

/// Cancel task `id`, wherever it is ([`Error::NoSuchTask`] when nothing knows it).
pub fn task(client: &Client, id: &TaskId) -> crate::Result<TaskCancelled> {
    Ok(TaskCancelled {
        id: id.clone(),
        done: client.cancel_task(id)?.into(),
    })
}

/// The unfinished tasks `sel` names, oldest first.
pub fn selected(client: &Client, sel: &Selection) -> crate::Result<Vec<TaskId>> {
    let opts = ListOptions {
        states: if sel.states.is_empty() {
            UNFINISHED.to_vec()
        } else {
            sel.states.clone()
        },
        key: sel.key.clone(),
        group: sel.group.clone(),
        labels: Vec::new(),
        slot: None,
        since: None,
        limit: None,
        after: None,
    };
    let mut tasks = client.list_tasks(&opts)?;
    tasks.reverse();
    Ok(tasks.into_iter().map(|t| t.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_line_has_the_shape_cancel_json_always_printed() {
        let line = |done| {
            serde_json::to_value(TaskCancelled {
                id: TaskId::from("t1"),
                done,
            })
            .unwrap()
        };
        assert_eq!(
            line(Done::Withdrawn { slot: None }),
            serde_json::json!({"id": "t1", "outcome": "withdrawn", "slot": null})
        );
        assert_eq!(
            line(Done::NoLiveWorker { slot: 2 }),
            serde_json::json!({"id": "t1", "outcome": "noLiveWorker", "slot": 2})
        );
        assert_eq!(
            line(Done::Finished {
                state: TaskState::Done
            }),
            serde_json::json!({"id": "t1", "outcome": "finished", "state": TaskState::Done})
        );
        assert!(Done::Finished {
            state: TaskState::Failed
        }
        .failed());
        assert!(!Done::Requested { slot: 0 }.failed());
    }
}
