//! Reading a root's state for people and tools: one report per worker slot (status,
//! ages, pids, who holds the gate and the lock, what looks stale), every lock under the
//! root, the task a slot is busy with, and following `output.log` like `tail -F`.
//!
//! Nothing here writes: these are the facts `conductor status`, `conductor locks`,
//! `conductor wait` and `conductor logs` print.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, Receiver};
use nix::fcntl::OFlag;
use serde::{Serialize, Serializer};

use crate::config::Config;
use crate::dirlock::{self, Holder, Liveness, LockOptions};
use crate::error::{Error, Result};
use crate::fsio::{self, SMALL_FILE_LIMIT, TASK_SIZE_LIMIT};
use crate::gate::{self, GateHolder};
use crate::host;
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{parse_rfc3339, parse_status, Status, Task, TaskId, WorkerState};
use crate::watch::{DirWatcher, WatchMode, WatcherKind};

/// The root's lock timings from `config.json`; the defaults when it is missing or
/// unreadable (a broken config must not stop anyone from looking at the state).
pub fn lock_options(root: &Root) -> LockOptions {
    match Config::load(&root.config_file()) {
        Ok(c) => c.lock_options(),
        Err(e) => {
            tracing::warn!("using default lock timings: {e}");
            LockOptions::default()
        }
    }
}

/// How long ago `t` was (zero for times in the future).
pub fn age_since(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// An age for people: `3s`, `4m`, `2h`, `3d`.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A size for people: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Durations in JSON: seconds with millisecond precision.
pub(crate) fn secs<S: Serializer>(
    d: &Option<Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64((d.as_millis() as f64) / 1000.0),
        None => s.serialize_none(),
    }
}

/// Something about a slot that needs a person's attention (or explains a delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
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

impl Flag {
    /// What to do about it, for slot `slot`.
    pub fn fix(&self, slot: Slot) -> String {
        match self {
            Flag::DeadWorker | Flag::OrphanedTask => format!(
                "start `conductor-worker {slot} DIR` again (it recovers the slot) or run `conductor recover {slot}`"
            ),
            Flag::StaleLock => format!(
                "`conductor recover {slot}` or `conductor locks clean --apply` removes it"
            ),
            Flag::InboxWaiting => format!(
                "a worker picks it up; if none serves slot {slot}, start `conductor-worker {slot} DIR`"
            ),
        }
    }
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

/// A task file in a slot (`running.json` or `task.json`): its id if readable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskFile {
    pub task_id: Option<TaskId>,
    /// Why the file could not be read as a task, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Read the id of a task file; `None` when there is no such file.
pub fn read_task_file(path: &Path) -> Option<TaskFile> {
    match fsio::read_bounded(path, TASK_SIZE_LIMIT) {
        Ok(None) => None,
        Ok(Some(bytes)) => Some(match Task::from_bytes(path, &bytes) {
            Ok(t) => TaskFile {
                task_id: t.id,
                problem: None,
            },
            Err(e) => TaskFile {
                task_id: Task::salvage_id(&bytes),
                problem: Some(e.to_string()),
            },
        }),
        Err(e) => Some(TaskFile {
            task_id: None,
            problem: Some(e.to_string()),
        }),
    }
}

/// Who holds a directory lock, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockState {
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub acquired_at: Option<String>,
    #[serde(rename = "ageSecs", serialize_with = "secs")]
    pub age: Option<Duration>,
    pub stale: bool,
    /// The liveness verdict in words ("holder pid 812 is dead").
    pub reason: String,
}

