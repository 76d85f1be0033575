//! `conductor retry TASK_ID | N TASK_ID`: run a finished task again under a new id.

use crate::fsio;
use crate::{Error, Outcome, Slot, Task, TaskId, TaskResult};
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
        task.resume = Some(session_of(&result, &w.task_log(&old))?);
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

/// The agent session a finished task can be resumed in: its result's `sessionId`, else
/// the one Claude Code announced in what it printed before it was stopped (its first
/// stream-json line, `{"type":"system","subtype":"init","session_id":…}`), in the
/// result's output or the task's log. When there is none, the error says why, from
/// how the task ended: a task stopped before its agent said anything has nothing to
/// resume, whatever the worker's preset.
fn session_of(result: &TaskResult, log: &std::path::Path) -> anyhow::Result<String> {
    if let Some(s) = &result.session_id {
        return Ok(s.clone());
    }
    let from_log = || {
        fsio::read_bounded(log, fsio::RESULT_SIZE_LIMIT)
            .ok()
            .flatten()
            .and_then(|b| announced_session(&String::from_utf8_lossy(&b)))
    };
    if let Some(s) = announced_session(&result.output).or_else(from_log) {
        return Ok(s);
    }
    let id = &result.task_id;
    let why = match result.outcome {
        Some(Outcome::Interrupted | Outcome::Timeout | Outcome::Cancelled) => format!(
            "task {id} was stopped ({}) before its agent reported a session id: there is no \
             session to resume; retry it without --resume to start afresh",
            crate::inspect::outcome_label(result).to_lowercase()
        ),
        Some(Outcome::Rejected) => {
            format!("task {id} was rejected and never ran: there is no session to resume")
        }
        // `isError` is set whenever the claude preset read the agent's answer.
        _ if result.is_error.is_some() => {
            format!("task {id}'s agent reported no session id: there is no session to resume")
        }
        _ => format!(
            "task {id} has no sessionId in its result: its worker did not run the claude \
             preset (--resume needs a worker started with --preset claude)"
        ),
    };
    Err(Error::Usage(why).into())
}

/// The first `session_id` in lines of JSON objects (Claude Code's stream-json or json
/// output); other lines are skipped.
fn announced_session(text: &str) -> Option<String> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{') && l.contains("\"session_id\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .find_map(|v| {
            v.get("session_id")
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty() && !s.starts_with('-') && s.len() <= 256)
                .map(String::from)
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
