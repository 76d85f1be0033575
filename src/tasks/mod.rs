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
pub mod reindex;
pub mod withdraw;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::ids::{self, Place};
use crate::inspect::read_task_file;
use crate::layout::{Root, Slot};
use crate::protocol::{Outcome, TaskId, TaskResult};
use crate::queue::Queue;
use crate::wait::{OnDeath, Wait};
use crate::watch::WatchMode;

pub use list::{list, Cursor, ListOptions, TaskSummary};
pub use withdraw::{cancel_task, CancelTask};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// In a slot's inbox (`task.json`), not yet claimed.
    Waiting,
    /// In the shared queue (`queue/pending/`), not yet claimed.
    Queued,
    /// Claimed: in some slot's `running.json`. Its word is `working`, as `status.json`
    /// and the MCP Tasks specification say it (the one word every view and filter uses;
    /// `running` is taken as an alias in filters).
    #[serde(rename = "working")]
    Running,
    /// Running, and its agent waits for a person to allow a tool call
    /// (`conductor approve|deny`, see [`crate::approval`]). Only listings say it: [`find`]
    /// reports such a task `Running`, which is what it is to every other command.
    #[serde(rename = "needs approval")]
    NeedsApproval,
    /// Ended: its agent succeeded.
    Done,
    /// Ended: its agent failed.
    Failed,
    /// Ended: it ran past its time limit and was stopped.
    Timeout,
    /// Ended: cancelled before or while it ran.
    Cancelled,
    /// Ended: its worker died or was stopped while it ran.
    Interrupted,
    /// Ended: refused without running (a malformed `task.json`, quarantined with the
    /// reason, or a task its worker may not run).
    Rejected,
    /// Registered, but no file shows it any more (collected by gc, or removed by hand).
    Gone,
    /// Ended, but its result file is damaged (cut short, not JSON): the answer is lost;
    /// `doctor` names the file.
    Damaged,
}

impl TaskState {
    /// Every state, in the order listings explain them.
    pub const ALL: [TaskState; 12] = [
        TaskState::Waiting,
        TaskState::Queued,
        TaskState::Running,
        TaskState::NeedsApproval,
        TaskState::Done,
        TaskState::Failed,
        TaskState::Timeout,
        TaskState::Cancelled,
        TaskState::Interrupted,
        TaskState::Rejected,
        TaskState::Gone,
        TaskState::Damaged,
    ];

    /// The state a result tells of.
    pub fn of_result(r: &TaskResult) -> TaskState {
        match r.outcome {
            Some(Outcome::Success) => TaskState::Done,
            Some(Outcome::Failure) => TaskState::Failed,
            Some(Outcome::Timeout) => TaskState::Timeout,
            Some(Outcome::Cancelled) => TaskState::Cancelled,
            Some(Outcome::Interrupted) => TaskState::Interrupted,
            Some(Outcome::Rejected) => TaskState::Rejected,
            // Results of original workers carry only `success`.
            None if r.success => TaskState::Done,
            None => TaskState::Failed,
        }
    }

    /// The task has its result (or had one: gone).
    pub fn is_finished(self) -> bool {
        !matches!(
            self,
            TaskState::Waiting | TaskState::Queued | TaskState::Running | TaskState::NeedsApproval
        )
    }

