//! Which task a slot has in hand (`running.json`), works on (`status.json`) or has
//! waiting (`task.json`), read leniently: a half-written file still yields its id.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::fsio::{self, TASK_SIZE_LIMIT};
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{Status, Task, TaskId, WorkerState};

/// A task file in a slot (`running.json` or `task.json`): its id if readable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskFile {
    pub task_id: Option<TaskId>,
    /// The prompt's start on one line (up to [`crate::text::PREVIEW_CHARS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_preview: Option<String>,
    /// The agent preset the task names (`agent`), if it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Why the file could not be read as a task, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Read the id of a task file; `None` when there is no such file.
pub fn read_task_file(path: &Path) -> Option<TaskFile> {
    match fsio::read_bounded(path, TASK_SIZE_LIMIT) {
        Ok(None) => None,
        Ok(Some(bytes)) => Some(match Task::from_bytes(path, &bytes) {
            Ok(t) => TaskFile {
                task_id: t.id,
                prompt_preview: Some(crate::text::prompt_preview(
                    &t.prompt,
                    crate::text::PREVIEW_CHARS,
                )),
                agent: t.agent,
                problem: None,
            },
            Err(e) => TaskFile {
                task_id: Task::salvage_id(&bytes),
                prompt_preview: None,
                agent: None,
                problem: Some(e.to_string()),
            },
        }),
        Err(e) => Some(TaskFile {
            task_id: None,
            prompt_preview: None,
            agent: None,
            problem: Some(e.to_string()),
        }),
    }
}

/// The slot's `status.json`; `None` when there is none.
pub(crate) fn read_status(paths: &WorkerPaths) -> Result<Option<Status>> {
    Status::read(&paths.status())
}

/// The task a working `status` names.
fn working_on(status: Option<Status>) -> Option<TaskId> {
    status
        .filter(|s| s.status == WorkerState::Working)
        .and_then(|s| s.task_id)
}

/// The task `status.json` says the worker is working on; none when it is unreadable.
pub(crate) fn status_task(paths: &WorkerPaths) -> Option<TaskId> {
    working_on(read_status(paths).ok().flatten())
}

/// Where the id of a slot's current task was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum TaskSource {
    /// `running.json`: claimed and running.
    Running,
    /// `status.json` says working on it.
    Status,
    /// `task.json`: waiting in the inbox.
    Inbox,
}

impl fmt::Display for TaskSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskSource::Running => "running",
            TaskSource::Status => "working on (status.json)",
            TaskSource::Inbox => "waiting in the inbox",
        })
    }
}

/// The id of the task a slot is running (from `running.json`), if any.
pub fn running_task(root: &Root, slot: Slot) -> Option<TaskId> {
    read_task_file(&root.worker(slot).running()).and_then(|f| f.task_id)
}

/// The slot's current task: the running one (`running.json`), else the one
/// `status.json` says it works on, else the one waiting in the inbox.
pub fn current_task(root: &Root, slot: Slot) -> Result<Option<(TaskId, TaskSource)>> {
    let paths = root.existing_slot(slot)?;
    if let Some(id) = running_task(root, slot) {
        return Ok(Some((id, TaskSource::Running)));
    }
    if let Some(id) = working_on(read_status(&paths)?) {
        return Ok(Some((id, TaskSource::Status)));
    }
    Ok(read_task_file(&paths.task())
        .and_then(|f| f.task_id)
        .map(|id| (id, TaskSource::Inbox)))
}
