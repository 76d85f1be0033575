//! `.agent.json`: which process runs a slot's task, written before that process may
//! run at all, so recovery can always find (and stop) it.
//!
//! The agent's child process writes it itself, after the clone and before exec, so the
//! agent never runs unrecorded (see `crate::agent::spawn`).
//! It is the cheapest record that can be: one in-place write to a file kept for it,
//! not fsynced — a power loss leaves no process behind to find. `status.json` names
//! the agent too, but is published after the agent starts, off the pickup path.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::schema::{check_schema, SCHEMA};
use super::task_id::TaskId;
use crate::error::Result;
use crate::fsio;

/// The fixed length of a record (a task id is at most 128 characters).
pub const RECORD_LEN: usize = 256;
/// Width of the pid field: any `u32` in decimal.
const PID_WIDTH: usize = 10;

/// The agent a slot's task runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    #[serde(default)]
    pub schema: u32,
    pub task_id: TaskId,
    pub agent_pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_start_time: Option<u64>,
    /// `host::host_id()` of the worker that started it: the pid is this host's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
}

impl AgentRecord {
    /// A record of this host (the agent's child writes its own with [`Self::template`];
    /// the tests make them whole).
    pub fn new(task_id: TaskId, agent_pid: u32, agent_start_time: Option<u64>) -> AgentRecord {
        AgentRecord {
            schema: SCHEMA,
            task_id,
            agent_pid,
            agent_start_time,
            host_id: Some(crate::host::host_id().to_string()),
        }
    }

    /// The record as written: always [`RECORD_LEN`] bytes (padded with spaces), so
    /// an overwrite in place leaves nothing of an older one.
    pub fn encode(&self) -> Vec<u8> {
        let (mut bytes, pid_at) = AgentRecord::template(&self.task_id);
        AgentRecord::fill_pid(&mut bytes, pid_at, self.agent_pid);
        bytes
    }

    /// A record for `task_id` with its pid field blank, and where that field starts:
    /// the agent's child process fills in its own pid between the clone and exec, where
    /// it may not allocate (see `crate::agent::spawn`). No start time: recovery then trusts the
    /// pid only with our uid and the task's marker in its environment.
    pub fn template(task_id: &TaskId) -> (Vec<u8>, usize) {
        let id = serde_json::to_string(task_id).expect("a task id serializes");
        let host = crate::host::host_id();
        let head =
            format!("{{\"schema\":{SCHEMA},\"taskId\":{id},\"hostId\":\"{host}\",\"agentPid\":");
        let pid_at = head.len();
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&[b' '; PID_WIDTH]);
        bytes.push(b'}');
        bytes.resize(RECORD_LEN - 1, b' ');
        bytes.push(b'\n');
        (bytes, pid_at)
    }

    /// Write `pid` right-aligned into the blank field at `at` (spaces are JSON
    /// whitespace before the number). No allocation and no panic: this runs in the
    /// agent's child before exec. A field outside `bytes` is left alone (`false`).
    pub fn fill_pid(bytes: &mut [u8], at: usize, mut pid: u32) -> bool {
        let Some(field) = at
            .checked_add(PID_WIDTH)
            .and_then(|end| bytes.get_mut(at..end))
        else {
            return false;
        };
        let mut i = PID_WIDTH;
        while i > 0 {
            i -= 1;
            field[i] = b'0' + (pid % 10) as u8;
            pid /= 10;
            if pid == 0 {
                break;
            }
        }
        true
    }

    /// Write it in place (no rename, no fsync), as the agent's child does.
    pub fn write(&self, path: &Path) -> Result<()> {
        fsio::overwrite_padded(path, &self.encode())
    }

    /// Read it; `None` when there is none. The schema is always checked.
    pub fn read(path: &Path) -> Result<Option<AgentRecord>> {
        let Some(bytes) = fsio::read_bounded(path, fsio::SMALL_FILE_LIMIT)? else {
            return Ok(None);
        };
        let record: AgentRecord = fsio::parse_json(path, &bytes)?;
        check_schema(path, record.schema)?;
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_whatever_was_there_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".agent.json");
        let long = "x".repeat(128);
        AgentRecord::new(TaskId::from(long.as_str()), 4_294_967_295, None)
            .write(&path)
            .unwrap();
        let short = AgentRecord::new(TaskId::from(7u64), 12, None);
        short.write(&path).unwrap();
        assert_eq!(AgentRecord::read(&path).unwrap(), Some(short));
        assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, RECORD_LEN);
    }

    #[test]
    fn the_pid_is_filled_in_place() {
        let (mut bytes, at) = AgentRecord::template(&TaskId::from("t1"));
        AgentRecord::fill_pid(&mut bytes, at, 4711);
        let r: AgentRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((r.agent_pid, r.task_id), (4711, TaskId::from("t1")));
    }
}
