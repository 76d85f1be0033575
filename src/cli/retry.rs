//! `conductor retry TASK_ID | N TASK_ID`: run a finished task again under a new id.

use crate::cli::usage::CliError;
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
    /// `claude -p --resume SESSION`; codex: `codex exec resume SESSION`; the session id
    /// taken from the task's result).
    #[arg(long)]
    pub resume: bool,
    /// Id for the new task (default: TASK_ID-r1, -r2 …).
    #[arg(long)]
    pub id: Option<String>,
    /// Replace the prompt (e.g. with --resume: "continue, and fix the failing test").
    #[arg(long)]
    pub prompt: Option<String>,
    /// Wait for the result and print its output (exit 1 if it failed).
    #[arg(long, conflicts_with = "with_dependents")]
    pub wait: bool,
    /// Also re-queue the queued tasks this one's end cancelled down its chains
    /// (`--after`), each waiting for the new run of what it waited for; prints every
    /// new id, this task's first.
    #[arg(long, conflicts_with = "id")]
    pub with_dependents: bool,
    /// Redo an unmerged or conflicting worktree task on top of the current branch: a
    /// new task in a new worktree from HEAD whose prompt carries the original prompt,
    /// the conflict, and the old diff (its old branch is kept).
    #[arg(long, conflicts_with_all = ["resume", "prompt", "with_dependents"])]
    pub rebase: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// Where a task to retry ran.
enum Ran {
    /// On this slot; whether it came through the queue.
    Slot(Slot, TaskId, bool),
    /// Nowhere: a queued task cancelled before it started.
    NeverRan(TaskId),
}

/// Where a task to retry ran.
fn ran_where(client: &crate::Client, args: &Args) -> anyhow::Result<Ran> {
    match args.targets.resolve(client.root())? {
        Target::Slot { slot, ids } => Ok(Ran::Slot(slot, single(ids, "retry N")?, false)),
        Target::Tasks(ids) => locate(client, single(ids, "retry")?),
    }
}

/// Where finished task `id` ran; refused if it has not finished or never ran anywhere
/// it could be taken again from.
fn locate(client: &crate::Client, id: TaskId) -> anyhow::Result<Ran> {
    let found = match client.find_task(&id) {
        // Its queue result is damaged and no slot keeps a whole copy: the task ended,
        // and the record its slot kept runs it again (what `doctor` advises).
        Err(damage @ Error::BadFile { .. }) => {
            return match crate::tasks::damaged::slot_of_damaged(client.root(), &id)? {
                Some(slot) => Ok(Ran::Slot(slot, id, true)),
                None => Err(damage.into()),
            }
        }
        other => other?,
    };
    let loc = found.ok_or_else(|| Error::NoSuchTask {
        id: id.to_string(),
        root: client.root().path().to_path_buf(),
    })?;
    if !loc.state.is_finished() {
        anyhow::bail!(CliError::Usage(format!(
            "task {id} is {}; retry runs a finished task again (`conductor wait {id}` first)",
            loc.state
        )));
    }
    match loc.slot {
        Some(slot) => Ok(Ran::Slot(slot, id, loc.queued)),
        // Cancelled in the queue before it started: the queue kept it aside.
        None if loc.queued => Ok(Ran::NeverRan(id)),
        None => Err(CliError::Usage(format!(
            "task {id} never ran (it is {}): no worker has a record of it to run again",
            loc.state
        ))
        .into()),
    }
}

/// How to run a finished task again: `conductor retry`'s options, and the MCP `retry`
/// tool's arguments.
#[derive(Debug, Default, Clone)]
pub struct Again {
    /// Continue the agent's session (its result's, or the one its log announced).
    pub resume: bool,
    /// The new task's id (default: the first free `<id>-rN`).
    pub id: Option<TaskId>,
    /// A new prompt in place of the old one.
    pub prompt: Option<String>,
}

/// Run finished task `id` again as `conductor retry` does: to the slot's inbox it was
/// sent to, or back to the shared queue it came through. Returns the new task's id.
pub fn again(client: &crate::Client, id: TaskId, how: Again) -> anyhow::Result<TaskId> {
    let ran = locate(client, id)?;
    again_from(client, ran, how)
}

