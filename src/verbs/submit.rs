//! The `submit` verb (`conductor submit`, the MCP `submit` tool): put one task into the shared queue, where any idle worker runs it.

use crate::queue::Submitter;
use crate::verbs::spec::{QueueSpec, TaskSpec};
use crate::{Client, Error, Task, TaskId};

/// A task to submit: what it asks for, how the queue treats it, and (MCP `continueFrom`)
/// a finished task whose output its prompt continues from.
#[derive(Debug, Clone, Default)]
pub struct Submit {
    /// What the task asks for (its prompt given: a CLI reads `-f FILE` first).
    pub task: TaskSpec,
    /// Its key, priority, dependencies, group and attempts.
    pub queue: QueueSpec,
    /// Add this finished task's output after the prompt, as `run --chain` does.
    pub continue_from: Option<TaskId>,
}

/// The answer: the task as queued, and whether any worker serves the root yet.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The queued task (its id given or generated, dependencies resolved).
    pub task: Task,
    /// Its id.
    pub id: TaskId,
    /// Whether no live worker serves the root yet (it waits until one starts).
    pub unserved: bool,
}

/// The warning an unserved root's submit carries.
pub const UNSERVED: &str = "no live worker serves this root yet: the task stays queued until one starts (`conductor run` or `conductor-worker N DIR`)";

/// The task `request` describes, checked and marked with this process's depth, before
/// anything is read from the root (a bad request fails here, naming its field).
pub fn task_of(request: &Submit) -> crate::Result<Task> {
    let mut task = request.task.clone().into_task()?;
    request.queue.apply(&mut task)?;
    crate::env::stamp_depth(&mut task)?;
    Ok(task)
}

/// Submit `request` to `client`'s root.
pub fn submit(client: &Client, request: &Submit) -> crate::Result<Submitted> {
    let task = task_of(request)?;
    submit_task(client, task, request.continue_from.as_ref())
}

/// Submit a task made already ([`task_of`]'s): its dependencies' short ids resolved,
/// its worktree's repository checked, `from`'s output added.
pub fn submit_task(client: &Client, task: Task, from: Option<&TaskId>) -> crate::Result<Submitted> {
    let mut task = prepare(client, task, from)?;
    let id = Submitter::open(client.root().clone())?.submit(&task)?;
    task.id = Some(id.clone());
    let unserved = matches!(crate::wait::root_served(client.root()), Ok(false));
    Ok(Submitted { task, id, unserved })
}

/// Submit one of many tasks (a batch line's) through `submitter`, opened once for them
/// all: prepared as [`submit_task`] prepares one. Whether a worker serves the root is
/// not asked (a look into every slot a task): the caller asks once, after the last.
pub(crate) fn submit_one_of_many(
    client: &Client,
    submitter: &Submitter,
    task: Task,
) -> crate::Result<TaskId> {
    let task = prepare(client, task, None)?;
    submitter.submit(&task)
}

/// `task` ready for the queue: its dependencies' short ids resolved, its worktree's
/// repository checked, `from`'s output added.
fn prepare(client: &Client, mut task: Task, from: Option<&TaskId>) -> crate::Result<Task> {
    for dep in &mut task.after {
        *dep = crate::ids::resolve(client.root(), dep)?;
    }
    check_worktree_dir(&task)?;
    if let Some(from) = from {
        task.prompt = continued(client, &task.prompt, from)?;
        // The composed prompt must still make a valid task (its size).
        task.validate()
            .map_err(|reason| Error::InvalidTask { reason })?;
    }
    Ok(task)
}

/// Refuse at once a worktree task whose repository is known here (its `dir`) and is
/// no repository with a working tree: the worker would only reject it later.
pub fn check_worktree_dir(task: &Task) -> crate::Result<()> {
    if task.worktree == Some(true) {
        if let Some(d) = task.dir.as_deref() {
            crate::worktree::Repo::of(d)?;
        }
    }
    Ok(())
}

/// `prompt` followed by finished task `from`'s output, composed as `run --chain`
/// composes a step's prompt; refused when `from` has not finished.
fn continued(client: &Client, prompt: &str, from: &TaskId) -> crate::Result<String> {
    let loc = client.find_task(from)?.ok_or_else(|| Error::NoSuchTask {
        id: from.to_string(),
        root: client.root().path().to_path_buf(),
    })?;
    match client.result_of(from)? {
        Some(r) if loc.state.is_finished() => {
            Ok(crate::verbs::chain::chained_prompt(prompt, Some(&r)))
        }
        _ => Err(Error::InvalidTask {
            reason: format!(
                "`continueFrom`: task {from} is {}; only a finished task's output can be passed \
                 on (wait for it first, or give it in `after` to run after it without its output)",
                loc.state
            ),
        }),
    }
}
