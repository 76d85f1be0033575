//! `conductor retry N TASK_ID`: run a finished task again under a new id.

use crate::fsio;
use crate::{Error, Slot, Task, TaskId};
use anyhow::Context as _;

use super::{parse_slot, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// The task to run again (its record is workers/N/tasks/TASK_ID.json).
    pub task_id: String,
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

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let slot = args.slot;
    let old = super::task_id_arg(&args.task_id)?;
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
    let id = client.write_task(slot, &task)?;
    if !args.wait {
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let carries_on = format!("task {id} carries on (`conductor wait {slot} {id}`)");
    super::waiting::finish(None, false, &carries_on, |on_death, left| {
        client.wait_for_result_with(slot, &id, left, on_death)
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
