//! The `retry` verb (`conductor retry`, the MCP `retry` tool): run a finished task again under a new id, to the slot it was sent to or back to the shared queue, afresh or resuming its agent's session.

use crate::fsio;
use crate::queue::Queue;
use crate::{Error, Outcome, Slot, Task, TaskId, TaskResult};

/// Where a task to retry ran.
pub enum Ran {
    /// On this slot; whether it came through the queue.
    Slot(Slot, TaskId, bool),
    /// Nowhere: a queued task cancelled before it started.
    NeverRan(TaskId),
}

/// Where finished task `id` ran; refused if it has not finished or never ran anywhere
/// it could be taken again from.
pub fn locate(client: &crate::Client, id: TaskId) -> crate::Result<Ran> {
    let found = match client.find_task(&id) {
        // Its queue result is damaged and no slot keeps a whole copy: the task ended,
        // and the record its slot kept runs it again (what `doctor` advises).
        Err(damage @ Error::BadFile { .. }) => {
            return match crate::tasks::damaged::slot_of_damaged(client.root(), &id)? {
                Some(slot) => Ok(Ran::Slot(slot, id, true)),
                None => Err(damage),
            }
        }
        other => other?,
    };
    let loc = found.ok_or_else(|| Error::NoSuchTask {
        id: id.to_string(),
        root: client.root().path().to_path_buf(),
    })?;
    if !loc.state.is_finished() {
        return Err(Error::NotRetryable {
            why: format!(
                "task {id} is {}; retry runs a finished task again (`conductor wait {id}` first)",
                loc.state
            ),
        });
    }
    match loc.slot {
        Some(slot) => Ok(Ran::Slot(slot, id, loc.queued)),
        // Cancelled in the queue before it started: the queue kept it aside.
        None if loc.queued => Ok(Ran::NeverRan(id)),
        None => Err(Error::NotRetryable {
            why: format!(
                "task {id} never ran (it is {}): no worker has a record of it to run again",
                loc.state
            ),
        }),
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

/// The answer: the new task, and a warning when it cannot run either.
#[derive(Debug, Clone)]
pub struct Retried {
    /// The new task's id.
    pub id: TaskId,
    /// Why the new task will be cancelled at once (a dependency of the old one failed),
    /// and how to run its chain again: for the caller to show.
    pub warning: Option<String>,
}

/// Run finished task `id` again as `conductor retry` does: to the slot's inbox it was
/// sent to, or back to the shared queue it came through.
pub fn again(client: &crate::Client, id: TaskId, how: Again) -> crate::Result<Retried> {
    let ran = locate(client, id)?;
    again_from(client, ran, how)
}

/// [`again`] for a task already located ([`locate`], or a slot's task named by the caller).
pub fn again_from(client: &crate::Client, ran: Ran, how: Again) -> crate::Result<Retried> {
    let queue = Queue::new(client.root().clone());
    let (slot, old, queued) = match ran {
        Ran::Slot(slot, id, queued) => (slot, id, queued),
        Ran::NeverRan(old) => {
            if how.resume {
                return Err(Error::NotRetryable {
                    why: format!(
                        "task {old} never ran: there is no session to resume; retry it without --resume"
                    ),
                });
            }
            let warning = doomed_warning(&queue, &old)?;
            let prompt = how.prompt;
            let id = queue.retry_as(&old, how.id, |t| {
                if let Some(p) = prompt {
                    t.prompt = p;
                }
            })?;
            return Ok(Retried { id, warning });
        }
    };
    let w = client.worker(slot);
    let record = w.task_record(&old);
    let bytes = fsio::read_bounded(&record, fsio::TASK_SIZE_LIMIT)?.ok_or_else(|| {
        Error::RetryMissing {
            why: format!(
                "worker {slot} has no record of task {old} ({} is missing); only tasks that ran can be retried",
                record.display()
            ),
        }
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
            .ok_or_else(|| Error::RetryMissing {
                why: format!("task {old} has no result on worker {slot} to resume from"),
            })?;
        task.resume = Some(session_of(
            &result,
            &[w.task_stream(&old), w.task_log(&old)],
        )?);
    }
    let id = if queued {
        queue.submit(&task)?
    } else {
        client.write_task(slot, &task)?
    };
    Ok(Retried { id, warning: None })
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
fn session_of(result: &TaskResult, logs: &[std::path::PathBuf]) -> crate::Result<String> {
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
    Err(Error::NotRetryable { why })
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
/// when retried alone: the warning that says so, naming the dependency and how to run
/// the chain again from the task that failed first.
fn doomed_warning(queue: &Queue, old: &TaskId) -> crate::Result<Option<String>> {
    let Some((first, reason)) = doomed_by(queue, old)? else {
        return Ok(None);
    };
    // Up the chain: a dependency cancelled for its own dependency is not where it began.
    let mut from = first;
    for _ in 0..crate::protocol::MAX_AFTER * 8 {
        match doomed_by(queue, &from)? {
            Some((up, _)) => from = up,
            None => break,
        }
    }
    Ok(Some(format!(
        "warning: task {old} never ran because {reason}; its retry is cancelled at once for \
         the same reason. To run the chain again from where it failed, with what waits for \
         it: `conductor retry {from} --with-dependents`"
    )))
}

/// The dependency (and the reason) that keeps queued task `id` from ever running, if one
/// does: what it waited for failed or was cancelled.
fn doomed_by(queue: &Queue, id: &TaskId) -> crate::Result<Option<(TaskId, String)>> {
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
