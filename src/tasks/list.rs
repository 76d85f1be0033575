//! Listing a root's tasks newest first, reading only the files of the page shown.
//!
//! The candidates are the registry's entries (`ids/`, one name and one `stat` each: the
//! entry's mtime is when the id was reserved, i.e. submitted) plus tasks an original
//! client left in an inbox that no worker has registered yet. They are sorted by that
//! time, and only then, newest first, is each one's state read (its registry entry, its
//! result, its task file) until the page is full: a root with 10,000 finished tasks costs
//! one directory listing and 10,000 stats, plus a few reads per task shown. Filters on
//! state, key or slot read on until enough tasks match; `since` cuts the list by time
//! before anything is read.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fsio::{self, TASK_SIZE_LIMIT};
use crate::ids::{self, Place};
use crate::inspect::read_task_file;
use crate::layout::{Root, Slot};
use crate::protocol::id_gen::order_key;
use crate::protocol::{Status, Task, TaskId, TaskResult};
use crate::queue::PendingName;

use super::locate::{find, TaskLocation};
use super::state::TaskState;

/// The default page size of `conductor tasks`.
pub const DEFAULT_LIMIT: usize = 50;

/// Longest prompt preview kept in a summary, in characters.
const PREVIEW_CHARS: usize = 120;

/// Which tasks [`list`] returns.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Only tasks in one of these states (all but `gone` when empty).
    pub states: Vec<TaskState>,
    /// Only tasks with this key.
    pub key: Option<String>,
    /// Only tasks of this group.
    pub group: Option<String>,
    /// Only tasks that carry every one of these labels.
    pub labels: Vec<String>,
    /// Only tasks delivered to, running on, or run by this slot.
    pub slot: Option<Slot>,
    /// Only tasks submitted at or after this time.
    pub since: Option<SystemTime>,
    /// At most this many (`None`: all).
    pub limit: Option<usize>,
    /// Only tasks that come after this one in the list (older, or as old with a
    /// smaller id): where the previous page ended (see [`Cursor`]).
    pub after: Option<Cursor>,
}

/// Where a page of the list ended: the last task's submission time and id. The list's
/// order (newest first, then by id) is total, so the next page starts right after it
/// however many tasks came or went meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The last task shown's submission time.
    pub submitted: SystemTime,
    /// The last task shown's id.
    pub id: String,
}

impl Cursor {
    /// The cursor after `s`.
    pub fn after(s: &TaskSummary) -> Cursor {
        Cursor {
            submitted: s.submitted,
            id: s.id.to_string(),
        }
    }

    /// As text: `<seconds>.<nanoseconds>~<id>`.
    pub fn encode(&self) -> String {
        let d = self
            .submitted
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        format!("{}.{:09}~{}", d.as_secs(), d.subsec_nanos(), self.id)
    }

    /// [`Cursor::encode`]'s text back; `None` if it is not one.
    pub fn decode(s: &str) -> Option<Cursor> {
        let (time, id) = s.split_once('~')?;
        let (secs, nanos) = time.split_once('.')?;
        let d = std::time::Duration::new(secs.parse().ok()?, nanos.parse().ok()?);
        TaskId::parse(id).ok()?;
        Some(Cursor {
            submitted: SystemTime::UNIX_EPOCH.checked_add(d)?,
            id: id.to_string(),
        })
    }
}

