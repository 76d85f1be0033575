//! A worker slot's `status.json`: its state, the task in hand, its heartbeat.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::schema::{check_schema, lenient_timestamp, schema_v1, SCHEMA};
use super::task_id::TaskId;
use super::time::now_rfc3339;
use crate::error::{Error, Result};

/// A worker's state as published in `status.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Waiting for a task.
    Idle,
    /// Running a task.
    Working,
    /// Its last task ended; `result.json` holds the result.
    Done,
    /// Its last task failed, or the worker cannot work (see `problem`).
    Error,
}

impl fmt::Display for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkerState::Idle => "idle",
            WorkerState::Working => "working",
            WorkerState::Done => "done",
            WorkerState::Error => "error",
        })
    }
}

/// `status.json`: written only by the worker serving the slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The file format version (1).
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// The state.
    pub status: WorkerState,
    /// The task in hand (or last ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// When it was written (RFC 3339).
    #[serde(default, deserialize_with = "lenient_timestamp")]
    pub timestamp: String,
    /// When the task in hand started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// The worker's last sign of life while it works (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<String>,
    /// The agent's process id while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_pid: Option<u32>,
    /// The agent's process start time (clock ticks since boot), so a restarted
    /// worker can tell a leftover agent from an unrelated process that reused its pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_start_time: Option<u64>,
    /// The worker's process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// The host the worker runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `host::host_id()` of the worker: its pids mean something only on that host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// Which attempt of the task in hand this is, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// How much output the agent has written so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// What keeps the worker from its work right now (e.g. a full disk), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The agent presets the serving worker runs (its first is the default for tasks
    /// naming none); stamped by the worker, so waits can tell a task nobody can serve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub presets: Vec<String>,
}

impl Status {
    /// A bare status in `state`, stamped now.
    pub fn new(state: WorkerState) -> Status {
        Status {
            schema: SCHEMA,
            status: state,
            task_id: None,
            timestamp: now_rfc3339(),
            started_at: None,
            heartbeat_at: None,
            agent_pid: None,
            agent_start_time: None,
            worker_pid: None,
            host: None,
            host_id: None,
            attempt: None,
            output_bytes: None,
            problem: None,
            presets: Vec::new(),
        }
    }
}

/// Parse a status file's bytes, refusing newer schemas.
pub fn parse_status(path: &Path, bytes: &[u8]) -> Result<Status> {
    let s: Status = crate::fsio::parse_json(path, bytes)?;
    check_schema(path, s.schema)?;
    Ok(s)
}

impl Status {
    /// Read a `status.json`; `None` when there is none. The schema is always checked:
    /// recovery acts on what this file names (it kills the agent group it records).
    ///
    /// A status is replaced by swapping names with its second one, which the write after
    /// next rewrites in place: a reader that opened it just before one write and read it
    /// during the next could see it torn. One that does not parse is read again (a few
    /// times) before it counts as malformed.
    pub fn read(path: &Path) -> Result<Option<Status>> {
        let mut tries = 0;
        loop {
            let read = crate::fsio::read_bounded(path, crate::fsio::SMALL_FILE_LIMIT)?
                .map(|b| parse_status(path, &b))
                .transpose();
            match read {
                Err(Error::BadFile { .. }) if tries < 3 => {
                    tries += 1;
                    std::thread::yield_now();
                }
                other => return other,
            }
        }
    }
}