    /// The state's word, as every view and filter says it (`working` for `Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Queued => "queued",
            TaskState::Running => "working",
            TaskState::NeedsApproval => "needs approval",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
            TaskState::Timeout => "timeout",
            TaskState::Cancelled => "cancelled",
            TaskState::Interrupted => "interrupted",
            TaskState::Rejected => "rejected",
            TaskState::Gone => "gone",
            TaskState::Damaged => "damaged",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<TaskState, String> {
        // One word on a command line: `--state needs-approval`.
        if matches!(s, "needs-approval" | "needs_approval" | "approval") {
            return Ok(TaskState::NeedsApproval);
        }
        // The word `tasks` and `--state` said before `working` was the only one.
        if s == "running" {
            return Ok(TaskState::Running);
        }
        TaskState::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TaskState::ALL.iter().map(|t| t.as_str()).collect();
                let near = names
                    .iter()
                    .chain(&["running", "needs-approval"])
                    .map(|n| (crate::text::edit_distance(s, n), *n))
                    .min()
                    .filter(|(d, _)| *d <= 2)
                    .map(|(_, n)| format!("did you mean {n:?}? "))
                    .unwrap_or_default();
                format!(
                    "unknown task state {s:?}; {near}one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Where a task is, and the file that shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskLocation {
    /// The task's id.
    pub id: TaskId,
    /// Where it is in its life.
    pub state: TaskState,
    /// It was submitted to the shared queue (else delivered to a slot's inbox).
    pub queued: bool,
    /// The slot whose inbox holds it, that runs it, or that ran it; `None` while it is
    /// in the queue, and for a queued task withdrawn before it ran.
    #[serde(serialize_with = "slot_number")]
    pub slot: Option<Slot>,
    /// `task.json`, the pending entry, `running.json`, or the result.
    pub file: Option<PathBuf>,
}

fn slot_number<S: serde::Serializer>(
    slot: &Option<Slot>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    slot.map(|n| n.0).serialize(s)
}

/// How often a task seen nowhere is looked for again (it may be between two places:
/// a withdrawal renames it out before its result is written, a few fsyncs later; on a
/// loaded machine that took over the 50 ms once allowed). Only a task truly gone pays
/// the whole half second, once.
const RELOOKS: u32 = 100;
const RELOOK_PAUSE: Duration = Duration::from_millis(5);

/// Find task `id` anywhere on the root. `None` when no file and no registry entry
/// knows the id.
pub fn find(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    id.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    for look in 0..RELOOKS {
        let place = ids::lookup(root, id)?;
        let found = match place {
            Some(Place::Worker(slot)) => in_slot(root, id, slot)?,
            Some(Place::Queue) => in_queue(root, id)?,
            None => return unregistered(root, id),
        };
        if found.is_some() {
            return Ok(found);
        }
        if look + 1 < RELOOKS {
            std::thread::sleep(RELOOK_PAUSE);
        }
    }
    let place = ids::lookup(root, id)?;
    Ok(Some(TaskLocation {
        id: id.clone(),
        state: TaskState::Gone,
        queued: place == Some(Place::Queue),
        slot: match place {
            Some(Place::Worker(s)) => Some(s),
            _ => None,
        },
        file: Some(root.id_entry(id)),
    }))
}

fn holds(path: &Path, id: &TaskId) -> bool {
    read_task_file(path).and_then(|f| f.task_id).as_ref() == Some(id)
}

fn located(
    id: &TaskId,
    state: TaskState,
    queued: bool,
    slot: Option<Slot>,
    file: PathBuf,
) -> TaskLocation {
    TaskLocation {
        id: id.clone(),
        state,
        queued,
        slot,
        file: Some(file),
    }
}

/// A task delivered to `slot`'s inbox: looked for in its life's order.
fn in_slot(root: &Root, id: &TaskId, slot: Slot) -> Result<Option<TaskLocation>> {
    let w = root.worker(slot);
    if holds(&w.task(), id) {
        return Ok(Some(located(
            id,
            TaskState::Waiting,
            false,
            Some(slot),
            w.task(),
        )));
    }
    let kept = w.result_for(id);
    let finished = |r: TaskResult| {
        located(
            id,
            TaskState::of_result(&r),
            false,
            Some(slot),
            kept.clone(),
        )
    };
    if holds(&w.running(), id) {
        // The worker publishes the result before it retires running.json: a result
        // already there means the task has finished.
        if let Some(r) = TaskResult::read(&kept)? {
            return Ok(Some(finished(r)));
        }
        return Ok(Some(located(
            id,
            TaskState::Running,
            false,
            Some(slot),
            w.running(),
        )));
    }
    Ok(TaskResult::read(&kept)?.map(finished))
}

/// The slot whose `running.json` holds task `id`.
pub(crate) fn running_slot(root: &Root, id: &TaskId) -> Result<Option<Slot>> {
    Ok(root
        .slots()?
        .into_iter()
        .find(|s| holds(&root.worker(*s).running(), id)))
}

/// A task submitted to the queue: looked for in its life's order.
fn in_queue(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    if let Some(p) = root.pending_entry(id)? {
        return Ok(Some(located(id, TaskState::Queued, true, None, p)));
    }
    let path = root.queue_results().join(format!("{id}.json"));
    let finished = |(r, file): (TaskResult, PathBuf)| {
        let slot = r.worker.and_then(|n| Slot::checked(n).ok());
        located(id, TaskState::of_result(&r), true, slot, file)
    };
    if let Some(slot) = running_slot(root, id)? {
        // Published before running.json is retired: the task has finished.
        if let Some(r) = damaged::read_queue_result(root, id, &path)? {
            return Ok(Some(finished(r)));
        }
        let file = root.worker(slot).running();
        return Ok(Some(located(
            id,
            TaskState::Running,
            true,
            Some(slot),
            file,
        )));
    }
    Ok(damaged::read_queue_result(root, id, &path)?.map(finished))
}

/// An id without a registry entry: an original client's task not yet claimed, or a
/// root from before the registry. One look in each slot, and the queue's results.
fn unregistered(root: &Root, id: &TaskId) -> Result<Option<TaskLocation>> {
    let slots = root.slots()?;
    for &slot in &slots {
        if let Some(found) = in_slot(root, id, slot)? {
            return Ok(Some(found));
        }
    }
    in_queue(root, id)
}

/// Task `id`'s result, if it has finished; [`Error::NoSuchTask`] if nothing knows the id.
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

pub(crate) fn no_such_task(root: &Root, id: &TaskId) -> Error {
    Error::NoSuchTask {
        id: id.to_string(),
        root: root.path().to_path_buf(),
    }
}

/// Wait until task `id` has a result, wherever it is; returns it. Fails at once with
/// [`Error::NoSuchTask`] when nothing knows the id, with [`Error::Timeout`] after
/// `timeout` (`Duration::MAX`: no limit), and as the slot's or the queue's own wait does
/// when nobody serves it ([`Error::NobodyServes`]) or its worker dies (`on_death`).
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