impl From<&Holder> for LockState {
    fn from(h: &Holder) -> LockState {
        let (stale, reason) = match &h.liveness {
            Liveness::Alive(why) => (false, why.clone()),
            Liveness::Stale(why) => (true, why.clone()),
        };
        let acquired_at = h.owner.as_ref().map(|o| o.acquired_at.clone());
        LockState {
            pid: h.pid,
            host: h.owner.as_ref().map(|o| o.host.clone()),
            age: acquired_at
                .as_deref()
                .and_then(parse_rfc3339)
                .map(age_since),
            acquired_at,
            stale,
            reason,
        }
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
    /// The host `status.json` was written on.
    pub host: Option<String>,
    /// The slot's `.lock/`, when somebody holds it.
    pub lock: Option<LockState>,
    /// `running.json`: the task in hand.
    pub running: Option<TaskFile>,
    /// `task.json`: the task waiting in the inbox.
    pub inbox: Option<TaskFile>,
    pub flags: Vec<Flag>,
    /// Files that could not be read, in words.
    pub problems: Vec<String>,
}

/// Build the report for one slot (which must exist).
pub fn slot_report(root: &Root, slot: Slot, opts: &LockOptions) -> Result<SlotReport> {
    let paths = root.worker(slot);
    let mut problems = Vec::new();

    let status: Option<Status> = match fsio::read_bounded(&paths.status(), SMALL_FILE_LIMIT)
        .and_then(|b| b.map(|b| parse_status(&paths.status(), &b)).transpose())
    {
        Ok(s) => s,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let gate_holder: Option<GateHolder> = match gate::probe(&paths.worker_gate()) {
        Ok(h) => h,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let lock = match dirlock::inspect(&paths.lock_dir(), opts) {
        Ok(h) => h.as_ref().map(LockState::from),
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    let running = read_task_file(&paths.running());
    let inbox = read_task_file(&paths.task());
    // The problem texts name their file. (task.json may just be mid-write by a
    // non-atomic client; still worth saying.)
    for f in [&running, &inbox].into_iter().flatten() {
        if let Some(p) = &f.problem {
            problems.push(p.clone());
        }
    }

    let worker_live = gate_holder.is_some();
    let state = status.as_ref().map(|s| s.status);
    let working = state == Some(WorkerState::Working);
    // A working status is rewritten at every heartbeat: its age is the task's.
    let status_age = status.as_ref().and_then(|s| {
        s.started_at
            .as_deref()
            .filter(|_| working)
            .and_then(parse_rfc3339)
            .or_else(|| parse_rfc3339(&s.timestamp))
            .or_else(|| fs::metadata(paths.status()).and_then(|m| m.modified()).ok())
            .map(age_since)
    });
    let heartbeat_age = status.as_ref().filter(|_| working).and_then(|s| {
        s.heartbeat_at
            .as_deref()
            .or(s.started_at.as_deref())
            .and_then(parse_rfc3339)
            .map(age_since)
    });
    let agent_pid = status
        .as_ref()
        .and_then(|s| s.agent_pid)
        .filter(|_| working);
    let agent_alive = status.as_ref().filter(|_| working).and_then(|s| {
        s.agent_pid
            .map(|p| host::same_process_alive(p, s.agent_start_time))
    });
    let worker_pid = gate_holder
        .as_ref()
        .map(|g| g.pid)
        .filter(|p| *p != 0)
        .or_else(|| status.as_ref().and_then(|s| s.worker_pid));
    let status_host = status.as_ref().and_then(|s| s.host.clone());
    // A status written on another host cannot be judged by probing our gate.
    let other_host = status_host
        .as_deref()
        .is_some_and(|h| !h.is_empty() && h != host::hostname());

    let mut flags = Vec::new();
    if working && !worker_live && !other_host {
        flags.push(Flag::DeadWorker);
    }
    if lock.as_ref().is_some_and(|l| l.stale) {
        flags.push(Flag::StaleLock);
    }
    if running.is_some() && !worker_live && !other_host {
        flags.push(Flag::OrphanedTask);
    }
    if inbox.is_some() {
        flags.push(Flag::InboxWaiting);
    }
    if other_host && !worker_live {
        problems.push(format!(
            "status.json was written on host {}; whether its worker lives cannot be checked from here",
            status_host.as_deref().unwrap_or_default()
        ));
    }

    Ok(SlotReport {
        slot: slot.0,
        dir: paths.dir.clone(),
        state,
        task_id: status.as_ref().and_then(|s| s.task_id.clone()),
        status_age,
        heartbeat_age,
        agent_pid,
        agent_alive,
        worker_pid,
        worker_live,
        worker_since: gate_holder.map(|g| g.since).filter(|s| !s.is_empty()),
        host: status_host,
        lock,
        running,
        inbox,
        flags,
        problems,
    })
}

/// Reports for every slot under the root (or only `only`, which must exist).
pub fn slot_reports(root: &Root, only: Option<Slot>) -> Result<Vec<SlotReport>> {
    let opts = lock_options(root);
    let slots = match only {
        Some(s) => {
            require_slot(root, s)?;
            vec![s]
        }
        None => list_slots(root)?,
    };
    slots
        .into_iter()
        .map(|s| slot_report(root, s, &opts))
        .collect()
}

/// The slot numbers under `workers/`, in order (other names are skipped).
pub fn list_slots(root: &Root) -> Result<Vec<Slot>> {
    crate::client::Client::new(root.clone()).list_workers()
}

/// The slot's paths, or a usage error naming the root if the slot does not exist.
pub fn require_slot(root: &Root, slot: Slot) -> Result<WorkerPaths> {
    let w = root.worker(slot);
    if w.dir.is_dir() {
        Ok(w)
    } else {
        Err(Error::Usage(format!(
            "no worker slot {slot} under {} (create it with `conductor create-worker {slot}`)",
            root.path().display()
        )))
    }
}

/// Where the id of a slot's current task was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskSource {
    /// `running.json`: claimed and running.
    Running,
    /// `status.json` says working on it.
    Status,
    /// `task.json`: waiting in the inbox.
    Inbox,
}

impl fmt::Display for TaskSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskSource::Running => "running",
            TaskSource::Status => "working on (status.json)",
            TaskSource::Inbox => "waiting in the inbox",
        })
    }
}

