//! The `result` verb (`conductor result`, the MCP `result` tool): a task's result once it has finished, else where it is.

use crate::tasks::TaskLocation;
use crate::{Client, Slot, TaskId, TaskResult};

/// Whose result.
#[derive(Debug, Clone)]
pub enum ResultRequest {
    /// Task `id`'s, wherever it ran.
    Task(TaskId),
    /// A slot's: its newest (`id: None`), or task `id`'s as that slot kept it.
    Slot {
        /// The worker slot.
        slot: Slot,
        /// The task; `None`: the slot's newest result.
        id: Option<TaskId>,
    },
}

/// The answer to a [`ResultRequest`].
#[derive(Debug, Clone)]
pub enum ResultAnswer {
    /// The task has finished: its result.
    Finished(Box<TaskResult>),
    /// No result yet: where the task is (`None`: nothing knows it, or for a slot, the
    /// slot has no such result).
    NotYet(Option<TaskLocation>),
}

/// The result `request` asks for.
pub fn result(client: &Client, request: &ResultRequest) -> crate::Result<ResultAnswer> {
    let found = match request {
        ResultRequest::Task(id) => match client.result_of(id)? {
            Some(r) => Some(r),
            None => return Ok(ResultAnswer::NotYet(client.find_task(id)?)),
        },
        ResultRequest::Slot { slot, id: Some(id) } => client.read_result_for(*slot, id)?,
        ResultRequest::Slot { slot, id: None } => client.read_result(*slot)?,
    };
    Ok(match found {
        Some(r) => ResultAnswer::Finished(Box::new(r)),
        None => ResultAnswer::NotYet(None),
    })
}