fn again_from(client: &crate::Client, ran: Ran, how: Again) -> anyhow::Result<TaskId> {
    let queue = Queue::new(client.root().clone());
    let (slot, old, queued) = match ran {
        Ran::Slot(slot, id, queued) => (slot, id, queued),
        Ran::NeverRan(old) => {
            if how.resume {
                return Err(CliError::Usage(format!(
                    "task {old} never ran: there is no session to resume; retry it without --resume"
                ))
                .into());
            }
            warn_if_doomed(&queue, &old)?;
            let prompt = how.prompt;
            return Ok(queue.retry_as(&old, how.id, |t| {
                if let Some(p) = prompt {
                    t.prompt = p;
                }
            })?);
        }
    };
    let w = client.worker(slot);
    let record = w.task_record(&old);
    let bytes = fsio::read_bounded(&record, fsio::TASK_SIZE_LIMIT)?.with_context(|| {
        format!(
            "worker {slot} has no record of task {old} ({} is missing); only tasks that ran can be retried",
            record.display()
        )
    })?;
    let mut task = Task::from_bytes(&record, &bytes)?;
    let new_id = match how.id {
        Some(id) => id,
        None => next_retry_id(client, slot, &old),
    };
    task.id = Some(new_id);
    task.attempt = None;
    task.resume = None;
    if let Some(p) = how.prompt {
        task.prompt = p;
    }
    if how.resume {
        let result = client
            .read_result_for(slot, &old)?
            .with_context(|| format!("task {old} has no result on worker {slot} to resume from"))?;
        task.resume = Some(session_of(
            &result,
            &[w.task_stream(&old), w.task_log(&old)],
        )?);
    }
    Ok(if queued {
        queue.submit(&task)?
    } else {
        client.write_task(slot, &task)?
    })
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let ran = ran_where(&client, &args)?;
    let queue = Queue::new(client.root().clone());
    if args.with_dependents {
        let (old, queued) = match &ran {
            Ran::Slot(_, id, queued) => (id.clone(), *queued),
            Ran::NeverRan(id) => (id.clone(), true),
        };
        if !queued || args.resume {
            return Err(CliError::Usage(format!(
                "--with-dependents re-queues a task of the shared queue and the tasks \
                 waiting for it{}",
                if args.resume {
                    "; it does not take --resume".to_string()
                } else {
                    format!("; task {old} was sent to a slot, so nothing waits for it")
                }
            ))
            .into());
        }
        let prompt = args.prompt.clone();
        let renamed = queue.retry_with_dependents(&old, |t| {
            if let Some(p) = prompt {
                t.prompt = p;
            }
        })?;
        let mut out = String::new();
        for (old, new) in &renamed {
            out.push_str(&format!("{new}\n"));
            eprintln!("{old} → {new}");
        }
        super::emit(&out)?;
        return Ok(exit::OK);
    }
    let how = Again {
        resume: args.resume,
        id: args.id.as_deref().map(super::task_id_arg).transpose()?,
        prompt: match &ran {
            Ran::Slot(_, old, _) if args.rebase => Some(super::retry_on_top::prompt(&client, old)?),
            Ran::NeverRan(old) if args.rebase => {
                return Err(
                    CliError::Usage(format!("task {old} never ran: no branch to redo")).into(),
                )
            }
            _ => args.prompt,
        },
    };
    let id = again_from(&client, ran, how)?;
    finish(&client, id, args.wait)
}