/// The id of the task a slot is running (from `running.json`), if any.
pub fn running_task(root: &Root, slot: Slot) -> Option<TaskId> {
    read_task_file(&root.worker(slot).running()).and_then(|f| f.task_id)
}

/// The slot's current task: the running one (`running.json`), else the one
/// `status.json` says it works on, else the one waiting in the inbox.
pub fn current_task(root: &Root, slot: Slot) -> Result<Option<(TaskId, TaskSource)>> {
    let paths = require_slot(root, slot)?;
    if let Some(id) = running_task(root, slot) {
        return Ok(Some((id, TaskSource::Running)));
    }
    let status: Option<Status> = fsio::read_bounded(&paths.status(), SMALL_FILE_LIMIT)?
        .map(|b| parse_status(&paths.status(), &b))
        .transpose()?;
    if let Some(s) = status.filter(|s| s.status == WorkerState::Working) {
        if let Some(id) = s.task_id {
            return Ok(Some((id, TaskSource::Status)));
        }
    }
    Ok(read_task_file(&paths.task())
        .and_then(|f| f.task_id)
        .map(|id| (id, TaskSource::Inbox)))
}

/// What kind of lock an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// `workers/<N>/.lock/`: held while a worker has a task in hand.
    Task,
    /// `keys/<key>.lock/`: one running task per key.
    Key,
    /// `slots/<i>.lock/`: the global cap on running agents.
    RunSlot,
    /// A flock gate: `workers/<N>/.worker.lock` or `.locks/<name>`.
    Gate,
    /// A lock directory parked between tasks as `<lock>.spare.<pid>`.
    Spare,
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockKind::Task => "task",
            LockKind::Key => "key",
            LockKind::RunSlot => "run-slot",
            LockKind::Gate => "gate",
            LockKind::Spare => "spare",
        })
    }
}

/// Whether a lock's holder is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockStatus {
    Alive,
    Stale,
    /// A gate file nobody holds (gates are never stale: the kernel drops them).
    Free,
}

impl fmt::Display for LockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockStatus::Alive => "alive",
            LockStatus::Stale => "stale",
            LockStatus::Free => "free",
        })
    }
}

/// One lock under the root, as `conductor locks` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockEntry {
    pub kind: LockKind,
    /// `worker 0`, `key alice`, `run-slot 3`, `.locks/launcher` …
    pub name: String,
    pub path: PathBuf,
    pub status: LockStatus,
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub acquired_at: Option<String>,
    #[serde(rename = "ageSecs", serialize_with = "secs")]
    pub age: Option<Duration>,
    /// Why it is judged alive, stale or free.
    pub reason: String,
}

impl LockEntry {
    fn from_holder(kind: LockKind, name: String, h: &Holder) -> LockEntry {
        let st = LockState::from(h);
        LockEntry {
            kind,
            name,
            path: h.path.clone(),
            status: if st.stale {
                LockStatus::Stale
            } else {
                LockStatus::Alive
            },
            pid: st.pid,
            host: st.host,
            acquired_at: st.acquired_at,
            age: st.age,
            reason: st.reason,
        }
    }

