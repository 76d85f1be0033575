//! Tasks by id, wherever they are: find one, read or wait for its result, withdraw or cancel it, list them.
//!
//! The index from an id to its place is the root-wide registry (`ids/<id>`, see
//! [`crate::ids`]): it says `workers/N` (delivered to that inbox) or `queue`. From there a
//! task's state is read off at most a handful of files, in the order a task moves through
//! them, so a task never slips between two looks unseen:
//!
//! - a slot's task: `task.json` (waiting) → `running.json` (running) → `results/<id>.json`;
//! - a queued task: `queue/pending/…~<id>.json` (queued) → some slot's `running.json`
//!   (running) → `queue/results/<id>.json` (a link of that slot's result, whose `worker`
//!   field names the slot).
//!
//! A queued task's slot while it runs is found by reading each slot's `running.json` (one
//! small file per slot), not recorded anywhere: nothing extra to keep right on the claim
//! path. An id the registry does not know (an original client's task not yet claimed, a
//! root from before the registry) is looked for in every slot's inbox and results. A lost
//! or damaged registry is rebuilt from the files with [`reindex::rebuild`]
//! (`conductor tasks reindex`).

pub mod damaged;
pub mod edit;
pub mod list;
mod locate;
pub mod reindex;
mod state;
pub mod withdraw;

use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::layout::Root;
use crate::protocol::{TaskId, TaskResult};
use crate::queue::Queue;
use crate::wait::{OnDeath, Wait};
use crate::watch::WatchMode;

pub use list::{list, Cursor, ListOptions, TaskSummary};
pub(crate) use locate::no_such_task;
#[cfg(test)] // approval's tests look for a task's slot
pub(crate) use locate::running_slot;
pub use locate::{find, TaskLocation};
pub use state::TaskState;
pub use withdraw::{cancel_task, CancelTask};

/// Task `id`'s result, if it has finished; [`Error::NoSuchTask`](crate::error::Error::NoSuchTask) if nothing knows the id.
pub fn result_of(root: &Root, id: &TaskId) -> Result<Option<TaskResult>> {
    let Some(loc) = find(root, id)? else {
        return Err(no_such_task(root, id));
    };
    match (
        &loc.file,
        loc.state.is_finished() && loc.state != TaskState::Gone,
    ) {
        (Some(path), true) => TaskResult::read(path),
        _ => Ok(None),
    }
}

/// Wait until task `id` has a result, wherever it is; returns it. Fails at once with
/// [`Error::NoSuchTask`](crate::error::Error::NoSuchTask) when nothing knows the id, with [`Error::Timeout`](crate::error::Error::Timeout) after
/// `timeout` (`Duration::MAX`: no limit), and as the slot's or the queue's own wait does
/// when nobody serves it ([`Error::NobodyServes`](crate::error::Error::NobodyServes)) or its worker dies (`on_death`).
pub fn wait_for_task(
    root: &Root,
    id: &TaskId,
    timeout: Duration,
    on_death: OnDeath,
) -> Result<TaskResult> {
    task_wait(root, id, timeout, on_death)?.run()
}

/// [`wait_for_task`] as a [`Wait`] not yet driven (for a caller that wakes it itself,
/// e.g. through a [`crate::wait::Hub`] shared by many waits).
pub fn task_wait(
    root: &Root,
    id: &TaskId,
    timeout: Duration,
    on_death: OnDeath,
) -> Result<Wait<'static, TaskResult>> {
    let Some(loc) = find(root, id)? else {
        return Err(no_such_task(root, id));
    };
    match (loc.queued, loc.slot) {
        (false, Some(slot)) => {
            crate::wait::result_wait(root, WatchMode::Auto, slot, id, timeout, on_death)
        }
        _ => Queue::new(root.clone()).result_wait(id, timeout, on_death),
    }
}

/// Tasks by id on the orchestrator's handle (implemented in [`crate::tasks`]).
impl Client {
    /// Where task `id` is (waiting in an inbox, queued, running, or finished) and the
    /// file that shows it; `None` if no file and no registry entry knows the id.
    pub fn find_task(&self, id: &TaskId) -> Result<Option<TaskLocation>> {
        find(self.root(), id)
    }

    /// Task `id`'s result if it has finished, wherever it ran.
    pub fn result_of(&self, id: &TaskId) -> Result<Option<TaskResult>> {
        result_of(self.root(), id)
    }

    /// Wait for task `id`'s result, wherever it is, waiting on through a recovery if its
    /// worker dies (see [`wait_for_task`]).
    pub fn wait_for_task(&self, id: &TaskId, timeout: Duration) -> Result<TaskResult> {
        wait_for_task(self.root(), id, timeout, OnDeath::AwaitRecovery)
    }

    /// [`Client::wait_for_task`], doing `on_death` if the worker dies with the task.
    pub(crate) fn wait_for_task_with(
        &self,
        id: &TaskId,
        timeout: Duration,
        on_death: OnDeath,
    ) -> Result<TaskResult> {
        wait_for_task(self.root(), id, timeout, on_death)
    }

    /// Cancel task `id`: withdrawn (and answered `cancelled`) if it waits in an inbox
    /// or the queue, stopped by its worker if it runs (see [`cancel_task`]).
    pub fn cancel_task(&self, id: &TaskId) -> Result<CancelTask> {
        cancel_task(self.root(), id)
    }

    /// Edit task `id` while it waits in the shared queue (see [`edit::edit_task`]).
    pub fn edit_task(
        &self,
        id: &TaskId,
        seen: Option<&crate::protocol::Task>,
        change: impl FnOnce(&mut crate::protocol::Task),
    ) -> Result<crate::protocol::Task> {
        edit::edit_task(self.root(), id, seen, change)
    }

    /// Tasks on the root, newest first (see [`list`]).
    pub fn list_tasks(&self, opts: &ListOptions) -> Result<Vec<TaskSummary>> {
        list(self.root(), opts)
    }
}
