//! One report per worker slot: its status and ages, the agent's and worker's pids,
//! who holds the gate and the lock, and what looks wrong: what `conductor status` shows.

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::dirlock::{self, LockOptions};
use crate::error::Result;
use crate::gate::{self, GateHolder};
use crate::host;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{parse_rfc3339, Status, TaskId, WorkerState};

use super::locks::{lock_options, LockState};
use super::task_files::{read_status, read_task_file, TaskFile};
use crate::text::{age_since, secs};

/// Something about a slot that needs a person's attention (or explains a delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Flag {
    /// `status.json` says working, but no live worker holds the slot's gate.
    DeadWorker,
    /// The slot's `.lock/` is held by a process proven gone.
    StaleLock,
    /// `running.json` is there and no live worker will ever finish it.
    OrphanedTask,
    /// `task.json` waits in the inbox.
    InboxWaiting,
}

impl fmt::Display for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flag::DeadWorker => "dead worker",
            Flag::StaleLock => "stale lock",
            Flag::OrphanedTask => "orphaned task",
            Flag::InboxWaiting => "inbox waiting",
        })
    }
}

/// Everything `conductor status` shows about one slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlotReport {
    pub slot: u32,
    pub dir: PathBuf,
    /// From `status.json`; `None` when there is none (or it is unreadable).
    pub state: Option<WorkerState>,
    pub task_id: Option<TaskId>,
    /// What that task is: its prompt's start on one line (from the task in hand, else
    /// the record the slot keeps of it).
    pub prompt_preview: Option<String>,
    /// What its agent reported it cost and how many turns it took, once it finished
    /// (claude preset).
    pub cost_usd: Option<f64>,
    pub num_turns: Option<u64>,
    /// The agent preset that ran that task (its result's `agent`) or runs it (the
    /// preset it names, else the worker's first).
    pub agent: Option<String>,
    /// The agent presets the slot's worker serves (`status.json`), its default first.
    pub presets: Vec<String>,
    /// How long the slot has been in this state: since the status was written, or
    /// while working, since the task started (the status is rewritten every heartbeat).
    #[serde(rename = "statusAgeSecs", serialize_with = "secs")]
    pub status_age: Option<Duration>,
    /// Since the last heartbeat (only while working).
    #[serde(rename = "heartbeatAgeSecs", serialize_with = "secs")]
    pub heartbeat_age: Option<Duration>,
    pub agent_pid: Option<u32>,
    /// Whether that agent process is still there (only while working).
    pub agent_alive: Option<bool>,
    /// The live gate holder's pid, else the pid `status.json` names.
    pub worker_pid: Option<u32>,
    /// A live worker holds the slot's gate (`.worker.lock`).
    pub worker_live: bool,
    /// Since when the live worker has served the slot.
    pub worker_since: Option<String>,
    /// For a worker on another host: its lease as judged from here, e.g. "alive on
    /// host b (pid 12), heartbeat 2s ago (lease 120s)" (its pid means nothing here).
    pub worker_lease: Option<String>,
    /// The host `status.json` was written on.
    pub host: Option<String>,
    /// The slot's `.lock/`, when somebody holds it.
    pub lock: Option<LockState>,
    /// `running.json`: the task in hand.
    pub running: Option<TaskFile>,
    /// `task.json`: the task waiting in the inbox.
    pub inbox: Option<TaskFile>,
    /// The finished task's branch and diffstat, when it ran in a worktree of its own
    /// (its result's `worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::protocol::WorktreeChange>,
    /// The tool calls the finished task's agent was refused (its result's `denials`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<crate::protocol::Denial>,
    /// What the running task's agent asks a person to allow (`conductor approve|deny`),
    /// while it waits for the answer: the slot `needs approval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::protocol::approval::Question>,
    /// Why the slot's last task was refused (its result's outcome is `rejected`: a
    /// file that was no task, say one written by hand).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    pub flags: Vec<Flag>,
    /// Files that could not be read, in words.
    pub problems: Vec<String>,
}

/// A slot's files as read, before they are judged. Read errors become `problems`: a
/// report is still made from whatever could be read.
struct SlotFiles {
    status: Option<Status>,
    gate_holder: Option<GateHolder>,
    lock: Option<LockState>,
    running: Option<TaskFile>,
    inbox: Option<TaskFile>,
    problems: Vec<String>,
}

fn noted<T: Default>(r: Result<T>, problems: &mut Vec<String>) -> T {
    r.unwrap_or_else(|e| {
        problems.push(e.to_string());
        T::default()
    })
}

