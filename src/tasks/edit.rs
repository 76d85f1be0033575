//! Edit a task that still waits in the shared queue (`conductor edit`).
//!
//! A worker claims a queued task with one `rename(pending/<name> → running.json)`, so an
//! edit never writes into a pending entry (a claim could take it half-written, or a
//! rename over it could land after the claim and queue the task a second time). It
//! takes the entry out with one rename of its own — which wins or loses the race with a
//! claim in one step — and links the edited task in under its (new) name:
//!
//! 1. read the entry; with `seen` (what an editor was opened on), refuse if it changed;
//! 2. apply the change, check it as `submit` does (fields, size, `dir`, known and
//!    acyclic `after`), and stage it in `queue/tmp/`;
//! 3. `rename(pending/<name> → queue/tmp/.edit.<id>.<nonce>)`: `ENOENT` means a worker
//!    took it (or it was cancelled) meanwhile → refused, nothing changed;
//! 4. `link` the edited task into `pending/<new name>` (same submit time, so it keeps
//!    its place; a new priority or key is in the name), then drop the old copy.
//!
//! At any moment at most one entry holds the task, always a whole file. Between 3 and
//! 4 (a rename and a link) the task is in no place a reader looks; `tasks::find` looks
//! again for half a second before calling a task gone. A crash in that window leaves the
//! old task whole in `queue/tmp/.edit.<id>.<nonce>` (not a temp name: `gc` keeps it);
//! moving it back into `pending/` queues it again.
//!
//! A task waiting in a slot's inbox is not edited: `task.json` holds one task, a worker
//! may take it at any moment and a send may put another there the moment it is taken,
//! so there is no step that replaces exactly that task; cancel it and send it again.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fsio;
use crate::layout::Root;
use crate::protocol::{Task, TaskId};
use crate::queue::{check_known, PendingName, Queue};

use super::locate::find;
use super::state::TaskState;

/// Why task `id` cannot be edited now, from where it is.
pub fn not_editable_reason(root: &Root, id: &TaskId) -> Result<String> {
    let loc = find(root, id)?;
    Ok(match loc {
        None => "no such task".to_string(),
        Some(l) => match (l.state, l.slot) {
            (TaskState::Queued, _) => "it is queued".to_string(),
            (TaskState::Waiting, Some(slot)) => format!(
                "it waits in slot {slot}'s inbox, and only a task in the shared queue can \
                 be edited (a worker may take an inbox task at any moment and a send may \
                 refill the inbox at once, so it cannot be replaced safely); cancel it \
                 and send it again"
            ),
            (TaskState::Running, Some(slot)) => format!("it started (running on slot {slot})"),
            (TaskState::Running, None) => "it started".to_string(),
            (state, _) => format!("it has finished ({state})"),
        },
    })
}

/// The fields an edit sets, each `None` when left as it was: what `conductor edit`'s
/// options and the MCP `edit` tool both say, applied the one way.
#[derive(Debug, Default)]
pub struct TaskEdit {
    pub prompt: Option<String>,
    pub priority: Option<u8>,
    /// `Some(None)` takes the key away.
    pub key: Option<Option<String>>,
    pub after: Option<Vec<TaskId>>,
    pub env: Option<std::collections::BTreeMap<String, String>>,
    pub labels: Option<Vec<String>>,
}

impl TaskEdit {
    /// Why it may not be made, checked before the entry is touched: a prompt left empty.
    pub fn refusal(&self, id: &TaskId) -> Option<String> {
        self.prompt
            .as_ref()
            .is_some_and(|p| p.trim().is_empty())
            .then(|| format!("the new prompt is empty; task {id} is unchanged"))
    }

    /// Set what it names on `task`.
    pub fn apply(self, task: &mut Task) {
        if let Some(p) = self.prompt {
            task.prompt = p;
        }
        if let Some(p) = self.priority {
            task.priority = Some(p);
        }
        if let Some(k) = self.key {
            task.key = k;
        }
        if let Some(a) = self.after {
            task.after = a;
        }
        if let Some(e) = self.env {
            task.env = e;
        }
        if let Some(l) = self.labels {
            task.labels = l;
        }
    }
}