    fn gate(name: String, path: &Path) -> Result<LockEntry> {
        let holder = gate::probe(path)?;
        Ok(match holder {
            Some(g) => {
                let pid = Some(g.pid).filter(|p| *p != 0);
                let since = Some(g.since).filter(|s| !s.is_empty());
                LockEntry {
                    kind: LockKind::Gate,
                    name,
                    path: path.to_path_buf(),
                    status: LockStatus::Alive,
                    pid,
                    host: Some(g.host).filter(|h| !h.is_empty()),
                    age: since.as_deref().and_then(parse_rfc3339).map(age_since),
                    acquired_at: since,
                    reason: match pid {
                        Some(p) if g.role.is_empty() => format!("flock held by live pid {p}"),
                        Some(p) => format!("flock held by live pid {p} ({})", g.role),
                        None => "flock held (holder not recorded yet)".to_string(),
                    },
                }
            }
            None => LockEntry {
                kind: LockKind::Gate,
                name,
                path: path.to_path_buf(),
                status: LockStatus::Free,
                pid: None,
                host: None,
                acquired_at: None,
                age: None,
                reason: "not held".to_string(),
            },
        })
    }
}

/// Entries of `dir` (sorted by name); a missing directory has none.
pub(crate) fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue; // gone meanwhile
        };
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
            meta,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The parked spares (`<lock>.spare.<pid>`) in `dir`, with the pid each names.
pub fn spares_in(dir: &Path) -> Result<Vec<(PathBuf, u32)>> {
    Ok(sorted_entries(dir)?
        .into_iter()
        .filter(|(_, _, m)| m.is_dir())
        .filter_map(|(name, path, _)| {
            let (base, pid) = name.rsplit_once(".spare.")?;
            (base.ends_with(".lock") || base == ".lock")
                .then_some(())
                .and(pid.parse::<u32>().ok())
                .map(|pid| (path, pid))
        })
        .collect())
}

fn spare_entry(name: String, path: PathBuf, pid: u32) -> LockEntry {
    let alive = host::pid_alive(pid);
    LockEntry {
        kind: LockKind::Spare,
        name,
        path,
        status: if alive {
            LockStatus::Alive
        } else {
            LockStatus::Stale
        },
        pid: Some(pid),
        host: None,
        acquired_at: None,
        age: None,
        reason: if alive {
            format!("parked between tasks by live pid {pid}")
        } else {
            format!("parked by pid {pid}, which is dead")
        },
    }
}

/// Directory locks (`<name>.lock/`) in `dir`: `keys/` or `slots/`.
fn dir_locks_in(
    dir: &Path,
    kind: LockKind,
    opts: &LockOptions,
    out: &mut Vec<LockEntry>,
) -> Result<()> {
    for (name, path, meta) in sorted_entries(dir)? {
        let Some(base) = name.strip_suffix(".lock") else {
            continue;
        };
        if !meta.is_dir() || base.is_empty() {
            continue;
        }
        if let Some(h) = dirlock::inspect(&path, opts)? {
            out.push(LockEntry::from_holder(kind, format!("{kind} {base}"), &h));
        }
    }
    for (path, pid) in spares_in(dir)? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = name.split(".lock.spare.").next().unwrap_or_default();
        out.push(spare_entry(format!("{kind} {base} (pid {pid})"), path, pid));
    }
    Ok(())
}

/// Every lock under the root: each worker's `.lock`, gate and parked spares,
/// `keys/*.lock`, `slots/*.lock` and the gates in `.locks/`.
pub fn list_locks(root: &Root, opts: &LockOptions) -> Result<Vec<LockEntry>> {
    let mut out = Vec::new();
    for slot in list_slots(root)? {
        let w = root.worker(slot);
        if let Some(h) = dirlock::inspect(&w.lock_dir(), opts)? {
            out.push(LockEntry::from_holder(
                LockKind::Task,
                format!("worker {slot}"),
                &h,
            ));
        }
        if fs::symlink_metadata(w.worker_gate()).is_ok() {
            out.push(LockEntry::gate(format!("worker {slot}"), &w.worker_gate())?);
        }
        for (path, pid) in spares_in(&w.dir)? {
            out.push(spare_entry(format!("worker {slot} (pid {pid})"), path, pid));
        }
    }
    dir_locks_in(&root.keys_dir(), LockKind::Key, opts, &mut out)?;
    dir_locks_in(&root.slots_dir(), LockKind::RunSlot, opts, &mut out)?;
    for (name, path, meta) in sorted_entries(&root.gates_dir())? {
        if meta.is_file() && !name.ends_with(".guard") && !name.ends_with(".tmp") {
            out.push(LockEntry::gate(format!(".locks/{name}"), &path)?);
        }
    }
    Ok(out)
}