/// One task as `conductor tasks` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// The task's id.
    pub id: TaskId,
    /// Where it is in its life.
    pub state: TaskState,
    /// Submitted to the shared queue (else delivered to a slot's inbox).
    pub queued: bool,
    /// The slot whose inbox holds it, that runs it, or that ran it.
    pub slot: Option<u32>,
    /// Its key: tasks of one key run one at a time.
    pub key: Option<String>,
    /// The group it runs in, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Its queue priority (0 most urgent), for a queued task.
    pub priority: Option<u8>,
    /// The prompt's start, whitespace folded (up to 120 characters).
    pub prompt_preview: Option<String>,
    /// When its id was reserved (the registry entry's time).
    pub submitted_at: String,
    #[serde(skip)]
    /// When its id was reserved, as a time to sort by.
    pub submitted: SystemTime,
    /// When its agent started (RFC 3339).
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    pub finished_at: Option<String>,
    /// Run time: the result's, or so far for a running task.
    pub duration_ms: Option<u64>,
    /// Which attempt this is (retries count from 1).
    pub attempt: Option<u32>,
    /// How many attempts it may have.
    pub max_attempts: Option<u32>,
    /// What the agent reported it cost (claude preset).
    pub cost_usd: Option<f64>,
    /// How many turns the agent reported (claude preset).
    pub num_turns: Option<u64>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The file that shows its state.
    pub file: Option<PathBuf>,
    /// The tasks it runs after (`after`), if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<TaskId>,
    /// The agent preset that ran it (the result's `agent`), else the one it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Why a task that has not started waits, when something root-wide holds it:
    /// "paused", "paused (key K)", "rate-limited until 22:43", "group G at its limit
    /// (parallel N)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Its branch and diffstat, when it ran in a worktree of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::protocol::WorktreeChange>,
    /// Where its worktree change stands (read from git by `review::annotate`;
    /// `None` until then, and for a task without a worktree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::protocol::ReviewState>,
    /// The tool calls its agent was refused (the result's `denials`), if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<crate::protocol::Denial>,
    /// Its labels (`labels`), if any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The variables it sets in its agent's environment (`env`), if any.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// What its agent asks a person to allow, while it waits for the answer (state
    /// `needs approval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<crate::protocol::approval::Question>,
    /// With `until`: the rounds it ran and its check's last verdict (`rounds`, `check`).
    #[serde(flatten)]
    pub until: crate::protocol::UntilReport,
}

/// What the slots and the queue hold right now, read once per listing.
struct Snapshot {
    inbox: HashMap<String, Slot>,
    running: HashMap<String, Slot>,
    pending: HashMap<String, (PathBuf, PendingName)>,
    /// `queue/rejected/` by id, read only if a withdrawn queue task is shown.
    queue_rejected: Option<HashMap<String, PathBuf>>,
    /// The pauses in force and the lock timings, read only if a waiting task is shown
    /// (they said why it waits; read once, not once per task).
    root_wide: Option<(crate::queue::pause::Paused, crate::config::Config)>,
}

impl Snapshot {
    fn take(root: &Root) -> Result<Snapshot> {
        let mut inbox = HashMap::new();
        let mut running = HashMap::new();
        for slot in root.slots()? {
            let w = root.worker(slot);
            if let Some(id) = read_task_file(&w.task()).and_then(|f| f.task_id) {
                inbox.insert(id.to_string(), slot);
            }
            if let Some(id) = read_task_file(&w.running()).and_then(|f| f.task_id) {
                running.insert(id.to_string(), slot);
            }
        }
        let mut pending = HashMap::new();
        for (name, path) in names_in(&root.queue_pending())? {
            if let Some(p) = PendingName::parse(&name) {
                pending.insert(p.id.to_string(), (path, p));
            }
        }
        Ok(Snapshot {
            inbox,
            running,
            pending,
            queue_rejected: None,
            root_wide: None,
        })
    }

    fn queue_rejected(&mut self, root: &Root) -> &HashMap<String, PathBuf> {
        self.queue_rejected.get_or_insert_with(|| {
            names_in(&root.queue_rejected())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(name, path)| {
                    PendingName::parse(&name).map(|p| (p.id.to_string(), path))
                })
                .collect()
        })
    }
}

/// The names in `dir` (none if it is missing), hidden and temp files left out.
fn names_in(dir: &std::path::Path) -> Result<Vec<(String, PathBuf)>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    Ok(entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            (!name.starts_with('.')).then(|| (name, e.path()))
        })
        .collect())
}