impl SlotFiles {
    fn read(paths: &WorkerPaths, opts: &LockOptions) -> SlotFiles {
        let mut problems = Vec::new();
        let status = noted(read_status(paths), &mut problems);
        let gate_holder = noted(gate::probe(&paths.worker_gate()), &mut problems);
        let lock = noted(dirlock::inspect(&paths.lock_dir(), opts), &mut problems)
            .as_ref()
            .map(LockState::from);
        let running = read_task_file(&paths.running());
        let inbox = read_task_file(&paths.task());
        // The problem texts name their file. (task.json may just be mid-write by a
        // non-atomic client; still worth saying.)
        for f in [&running, &inbox].into_iter().flatten() {
            if let Some(p) = &f.problem {
                problems.push(p.clone());
            }
        }
        // What the worker itself says keeps it from its work (e.g. a full disk).
        if let Some(p) = status.as_ref().and_then(|s| s.problem.clone()) {
            problems.push(format!("worker says: {p}"));
        }
        SlotFiles {
            status,
            gate_holder,
            lock,
            running,
            inbox,
            problems,
        }
    }
}

/// How long the slot has been in its state, and (while working) since the last
/// heartbeat. A working status is rewritten at every heartbeat: its age is the task's.
fn status_ages(status: &Status, paths: &WorkerPaths) -> (Option<Duration>, Option<Duration>) {
    let working = status.status == WorkerState::Working;
    let status_age = status
        .started_at
        .as_deref()
        .filter(|_| working)
        .and_then(parse_rfc3339)
        .or_else(|| parse_rfc3339(&status.timestamp))
        .or_else(|| fs::metadata(paths.status()).and_then(|m| m.modified()).ok())
        .map(age_since);
    let heartbeat_age = status
        .heartbeat_at
        .as_deref()
        .or(status.started_at.as_deref())
        .filter(|_| working)
        .and_then(parse_rfc3339)
        .map(age_since);
    (status_age, heartbeat_age)
}

/// What needs attention. `other_host`: the status was written on another host, so
/// probing our gate says nothing about its worker.
fn judge(files: &SlotFiles, worker_live: bool, other_host: bool) -> Vec<Flag> {
    let working = files
        .status
        .as_ref()
        .is_some_and(|s| s.status == WorkerState::Working);
    let mut flags = Vec::new();
    if working && !worker_live && !other_host {
        flags.push(Flag::DeadWorker);
    }
    if files.lock.as_ref().is_some_and(|l| l.stale) {
        flags.push(Flag::StaleLock);
    }
    if files.running.is_some() && !worker_live && !other_host {
        flags.push(Flag::OrphanedTask);
    }
    if files.inbox.is_some() {
        flags.push(Flag::InboxWaiting);
    }
    flags
}

/// Build the report for one slot (which must exist).
pub fn slot_report(root: &Root, slot: Slot, opts: &LockOptions) -> Result<SlotReport> {
    let paths = root.worker(slot);
    let mut files = SlotFiles::read(&paths, opts);
    let worker_live = files.gate_holder.is_some();
    let status_host = files.status.as_ref().and_then(|s| s.host.clone());
    let other_host = written_elsewhere(files.status.as_ref());
    if let Some(note) = waiting_for_space(files.gate_holder.as_ref(), &paths) {
        files.problems.push(note);
    }
    let flags = judge(&files, worker_live, other_host);
    let status = files.status.take();
    let status = status.as_ref();
    let working = status.filter(|s| s.status == WorkerState::Working);
    let (status_age, heartbeat_age) = status.map_or((None, None), |s| status_ages(s, &paths));
    if other_host && !worker_live {
        files.problems.push(format!(
            "status.json was written on host {}; whether its worker lives cannot be checked from here",
            status_host.as_deref().unwrap_or_default()
        ));
    }
    let task_id = status.and_then(|s| s.task_id.clone());
    let (prompt_preview, result) = task_details(&paths, task_id.as_ref(), &files);
    let (cost_usd, num_turns) = (
        result.as_ref().and_then(|r| r.cost_usd),
        result.as_ref().and_then(|r| r.num_turns),
    );
    let rejected = result
        .as_ref()
        .filter(|r| r.outcome == Some(crate::protocol::Outcome::Rejected))
        .map(|r| r.error.clone().unwrap_or_else(|| "rejected".into()));
    let (ran_by, worktree, denials) = result.map_or((None, None, Vec::new()), |r| {
        (r.agent, r.worktree, r.denials)
    });
    let presets = status.map(|s| s.presets.clone()).unwrap_or_default();
    let agent = match working {
        Some(_) => agent_in_hand(&files, task_id.as_ref(), &presets),
        None => ran_by,
    };
    let approval = working
        .and_then(|s| s.task_id.as_ref())
        .and_then(|id| crate::protocol::approval::question_of(&paths.dir, id));
    Ok(SlotReport {
        slot: slot.0,
        dir: paths.dir.clone(),
        state: status.map(|s| s.status),
        task_id,
        prompt_preview,
        cost_usd,
        num_turns,
        agent,
        presets,
        status_age,
        heartbeat_age,
        agent_pid: working.and_then(|s| s.agent_pid),
        agent_alive: working.filter(|_| !other_host).and_then(|s| {
            s.agent_pid
                .map(|p| host::same_process_alive(p, s.agent_start_time))
        }),
        worker_pid: worker_pid(files.gate_holder.as_ref(), status),
        worker_live,
        worker_lease: files.gate_holder.as_ref().and_then(|g| g.lease.clone()),
        worker_since: files.gate_holder.map(|g| g.since).filter(|s| !s.is_empty()),
        host: status_host,
        lock: files.lock,
        running: files.running,
        inbox: files.inbox,
        worktree,
        denials,
        approval,
        rejected,
        flags,
        problems: files.problems,
    })
}

