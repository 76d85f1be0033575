//! The `logs` verb (`conductor logs`, the MCP `logs` tool): which log a task or slot has, opened, or why there is none; following one is [`super::logs_follow`].

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::fsio::{self, RESULT_SIZE_LIMIT};
use crate::inspect;
use crate::protocol::parse_result;
use crate::tasks::{self, TaskLocation, TaskState};
use crate::{Client, Error, Slot, TaskId, WorkerPaths};

/// Whose log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogsRequest {
    /// Task `id`'s, wherever it runs or ran.
    Task(TaskId),
    /// A slot's: the live `output.log` (or, when nothing runs there, its last task's kept
    /// log) with `id: None`; task `id`'s log as that slot kept it.
    Slot {
        /// The worker slot.
        slot: Slot,
        /// The task; `None`: the slot's live or last log.
        id: Option<TaskId>,
    },
}

/// Why there is no log to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoLog {
    /// The task has not run anywhere yet (it waits in the queue).
    NotStarted,
    /// The task waits in this slot's inbox.
    InInbox(Slot),
    /// The log should be this file, which is missing (never written, or collected by gc).
    Missing(PathBuf),
}

/// The answer to a [`LogsRequest`].
#[derive(Debug)]
pub struct LogsAnswer {
    /// By id: where the task is.
    pub task: Option<TaskLocation>,
    /// The slot whose log it is.
    pub slot: Option<Slot>,
    /// Whose log it is, when known (a slot's live log before its task is known: `None`).
    pub task_id: Option<TaskId>,
    /// A slot's view when nothing runs there: the log of its last task.
    pub last_task: bool,
    /// The log file and its path, opened; `Ok(None)`: a log that exists only once the
    /// agent writes (a running task, a slot that never ran anything), empty so far.
    pub log: Result<Option<(PathBuf, File)>, NoLog>,
}

/// The log `request` asks for, opened (read it whole, or its end with [`read_tail`]).
pub fn logs(client: &Client, request: &LogsRequest) -> crate::Result<LogsAnswer> {
    let root = client.root();
    match request {
        LogsRequest::Task(id) => by_id(client, id),
        LogsRequest::Slot { slot, id: Some(id) } => {
            let path = root.existing_slot(*slot)?.task_log(id);
            let log = match inspect::open_log(&path)? {
                Some(f) => Ok(Some((path, f))),
                None => Err(NoLog::Missing(path)),
            };
            Ok(LogsAnswer {
                task: None,
                slot: Some(*slot),
                task_id: Some(id.clone()),
                last_task: false,
                log,
            })
        }
        LogsRequest::Slot { slot, id: None } => {
            let paths = root.existing_slot(*slot)?;
            let (log, task_id, last_task) = slot_log(&paths)?;
            Ok(LogsAnswer {
                task: None,
                slot: Some(*slot),
                task_id,
                last_task,
                log: Ok(log),
            })
        }
    }
}

/// Task `id`'s log: the whole kept log of a finished task, what a running one has
/// written so far.
fn by_id(client: &Client, id: &TaskId) -> crate::Result<LogsAnswer> {
    let root = client.root();
    let loc = tasks::find(root, id)?.ok_or_else(|| tasks::no_such_task(root, id))?;
    let log = match (loc.state, loc.slot) {
        (_, None) | (TaskState::Queued, _) => Err(NoLog::NotStarted),
        (TaskState::Waiting, Some(slot)) => Err(NoLog::InInbox(slot)),
        (TaskState::Running, Some(slot)) => {
            let w = root.worker(slot);
            let live = inspect::open_log(&w.output_log())?.map(|f| (w.output_log(), f));
            // Its end may have come since it was found: the log then has moved (opened
            // before the move, the file is the same; after it, output.log is the next one's).
            let kept = inspect::open_log(&w.task_log(id))?.map(|f| (w.task_log(id), f));
            Ok(kept.or(live))
        }
        (_, Some(slot)) => {
            let path = root.worker(slot).task_log(id);
            match inspect::open_log(&path)? {
                Some(f) => Ok(Some((path, f))),
                None => Err(NoLog::Missing(path)),
            }
        }
    };
    Ok(LogsAnswer {
        slot: loc.slot,
        task_id: Some(id.clone()),
        task: Some(loc),
        last_task: false,
        log,
    })
}

