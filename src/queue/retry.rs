//! Retrying a finished task under a new id (`<id>-r1`, `-r2` …), alone or with the
//! queued tasks its end cancelled down its chains (`--with-dependents`).

use std::fs;
use std::path::PathBuf;

use super::retry_ids::{retry_base, retry_number};
use super::Queue;
use crate::error::{Error, Result};
use crate::fsio;
use crate::ids;
use crate::protocol::{Outcome, Task, TaskId};

impl Queue {
    /// Submit a finished task again under a new id (`<id>-r1`, `-r2` …).
    pub fn retry(&self, id: &TaskId) -> Result<TaskId> {
        self.retry_as(id, None, |_| {})
    }

    /// Where finished task `id` is recorded: the record of the worker that ran it, else,
    /// for a queued task that never ran (cancelled, or its dependency failed), the file
    /// it was put aside as (`queue/rejected/…~<id>.json`).
    pub fn task_record(&self, id: &TaskId) -> Result<Option<PathBuf>> {
        if let Some(p) = self
            .root
            .slots()?
            .into_iter()
            .map(|s| self.root.worker(s).task_record(id))
            .find(|p| p.exists())
        {
            return Ok(Some(p));
        }
        let want = format!("{id}.json");
        let found = fs::read_dir(self.root.queue_rejected())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains('~') && n.rsplit('~').next() == Some(&want))
            });
        Ok(found)
    }

    /// Submit finished task `id` again, as `new_id` (default: the first free `<id>-rN`),
    /// changed by `edit` (a new prompt, rewired dependencies).
    pub fn retry_as(
        &self,
        id: &TaskId,
        new_id: Option<TaskId>,
        edit: impl FnOnce(&mut Task),
    ) -> Result<TaskId> {
        // A record that vanishes between the two looks is no record either.
        let no_record = || Error::NoTaskRecord { id: id.to_string() };
        let record = self.task_record(id)?.ok_or_else(no_record)?;
        let mut task = Task::read(&record, fsio::TASK_SIZE_LIMIT)?.ok_or_else(no_record)?;
        task.id = Some(new_id.unwrap_or_else(|| self.free_retry_id(id)));
        task.attempt = None;
        task.resume = None;
        edit(&mut task);
        self.submit(&task)
    }

    /// The first `<id>-rN` no task on the root holds.
    fn free_retry_id(&self, id: &TaskId) -> TaskId {
        id.retries()
            .find(|c| matches!(ids::lookup(&self.root, c), Ok(None)))
            .expect("a free retry id")
    }

    /// Retry `id` (changed by `edit`) and re-queue the tasks its end cancelled down its
    /// chains: every queued task that never ran, was cancelled, and waits (directly or
    /// through others of them) for `id`. Each goes back under a new id, waiting for the
    /// new ids of what it waited for, in an order where a task's dependencies are
    /// submitted before it. Returns each old id with its new one, `id`'s first.
    pub fn retry_with_dependents(
        &self,
        id: &TaskId,
        edit: impl FnOnce(&mut Task),
    ) -> Result<Vec<(TaskId, TaskId)>> {
        let first = self.retry_as(id, None, edit)?;
        let mut renamed: Vec<(TaskId, TaskId)> = vec![(id.clone(), first)];
        let withdrawn = self.cancelled_waiters();
        let chosen = waiting_on(id, &withdrawn);
        let (mut left, same) = latest_retries(withdrawn, &chosen[1..]);
        let alias = |d: &TaskId| {
            same.iter()
                .find(|(o, _)| o == d)
                .map_or_else(|| d.clone(), |(_, l)| l.clone())
        };
        // Submit each once all of its chosen dependencies have their new ids.
        while !left.is_empty() {
            let new_of = |d: &TaskId| {
                let d = alias(d);
                renamed
                    .iter()
                    .find(|(o, _)| *o == d)
                    .map(|(_, n)| n.clone())
            };
            let ready = left.iter().position(|t| {
                t.after
                    .iter()
                    .all(|d| !chosen.contains(d) || new_of(d).is_some())
            });
            let Some(i) = ready else {
                // A cycle cannot be submitted (submit refuses unknown ids): leave it.
                break;
            };
            let t = left.remove(i);
            let old = t.id.clone().expect("read with an id");
            let after: Vec<TaskId> = t
                .after
                .iter()
                .map(|d| new_of(d).unwrap_or_else(|| d.clone()))
                .collect();
            let new = self.retry_as(&old, None, |task| task.after = after)?;
            renamed.push((old, new));
        }
        Ok(renamed)
    }

    /// The cancelled tasks that never ran and waited for something, as put aside in
    /// `queue/rejected/`.
    fn cancelled_waiters(&self) -> Vec<Task> {
        let mut withdrawn: Vec<Task> = Vec::new();
        for entry in fs::read_dir(self.root.queue_rejected())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Ok(Some(task)) = Task::read(&path, fsio::TASK_SIZE_LIMIT) else {
                continue;
            };
            let Some(tid) = task.id.clone() else {
                continue;
            };
            let cancelled = matches!(
                self.read_result(&tid),
                Ok(Some(r)) if r.outcome == Some(Outcome::Cancelled)
            );
            if cancelled && !task.after.is_empty() {
                withdrawn.push(task);
            }
        }
        withdrawn
    }
}

/// `id`, then those of `withdrawn` that wait for it through the chain.
fn waiting_on(id: &TaskId, withdrawn: &[Task]) -> Vec<TaskId> {
    let mut chosen: Vec<TaskId> = vec![id.clone()];
    loop {
        let before = chosen.len();
        for t in withdrawn {
            let tid = t.id.clone().expect("read with an id");
            if !chosen.contains(&tid) && t.after.iter().any(|d| chosen.contains(d)) {
                chosen.push(tid);
            }
        }
        if chosen.len() == before {
            break;
        }
    }
    chosen
}

/// The tasks of `withdrawn` that are `chosen`, a task and its earlier retries (`t`,
/// `t-r1`) taken as one task: only the latest goes back (the first list), and what
/// waited for any of them waits for it (the second: each earlier id with its latest).
fn latest_retries(withdrawn: Vec<Task>, chosen: &[TaskId]) -> (Vec<Task>, Vec<(TaskId, TaskId)>) {
    let mut left: Vec<Task> = Vec::new();
    let mut same: Vec<(TaskId, TaskId)> = Vec::new();
    let mut picked: Vec<Task> = withdrawn
        .into_iter()
        .filter(|t| t.id.as_ref().is_some_and(|i| chosen.contains(i)))
        .collect();
    picked.sort_by_key(|t| retry_number(t.id.as_ref().expect("read with an id")));
    for t in picked.into_iter().rev() {
        let tid = t.id.clone().expect("read with an id");
        let base = retry_base(&tid);
        match left
            .iter()
            .find(|l| retry_base(l.id.as_ref().expect("read with an id")) == base)
        {
            Some(latest) => same.push((tid, latest.id.clone().expect("read with an id"))),
            None => left.push(t),
        }
    }
    left.reverse();
    (left, same)
}