/// Whether `status.json` was written on another host (by its host id, else its name):
/// its pids mean nothing here, and only its lease (the gate probe) says whether its
/// worker lives.
fn written_elsewhere(status: Option<&Status>) -> bool {
    status.is_some_and(|s| {
        (s.host_id.is_some() || s.host.as_deref().is_some_and(|h| !h.is_empty()))
            && !host::is_this_host(s.host_id.as_deref(), s.host.as_deref())
    })
}

/// The agent of the working task `task_id`: the one its task file names, else the
/// worker's first preset.
fn agent_in_hand(
    files: &SlotFiles,
    task_id: Option<&TaskId>,
    presets: &[String],
) -> Option<String> {
    files
        .running
        .as_ref()
        .filter(|f| f.task_id.is_some() && f.task_id.as_ref() == task_id)
        .and_then(|f| f.agent.clone())
        .or_else(|| presets.first().cloned())
}

/// The worker's pid: the gate holder's (0 is a holder with no record), else the status's.
fn worker_pid(holder: Option<&GateHolder>, status: Option<&Status>) -> Option<u32> {
    holder
        .map(|g| g.pid)
        .filter(|p| *p != 0)
        .or_else(|| status.and_then(|s| s.worker_pid))
}

/// A worker started on a full disk holds the gate by its flock alone until space
/// returns ([`gate::hold_waiting`]): its record says so, or, where even that found no
/// room, the gate is held with no record while the disk is too full to start.
fn waiting_for_space(holder: Option<&GateHolder>, paths: &WorkerPaths) -> Option<String> {
    let h = holder?;
    if gate::is_waiting(h) {
        return Some(format!(
            "worker pid {} is {}: it serves the slot once space is freed",
            h.pid,
            gate::WAITING_FOR_SPACE
        ));
    }
    let full = (h.pid == 0).then(|| crate::fsio::space::too_full_to_accept(&paths.dir))??;
    Some(format!("{}: {full}", gate::WAITING_FOR_SPACE))
}

/// The preview of task `id`'s prompt, and its result if it finished.
/// Only files of this slot are read: the task in hand, else the slot's record of it.
fn task_details(
    paths: &WorkerPaths,
    id: Option<&TaskId>,
    files: &SlotFiles,
) -> (Option<String>, Option<crate::protocol::TaskResult>) {
    let Some(id) = id else {
        return (None, None);
    };
    let in_hand = files
        .running
        .as_ref()
        .filter(|f| f.task_id.as_ref() == Some(id))
        .and_then(|f| f.prompt_preview.clone());
    let preview = in_hand.or_else(|| {
        (id.validate().is_ok())
            .then(|| read_task_file(&paths.task_record(id)))
            .flatten()
            .and_then(|f| f.prompt_preview)
    });
    let result = id
        .validate()
        .ok()
        .and_then(|()| crate::protocol::TaskResult::read(&paths.result_for(id)).ok())
        .flatten();
    (preview, result)
}

/// Reports for every slot under the root (or only `only`, which must exist).
pub fn slot_reports(root: &Root, only: Option<Slot>) -> Result<Vec<SlotReport>> {
    let opts = lock_options(root);
    let slots = match only {
        Some(s) => {
            root.existing_slot(s)?;
            vec![s]
        }
        None => root.slots()?,
    };
    slots
        .into_iter()
        .map(|s| slot_report(root, s, &opts))
        .collect()
}