/// Print the new task's id, or with `--wait` wait for it and print its result.
fn finish(client: &crate::Client, id: TaskId, wait: bool) -> anyhow::Result<i32> {
    if !wait {
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let carries_on = format!("task {id} carries on (`conductor wait {id}`)");
    super::waiting::finish(None, false, &carries_on, |on_death, left| {
        client.wait_for_task_with(&id, left, on_death)
    })
}

/// How much of a task's log is read for the session its agent announced (the init
/// event is its first line, a few hundred bytes).
const LOG_HEAD_BYTES: u64 = 64 * 1024;

/// The agent session a finished task can be resumed in: its result's `sessionId`, else
/// the one Claude Code announced in what it printed before it was stopped (its first
/// stream-json line, `{"type":"system","subtype":"init","session_id":…}`), in the
/// result's output or the first of `logs` that says it (the raw event stream
/// `tasks/<id>.jsonl` — the `.log` beside it holds the rendered form — then, for a task
/// of a worker that did not stream, its `.log`). Only a log's head is read: the init
/// event is the first line. When there is none, the error says why, from
/// how the task ended: a task stopped before its agent said anything has nothing to
/// resume, whatever the worker's preset.
fn session_of(result: &TaskResult, logs: &[std::path::PathBuf]) -> anyhow::Result<String> {
    if let Some(s) = &result.session_id {
        return Ok(s.clone());
    }
    let from_log = || {
        logs.iter().find_map(|log| {
            use std::io::Read;
            let mut head = Vec::new();
            let (file, _) = fsio::open_regular(log).ok()??;
            file.take(LOG_HEAD_BYTES).read_to_end(&mut head).ok()?;
            announced_session(&String::from_utf8_lossy(&head))
        })
    };
    if let Some(s) = announced_session(&result.output).or_else(from_log) {
        return Ok(s);
    }
    let id = &result.task_id;
    let why = match result.outcome {
        Some(Outcome::Interrupted | Outcome::Timeout | Outcome::Cancelled) => format!(
            "task {id} was stopped ({}) before its agent reported a session id: there is no \
             session to resume; retry it without --resume to start afresh",
            result.outcome_label().to_lowercase()
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
             or codex preset (--resume needs a worker started with --preset claude or codex)"
        ),
    };
    Err(CliError::Usage(why).into())
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

/// A queued task that never ran because a dependency failed is cancelled again at once
/// when retried alone: say so, naming the dependency and how to run the chain again
/// from the task that failed first.
fn warn_if_doomed(queue: &Queue, old: &TaskId) -> anyhow::Result<()> {
    let Some((first, reason)) = doomed_by(queue, old)? else {
        return Ok(());
    };
    // Up the chain: a dependency cancelled for its own dependency is not where it began.
    let mut from = first;
    for _ in 0..crate::protocol::MAX_AFTER * 8 {
        match doomed_by(queue, &from)? {
            Some((up, _)) => from = up,
            None => break,
        }
    }
    eprintln!(
        "warning: task {old} never ran because {reason}; its retry is cancelled at once for \
         the same reason. To run the chain again from where it failed, with what waits for \
         it: `conductor retry {from} --with-dependents`"
    );
    Ok(())
}

/// The dependency (and the reason) that keeps queued task `id` from ever running, if one
/// does: what it waited for failed or was cancelled.
fn doomed_by(queue: &Queue, id: &TaskId) -> anyhow::Result<Option<(TaskId, String)>> {
    let Some(record) = queue.task_record(id)? else {
        return Ok(None); // retry_as says what is missing
    };
    let Some(task) = Task::read(&record, fsio::TASK_SIZE_LIMIT)? else {
        return Ok(None);
    };
    Ok(match crate::queue::readiness(queue.root(), &task) {
        crate::queue::Readiness::Failed { dependency, reason } => Some((dependency, reason)),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stopped claude run: no `sessionId` and no init line in the result's output; the
    /// session is in the raw stream `tasks/<id>.jsonl`, while the `.log` beside it holds
    /// the rendered form.
    #[test]
    fn the_session_is_found_in_the_raw_stream_not_the_rendered_log() {
        let dir = tempfile::tempdir().unwrap();
        let stream = dir.path().join("t.jsonl");
        let log = dir.path().join("t.log");
        std::fs::write(
            &stream,
            "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"sess-42\"}\n",
        )
        .unwrap();
        std::fs::write(&log, "· session sess-42\n").unwrap();
        let result: TaskResult = serde_json::from_str(
            r#"{"taskId":"t","output":"","success":false,"error":"interrupted",
                "timestamp":"2026-11-23T00:00:00.000Z"}"#,
        )
        .unwrap();
        assert_eq!(session_of(&result, &[stream, log]).unwrap(), "sess-42");
    }
}