/// One task to consider: its id, when it was submitted, and where the registry (or an
/// inbox) says it went, when already known.
struct Candidate {
    submitted: SystemTime,
    name: String,
    place: Option<Place>,
}

/// Every task id on the root with its submission time (cheap: names and stats only).
fn candidates(root: &Root, snap: &Snapshot) -> Result<Vec<Candidate>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (dir, place) in [
        (root.ids_dir(), None),
        (root.queue_ids(), Some(Place::Queue)),
    ] {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("list", &dir, e)),
        };
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || !seen.insert(name.clone()) {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                continue; // gone meanwhile
            };
            out.push(Candidate {
                submitted: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                name,
                place,
            });
        }
    }
    // An original client's task waits unregistered until a worker claims it.
    for (name, slot) in &snap.inbox {
        if seen.insert(name.clone()) {
            let submitted = fs::symlink_metadata(root.worker(*slot).task())
                .and_then(|m| m.modified())
                .unwrap_or_else(|_| SystemTime::now());
            out.push(Candidate {
                submitted,
                name: name.clone(),
                place: Some(Place::Worker(*slot)),
            });
        }
    }
    Ok(out)
}

/// Tasks on the root, newest first, filtered by `opts`.
pub fn list(root: &Root, opts: &ListOptions) -> Result<Vec<TaskSummary>> {
    let mut snap = Snapshot::take(root)?;
    let mut all = candidates(root, &snap)?;
    if let Some(since) = opts.since {
        all.retain(|c| c.submitted >= since);
    }
    if !opts.states.is_empty() && opts.states.iter().all(|s| !s.is_finished()) {
        // Only unfinished tasks wanted: the snapshot holds every one of them.
        all.retain(|c| {
            snap.inbox.contains_key(&c.name)
                || snap.running.contains_key(&c.name)
                || snap.pending.contains_key(&c.name)
        });
    }
    // Entries made in one clock tick (a coarse file time) tie: a generated id's
    // milliseconds and counter say which was made first; the id itself, last.
    let key = |submitted: SystemTime, name: &str| (submitted, order_key(name), name.to_string());
    all.sort_by_cached_key(|c| std::cmp::Reverse(key(c.submitted, &c.name)));
    if let Some(after) = &opts.after {
        // The list is sorted: drop every candidate up to and including the cursor.
        let cursor = key(after.submitted, &after.id);
        let from = all.partition_point(|c| key(c.submitted, &c.name) >= cursor);
        all.drain(..from);
    }
    let limit = opts.limit.unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for c in all {
        if out.len() >= limit {
            break;
        }
        let Ok(id) = TaskId::parse(&c.name) else {
            continue; // not an id (a stray file)
        };
        let s = summarize(root, &mut snap, &id, &c)?;
        if matches(&s, opts) {
            out.push(s);
        }
    }
    Ok(out)
}

fn matches(s: &TaskSummary, opts: &ListOptions) -> bool {
    let state_ok = if opts.states.is_empty() {
        s.state != TaskState::Gone
    } else {
        // A task waiting for an approval is running all the same.
        opts.states.contains(&s.state)
            || (s.state == TaskState::NeedsApproval && opts.states.contains(&TaskState::Running))
    };
    state_ok
        && opts.key.as_ref().is_none_or(|k| s.key.as_ref() == Some(k))
        && opts
            .group
            .as_ref()
            .is_none_or(|g| s.group.as_ref() == Some(g))
        && opts.slot.is_none_or(|slot| s.slot == Some(slot.0))
        && opts.labels.iter().all(|l| s.labels.contains(l))
}