/// Open a log file for reading: no symlinks, regular files only. `None` if missing.
pub fn open_log(path: &Path) -> Result<Option<File>> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(Error::bad(path, crate::error::FileProblem::Symlink))
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let meta = f.metadata().map_err(|e| Error::io("stat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::bad(path, crate::error::FileProblem::NotRegular));
    }
    Ok(Some(f))
}

/// Follows a file by name, like `tail -F`: reads what is appended, and when the name
/// comes to mean a new file (the worker moves `output.log` to `tasks/<id>.log` after
/// each task and starts a fresh one) finishes the old file and continues with the new
/// one from its start. A truncated file is read again from its start.
///
/// Wake-ups come from a [`DirWatcher`] on the file's directory ([`LogFollower::wake`]);
/// call [`LogFollower::next_chunk`] until it returns `None` after each one.
pub struct LogFollower {
    path: PathBuf,
    file: Option<(File, (u64, u64))>,
    pos: u64,
    watcher: DirWatcher,
    wake: Receiver<()>,
}

impl fmt::Debug for LogFollower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFollower")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish()
    }
}

const FOLLOW_CHUNK: usize = 64 * 1024;

impl LogFollower {
    /// Follow `path` from the start of the file it names now (if any). The watcher is
    /// armed before the first read, so nothing written afterwards can be missed.
    pub fn new(path: &Path, mode: WatchMode) -> Result<LogFollower> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| Error::Usage(format!("{} does not name a file", path.display())))?;
        let (tx, wake) = bounded(1);
        let interest: crate::watch::Interest =
            Arc::new(move |p: &Path| p.file_name() == Some(name.as_os_str()));
        let watcher = DirWatcher::new(&[dir], mode, interest, tx)?;
        Ok(LogFollower {
            path: path.to_path_buf(),
            file: None,
            pos: 0,
            watcher,
            wake,
        })
    }

    /// Receives `()` when the file may have changed.
    pub fn wake(&self) -> &Receiver<()> {
        &self.wake
    }

    pub fn watcher_kind(&self) -> &WatcherKind {
        self.watcher.kind()
    }

    /// The next bytes available, or `None` when there is nothing new right now.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some((f, _)) = &self.file {
                let mut buf = vec![0u8; FOLLOW_CHUNK];
                let n = loop {
                    match f.read_at(&mut buf, self.pos) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(Error::io("read", &self.path, e)),
                    }
                };
                if n > 0 {
                    self.pos += n as u64;
                    buf.truncate(n);
                    return Ok(Some(buf));
                }
            }
            // At the end of the file we have: does the name still mean it?
            let meta = match fs::symlink_metadata(&self.path) {
                Ok(m) if m.file_type().is_file() => m,
                // Gone (between tasks) or not a plain file: keep what we have.
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("stat", &self.path, e)),
            };
            let ident = (meta.dev(), meta.ino());
            match &self.file {
                Some((_, current)) if *current == ident => {
                    if meta.len() < self.pos {
                        tracing::debug!(
                            "{} was truncated; reading it from the start",
                            self.path.display()
                        );
                        self.pos = 0;
                        continue;
                    }
                    return Ok(None);
                }
                _ => {
                    let Some(f) = open_log(&self.path)? else {
                        return Ok(None);
                    };
                    let opened = f.metadata().map_err(|e| Error::io("stat", &self.path, e))?;
                    self.file = Some((f, (opened.dev(), opened.ino())));
                    self.pos = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_read_well() {
        assert_eq!(format_age(Duration::from_secs(3)), "3s");
        assert_eq!(format_age(Duration::from_secs(4 * 60 + 59)), "4m");
        assert_eq!(format_age(Duration::from_secs(2 * 3600 + 1)), "2h");
        assert_eq!(format_age(Duration::from_secs(3 * 86_400)), "3d");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
