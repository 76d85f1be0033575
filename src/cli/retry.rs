//! `conductor retry TASK_ID | N TASK_ID`: run a finished task again under a new id.

use crate::fsio;
use crate::{Error, Slot, Task, TaskId};
use anyhow::Context as _;

use super::target::{single, Target, Targets, TARGET_HELP};
use super::RootArg;
use crate::cli::common::exit;
use crate::queue::Queue;

#[derive(Debug, clap::Args)]
#[command(after_help = format!("{TARGET_HELP}\n\n\
The task's record (workers/N/tasks/TASK_ID.json, kept by the slot that ran it) is sent \
again: to that slot's inbox, or back to the shared queue for a task that came through it."))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Continue the agent's session instead of starting afresh (claude preset:
    /// `claude -p --resume SESSION`, the session id taken from the task's result).
    #[arg(long)]
    pub resume: bool,
    /// Id for the new task (default: TASK_ID-r1, -r2 …).
    #[arg(long)]
    pub id: Option<String>,
    /// Replace the prompt (e.g. with --resume: "continue, and fix the failing test").
    #[arg(long)]
    pub prompt: Option<String>,
    /// Wait for the result and print its output (exit 1 if it failed).
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// Where a task to retry ran, and whether it came through the queue.
fn ran_where(client: &crate::Client, args: &Args) -> anyhow::Result<(Slot, TaskId, bool)> {
    match args.targets.resolve(client.root())? {
        Target::Slot { slot, ids } => Ok((slot, single(ids, "retry N")?, false)),
        Target::Tasks(ids) => {
            let id = single(ids, "retry")?;
            let loc = client.find_task(&id)?.ok_or_else(|| Error::NoSuchTask {
                id: id.to_string(),
                root: client.root().path().to_path_buf(),
            })?;
            if !loc.state.is_finished() {
                anyhow::bail!(Error::Usage(format!(
                    "task {id} is {}; retry runs a finished task again (`conductor wait {id}` first)",
                    loc.state
                )));
            }
            let slot = loc.slot.ok_or_else(|| {
                Error::Usage(format!(
                    "task {id} never ran (it is {}): no worker has a record of it to run again",
                    loc.state
                ))
            })?;
            Ok((slot, id, loc.queued))
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let (slot, old, queued) = ran_where(&client, &args)?;
    let w = client.worker(slot);
    let record = w.task_record(&old);
    let bytes = fsio::read_bounded(&record, fsio::TASK_SIZE_LIMIT)?.with_context(|| {
        format!(
            "worker {slot} has no record of task {old} ({} is missing); only tasks that ran can be retried",
            record.display()
        )
    })?;
    let mut task = Task::from_bytes(&record, &bytes)?;
    let new_id = match &args.id {
        Some(id) => super::task_id_arg(id)?,
        None => next_retry_id(&client, slot, &old),
    };
    task.id = Some(new_id);
    task.attempt = None;
    task.resume = None;
    if let Some(p) = args.prompt {
        task.prompt = p;
    }
    if args.resume {
        let result = client
            .read_result_for(slot, &old)?
            .with_context(|| format!("task {old} has no result on worker {slot} to resume from"))?;
        let session = result.session_id.ok_or_else(|| {
            Error::Usage(format!(
                "task {old} has no sessionId in its result: --resume needs a worker started with --preset claude"
            ))
        })?;
        task.resume = Some(session);
    }
    let id = if queued {
        Queue::new(client.root().clone()).submit(&task)?
    } else {
        client.write_task(slot, &task)?
    };
    if !args.wait {
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let carries_on = format!("task {id} carries on (`conductor wait {id}`)");
    super::waiting::finish(None, false, &carries_on, |on_death, left| {
        client.wait_for_task_with(&id, left, on_death)
    })
}

/// `<id>-r1`, `-r2` …: the first that is free on the whole root (ids are unique across
/// it) and names neither a result nor a task record on this slot (older roots).
fn next_retry_id(client: &crate::Client, slot: Slot, old: &TaskId) -> TaskId {
    let w = client.worker(slot);
    old.retries()
        .find(|id| {
            matches!(crate::ids::lookup(client.root(), id), Ok(None))
                && !w.result_for(id).exists()
                && !w.task_record(id).exists()
        })
        .expect("some retry id is free")
}