type SlotLog = (Option<(PathBuf, File)>, Option<TaskId>, bool);

/// A slot's log: the live log of the task it runs, or once that task has ended (or
/// nothing runs), the kept log of its last task — with that task's id.
fn slot_log(paths: &WorkerPaths) -> crate::Result<SlotLog> {
    // Opened first: a task that ends after this keeps the same file under its new name.
    let live = inspect::open_log(&paths.output_log())?.map(|f| (paths.output_log(), f));
    let running = inspect::read_task_file(&paths.running()).and_then(|r| r.task_id);
    let task = running.clone().or_else(|| last_result_id(paths));
    if let Some(id) = &task {
        // Its log is kept only once it has ended.
        if let Some(kept) = inspect::open_log(&paths.task_log(id))? {
            return Ok((Some((paths.task_log(id), kept)), task, true));
        }
    }
    Ok((live, running, false))
}

/// The id `result.json` answers: the slot's last finished task.
fn last_result_id(paths: &WorkerPaths) -> Option<TaskId> {
    let bytes = fsio::read_bounded(&paths.result(), RESULT_SIZE_LIMIT).ok()??;
    parse_result(&paths.result(), &bytes)
        .ok()
        .map(|r| r.task_id)
}

impl LogsAnswer {
    /// One JSON document: where the task is (by id: as every view has it; for a slot,
    /// {"slot", "id"}), "path", "logBytes", "shownFromByte" and "text" (the log's last
    /// `tail` bytes), or a "note" saying why there is no log.
    pub fn to_json(&self, tail: u64) -> crate::Result<Value> {
        let note = match &self.log {
            Err(NoLog::NotStarted | NoLog::InInbox(_)) => {
                Some("it has not started, so it has no output yet".to_string())
            }
            Err(NoLog::Missing(path)) => Some(format!(
                "{} is missing (the task never started, or gc collected its log)",
                path.display()
            )),
            Ok(_) => None,
        };
        let mut v = match &self.task {
            Some(loc) => super::view::location_view(loc, note),
            None => {
                let mut v = json!({ "slot": self.slot.map(|s| s.0), "id": self.task_id });
                if let Some(n) = note {
                    v["note"] = json!(n);
                }
                if self.last_task {
                    v["lastTask"] = json!(true);
                }
                v
            }
        };
        match &self.log {
            Ok(Some((path, file))) => {
                let (text, total, from) =
                    read_tail(file, tail).map_err(|e| Error::io("read", path, e))?;
                v["path"] = json!(path);
                v["logBytes"] = json!(total);
                v["shownFromByte"] = json!(from);
                v["text"] = json!(text);
            }
            Ok(None) => {
                v["logBytes"] = json!(0);
                v["shownFromByte"] = json!(0);
                v["text"] = json!("");
            }
            Err(_) => {}
        }
        Ok(v)
    }
}

/// The last `tail` bytes of `file` as text (starting at a character boundary), its
/// length, and where the text starts.
pub fn read_tail(file: &File, tail: u64) -> std::io::Result<(String, u64, u64)> {
    let total = file.metadata()?.len();
    let mut from = total.saturating_sub(tail);
    let mut buf = vec![0u8; usize::try_from(total - from).unwrap_or(usize::MAX)];
    let mut got = 0;
    while got < buf.len() {
        let n = file.read_at(&mut buf[got..], from + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    // Do not start in the middle of a character.
    let skip = if from > 0 {
        buf.iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count()
    } else {
        0
    };
    from += skip as u64;
    Ok((
        String::from_utf8_lossy(&buf[skip..]).into_owned(),
        total,
        from,
    ))
}