/// Edit queued task `id`: `change` is applied to the task as it waits and the result
/// replaces it atomically (see the module's notes). With `seen`, the edit is refused if
/// the task is no longer exactly that (someone else edited it meanwhile). Returns the
/// task as it now waits. [`Error::NotEditable`] when it is not (or no longer) queued.
pub fn edit_task(
    root: &Root,
    id: &TaskId,
    seen: Option<&Task>,
    change: impl FnOnce(&mut Task),
) -> Result<Task> {
    root.require_existing()?;
    crate::trust::verify_shared(root)?;
    let refuse = |reason: String| Error::NotEditable {
        id: id.to_string(),
        reason,
    };
    let Some(entry) = root.pending_entry(id)? else {
        return Err(refuse(not_editable_reason(root, id)?));
    };
    let limit = Config::load(&root.config_file())?.max_task_bytes();
    let Some(current) = Task::read(&entry, limit)? else {
        return Err(refuse(not_editable_reason(root, id)?));
    };
    if seen.is_some_and(|s| *s != current) {
        return Err(refuse(
            "it was changed by someone else meanwhile; look at it again".to_string(),
        ));
    }
    let mut edited = current.clone();
    change(&mut edited);
    edited.id = Some(id.clone());
    edited.origin = current.origin.clone();
    let bytes = edited.to_bytes_checked(limit)?;
    check_new_fields(root, id, &current, &edited)?;
    // Keep its place in the queue: the submit time stays, priority and key follow the task.
    let submitted = submit_time(&entry);
    let new_name = PendingName::for_task(&edited, id, submitted).file_name();
    let tmp = root.queue_tmp();
    fsio::ensure_dir(&tmp)?;
    let aside = tmp.join(format!(".edit.{id}.{}", fsio::nonce()));
    match fs::rename(&entry, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refuse(format!(
                "{} while the edit was made",
                not_editable_reason(root, id)?
            )))
        }
        Err(e) => return Err(Error::io("move aside", &entry, e)),
    }
    // What was taken out must be what was read: another edit may have replaced it.
    let taken = Task::read(&aside, limit).ok().flatten();
    let put_back = || {
        if let Err(e) = fs::rename(&aside, &entry) {
            tracing::error!(
                "task {id} could not be put back from {}: {e}",
                aside.display()
            );
        }
    };
    if taken.as_ref() != Some(&current) {
        put_back();
        return Err(refuse(
            "it was changed by someone else meanwhile; look at it again".to_string(),
        ));
    }
    if let Err(e) = fsio::write_new_via(&tmp, &root.queue_pending().join(&new_name), &bytes) {
        put_back();
        return Err(e);
    }
    if let Err(e) = fs::remove_file(&aside) {
        tracing::warn!("removing the old copy {}: {e}", aside.display());
    }
    fsio::fsync_dir(&root.queue_pending())?;
    Ok(edited)
}

/// The checks a submit makes of `dir` and `after`, made again when the edit changes
/// them: the directory is ours, each dependency is known, and no cycle is made.
fn check_new_fields(root: &Root, id: &TaskId, current: &Task, edited: &Task) -> Result<()> {
    if edited.dir != current.dir {
        if let Some(dir) = &edited.dir {
            crate::workdir::check(dir)?;
        }
    }
    if edited.after != current.after {
        check_known(root, edited, id)?;
        if let Some(path) = cycle(root, id, &edited.after)? {
            return Err(Error::InvalidTask {
                reason: format!(
                    "task {id} cannot run after {}: it already waits for {id} ({id} → {}), \
                     so neither would ever run",
                    path[0],
                    path.iter()
                        .map(TaskId::to_string)
                        .collect::<Vec<_>>()
                        .join(" → ")
                ),
            });
        }
    }
    Ok(())
}

/// When the pending `entry` was submitted: from its name, else (a file dropped in by
/// hand) its mtime.
fn submit_time(entry: &Path) -> SystemTime {
    let file_name = entry
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    match PendingName::parse(&file_name) {
        Some(n) => n.submitted_at(),
        None => fs::symlink_metadata(entry)
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| SystemTime::now()),
    }
}

/// The chain of queued tasks by which one of `after` waits for `id`, if any: the edit
/// would make a cycle that nothing can break.
fn cycle(root: &Root, id: &TaskId, after: &[TaskId]) -> Result<Option<Vec<TaskId>>> {
    let pending: HashMap<String, std::path::PathBuf> = Queue::new(root.clone())
        .scan()?
        .into_iter()
        .filter_map(|p| Some((p.id?.to_string(), p.path)))
        .collect();
    let target = id.to_string();
    let mut seen = HashSet::new();
    // Depth-first from each dependency, keeping the path walked.
    let mut stack: Vec<Vec<TaskId>> = after.iter().map(|d| vec![d.clone()]).collect();
    while let Some(path) = stack.pop() {
        let last = path.last().expect("never empty").to_string();
        if last == target {
            return Ok(Some(path));
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        let Some(file) = pending.get(&last) else {
            continue; // not queued: it waits for nothing
        };
        let Ok(Some(task)) = Task::read(file, fsio::TASK_SIZE_LIMIT) else {
            continue;
        };
        for dep in task.after {
            let mut next = path.clone();
            next.push(dep);
            stack.push(next);
        }
    }
    Ok(None)
}