/// Where the task is now: its result first (most tasks on a busy root have finished),
/// then what the snapshot saw, then a full look if it moved since.
fn locate(
    root: &Root,
    snap: &Snapshot,
    id: &TaskId,
    place: Option<Place>,
) -> Result<(TaskLocation, Option<TaskResult>)> {
    if let Some(seen) = locate_seen(root, snap, id, place)? {
        return Ok(seen);
    }
    let gone = |state, file| TaskLocation {
        id: id.clone(),
        state,
        queued: false,
        slot: None,
        file,
    };
    // A damaged file is shown as such; it never fails the whole listing.
    let loc = match find(root, id) {
        Ok(found) => found.unwrap_or(gone(TaskState::Gone, None)),
        Err(Error::BadFile { path, problem }) => {
            tracing::warn!("task {id}: {} {problem}", path.display());
            gone(TaskState::Damaged, Some(path))
        }
        Err(e) => return Err(e),
    };
    let result = match (&loc.file, loc.state.is_finished()) {
        (Some(f), true) => TaskResult::read(f).ok().flatten(),
        _ => None,
    };
    Ok((loc, result))
}

/// Where the task is by what the registry and the snapshot say (`place`, its result, its
/// file seen in hand, in an inbox or pending); `None`: not there now, look everywhere.
fn locate_seen(
    root: &Root,
    snap: &Snapshot,
    id: &TaskId,
    place: Option<Place>,
) -> Result<Option<(TaskLocation, Option<TaskResult>)>> {
    let key = id.to_string();
    let at = |state, queued, slot, file| TaskLocation {
        id: id.clone(),
        state,
        queued,
        slot,
        file: Some(file),
    };
    match place {
        Some(Place::Worker(slot)) => {
            let w = root.worker(slot);
            let kept = w.result_for(id);
            match TaskResult::read(&kept) {
                Ok(Some(r)) => {
                    return Ok(Some((
                        at(TaskState::of_result(&r), false, Some(slot), kept),
                        Some(r),
                    )))
                }
                Err(Error::BadFile { .. }) => {
                    return Ok(Some((
                        at(TaskState::Damaged, false, Some(slot), kept),
                        None,
                    )))
                }
                _ => {}
            }
            if snap.running.get(&key) == Some(&slot) {
                return Ok(Some((
                    at(TaskState::Running, false, Some(slot), w.running()),
                    None,
                )));
            }
            if snap.inbox.get(&key) == Some(&slot) {
                return Ok(Some((
                    at(TaskState::Waiting, false, Some(slot), w.task()),
                    None,
                )));
            }
        }
        Some(Place::Queue) => {
            let path = root.queue_results().join(format!("{key}.json"));
            match TaskResult::read(&path) {
                Ok(Some(r)) => {
                    let slot = r.worker.and_then(|n| Slot::checked(n).ok());
                    return Ok(Some((
                        at(TaskState::of_result(&r), true, slot, path),
                        Some(r),
                    )));
                }
                Err(Error::BadFile { .. }) => {
                    return Ok(Some((at(TaskState::Damaged, true, None, path), None)))
                }
                _ => {}
            }
            if let Some(&slot) = snap.running.get(&key) {
                let file = root.worker(slot).running();
                return Ok(Some((at(TaskState::Running, true, Some(slot), file), None)));
            }
            if let Some((path, _)) = snap.pending.get(&key) {
                return Ok(Some((
                    at(TaskState::Queued, true, None, path.clone()),
                    None,
                )));
            }
        }
        None => {}
    }
    Ok(None)
}

/// The task file that tells its prompt, key and priority.
fn task_file(root: &Root, snap: &mut Snapshot, loc: &TaskLocation) -> Option<PathBuf> {
    match (loc.state, loc.slot) {
        (TaskState::Waiting | TaskState::Running | TaskState::Queued, _) => loc.file.clone(),
        (TaskState::Gone, _) => None,
        (_, Some(slot)) => Some(root.worker(slot).task_record(&loc.id)),
        // Withdrawn from the queue before any worker ran it.
        (_, None) => snap.queue_rejected(root).get(&loc.id.to_string()).cloned(),
    }
}

