//! The `send` verb (`conductor send`, the MCP `send` tool): deliver one task to one worker slot's inbox.

use crate::queue::pause::{Paused, Target};
use crate::verbs::spec::TaskSpec;
use crate::{Client, Slot, Task, TaskId};

/// A task to deliver to one slot.
#[derive(Debug, Clone)]
pub struct Send {
    /// The slot whose inbox takes it.
    pub slot: Slot,
    /// What the task asks for (its prompt given: a CLI reads `-f FILE` first).
    pub task: TaskSpec,
}

/// The answer: the task's id, and what keeps it from starting, if anything.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The delivered task's id.
    pub id: TaskId,
    /// A pause that holds it in the inbox (why, and what to resume).
    pub held: Option<(String, Target)>,
    /// Whether no live worker serves the slot (it waits in the inbox until one starts).
    pub unserved: bool,
}

/// The task `request` describes, checked and marked with this process's depth.
pub fn task_of(request: &Send) -> crate::Result<Task> {
    let mut task = request.task.clone().into_task()?;
    crate::env::stamp_depth(&mut task)?;
    Ok(task)
}

/// Deliver `request` to its slot's inbox (the slot must exist and its inbox be free).
pub fn send(client: &Client, request: &Send) -> crate::Result<Sent> {
    let slot = request.slot;
    let mut task = task_of(request)?;
    crate::verbs::submit::check_worktree_dir(&task)?;
    let id = client.write_task(slot, &task)?;
    task.id = Some(id.clone());
    let paused = Paused::load(client.root());
    let held = if paused.all() {
        Some(("everything is paused".to_string(), Target::All))
    } else if paused.slot(slot.0) {
        Some((format!("worker {slot} is paused"), Target::Slot(slot.0)))
    } else {
        let key = task.key.clone().unwrap_or_default();
        paused
            .task_reason(task.key.as_deref(), None)
            .map(|why| (why, Target::Key(key)))
    };
    let unserved = matches!(crate::wait::slot_served(client.root(), slot), Ok(false));
    Ok(Sent {
        id,
        held,
        unserved,
    })
}