fn summarize(root: &Root, snap: &mut Snapshot, id: &TaskId, c: &Candidate) -> Result<TaskSummary> {
    let place = match c.place {
        Some(p) => Some(p),
        None => ids::lookup(root, id).ok().flatten(),
    };
    let (loc, result) = locate(root, snap, id, place)?;
    let task = task_file(root, snap, &loc)
        .and_then(|p| fsio::read_bounded(&p, TASK_SIZE_LIMIT).ok().flatten())
        .and_then(|b| serde_json::from_slice::<Task>(&b).ok());
    let pending = snap.pending.get(&id.to_string()).map(|(_, p)| p);
    let mut s = TaskSummary {
        id: id.clone(),
        state: loc.state,
        queued: loc.queued,
        slot: loc.slot.map(|s| s.0),
        key: task
            .as_ref()
            .and_then(|t| t.key.clone())
            .or_else(|| pending.and_then(|p| p.key.clone())),
        group: task.as_ref().and_then(|t| t.group.clone()),
        priority: task
            .as_ref()
            .and_then(|t| t.priority)
            .or_else(|| pending.map(|p| p.priority)),
        prompt_preview: task
            .as_ref()
            .map(|t| crate::text::prompt_preview(&t.prompt, PREVIEW_CHARS)),
        submitted_at: crate::protocol::rfc3339(c.submitted),
        submitted: c.submitted,
        started_at: None,
        finished_at: None,
        duration_ms: None,
        attempt: task.as_ref().and_then(|t| t.attempt),
        max_attempts: task.as_ref().and_then(|t| t.max_attempts),
        cost_usd: None,
        num_turns: None,
        error: None,
        file: loc.file.clone(),
        after: task.as_ref().map(|t| t.after.clone()).unwrap_or_default(),
        agent: task.as_ref().and_then(|t| t.agent.clone()),
        waiting: None,
        worktree: None,
        review: None,
        denials: Vec::new(),
        labels: task.as_ref().map(|t| t.labels.clone()).unwrap_or_default(),
        env: task.as_ref().map(|t| t.env.clone()).unwrap_or_default(),
        approval: None,
        until: Default::default(),
    };
    if let (TaskState::Waiting | TaskState::Queued, Some(t)) = (loc.state, &task) {
        let (paused, config) = snap.root_wide.get_or_insert_with(|| {
            let config = crate::config::Config::load(&root.config_file()).unwrap_or_default();
            (crate::queue::pause::Paused::load(root), config)
        });
        s.waiting = crate::queue::root_wide_wait(root, t, loc.slot.map(|s| s.0), paused, config);
    }
    if let Some(r) = result {
        s.started_at = r.started_at;
        s.finished_at = r.finished_at;
        s.duration_ms = r.duration_ms;
        s.attempt = r.attempt.or(s.attempt);
        s.cost_usd = r.cost_usd;
        s.num_turns = r.num_turns;
        s.error = r.error;
        s.agent = r.agent.or(s.agent);
        s.worktree = r.worktree;
        s.denials = r.denials;
        s.until = r.until;
    } else if let (TaskState::Running, Some(slot)) = (loc.state, loc.slot) {
        running_since(root, slot, id, &mut s);
        s.approval = crate::protocol::approval::question_of(&root.worker(slot).dir, id);
        if s.approval.is_some() {
            s.state = TaskState::NeedsApproval;
        }
    }
    Ok(s)
}

/// A running task's start and run time so far, from its slot's `status.json`.
fn running_since(root: &Root, slot: Slot, id: &TaskId, s: &mut TaskSummary) {
    let path = root.worker(slot).status();
    let Some(status) = Status::read(&path)
        .ok()
        .flatten()
        .filter(|st| st.task_id.as_ref() == Some(id))
    else {
        return;
    };
    s.duration_ms = status
        .started_at
        .as_deref()
        .and_then(crate::protocol::parse_rfc3339)
        .and_then(|t| t.elapsed().ok())
        .map(|d| d.as_millis() as u64);
    s.started_at = status.started_at;
    s.attempt = status.attempt.or(s.attempt);
}
