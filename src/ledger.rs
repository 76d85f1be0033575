//! How a task ends: its record, its one result, the status that tells of it, and the
//! slot's `running.json` retired — in that order, for the worker and recovery alike.
//!
//! The order is the protocol's promise (docs/ARCHITECTURE.md, "Finish"): the result is durable before
//! anyone is told, and `running.json` goes only once the result is there, so a crash at
//! any step leaves either a task in hand (recovery finishes it) or a finished task whose
//! telling recovery completes with [`Ledger::announce_kept`].

use std::fs;
use std::io;

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{Outcome, Status, TaskId, TaskResult, WorkerState};
use crate::queue;

/// Where a task's end is written, and how its status is told.
pub(crate) struct Ledger<'a> {
    pub root: &'a Root,
    pub paths: &'a WorkerPaths,
    /// The task came from the shared queue: its result is linked into `queue/results/`.
    pub queued: bool,
    /// This process claimed the queued task and found its id registered for the queue
    /// (the worker's path, not recovery's): its queue copy needs no second look at
    /// `ids/` (`queue::publish_claimed_result`).
    pub claimed_here: bool,
    /// The fencing token of the slot lock this end is written under: names the
    /// superseded record when a newer holder's result is already there.
    pub epoch: u64,
}

/// What became of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Published {
    Published,
    /// Another result for this id was there first (a newer lock holder ended the
    /// task while we were cut off); ours was kept aside at this path.
    Superseded(std::path::PathBuf),
}

/// The status that tells of a finished task.
pub(crate) fn finished_status(result: &TaskResult) -> Status {
    let mut st = Status::new(if result.success {
        WorkerState::Done
    } else {
        WorkerState::Error
    });
    st.task_id = Some(result.task_id.clone());
    st.attempt = result.attempt;
    st
}

impl Ledger<'_> {
    /// End the task in hand with `result`: record it, publish the result (and its queue
    /// copy), tell `status.json` through `tell`, and retire `running.json`.
    ///
    /// `tell` failing is reported, not fatal: the result is durable by then, and an old
    /// status only delays what original clients see.
    pub fn finish(
        &self,
        result: &TaskResult,
        tell: impl FnOnce(Status) -> Result<()>,
    ) -> Result<Published> {
        record_task(self.paths, &result.task_id)?;
        // Before anyone hears of the end: the next claim already counts its cost.
        self.count_spend(result);
        if let Published::Superseded(aside) = publish_result(self.paths, result, self.epoch)? {
            // The terminal result is someone else's; the slot's files are theirs too.
            tracing::warn!(
                "task {}: a result was published first by a newer holder of the slot; \
                 ours (epoch {}) is kept aside as {}",
                result.task_id,
                self.epoch,
                aside.display()
            );
            return Ok(Published::Superseded(aside));
        }
        self.publish_to_queue(&result.task_id)?;
        if let Err(e) = tell(finished_status(result)) {
            tracing::warn!("publishing status after task {}: {e}", result.task_id);
        }
        // Recorded as `tasks/<id>.json` above: only `running.json` goes now.
        fsio::remove_file_if_exists(&self.paths.running())?;
        Ok(Published::Published)
    }

    /// A task whose result is already durable in `results/<id>.json` but whose telling
    /// may have been cut short by a crash: link `result.json`, the queue copy and the
    /// status again, and retire `running.json`.
    pub fn announce_kept(
        &self,
        id: &TaskId,
        tell: impl FnOnce(Status) -> Result<()>,
    ) -> Result<()> {
        let kept = self.paths.result_for(id);
        fsio::link_replace(&kept, &self.paths.result())?;
        self.publish_to_queue(id)?;
        if let Ok(Some(r)) = TaskResult::read(&kept) {
            self.count_spend(&r);
            tell(finished_status(&r))?;
        }
        retire_running(self.paths, id)
    }

    /// Add the task's reported cost to the day's spend ledger, under its group (read
    /// from `running.json`, still there). Counted once per id however often told.
    fn count_spend(&self, result: &TaskResult) {
        let Some(cost) = result.cost_usd else {
            return;
        };
        let group = fsio::read_bounded(&self.paths.running(), fsio::RESULT_SIZE_LIMIT)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<crate::protocol::Task>(&b).ok())
            .and_then(|t| t.group);
        if let Err(e) = crate::budget::record(self.root, &result.task_id, group.as_deref(), cost) {
            tracing::warn!(
                "task {}: its cost is not in the spend ledger: {e}",
                result.task_id
            );
            return;
        }
        // Did it spend the root's or its group's budget for today? Marked and told once.
        crate::hooks::budget::after_spend(self.root, self.paths, &result.task_id, group.as_deref());
    }

    fn publish_to_queue(&self, id: &TaskId) -> Result<()> {
        if !self.queued {
            return Ok(());
        }
        let kept = self.paths.result_for(id);
        let published = if self.claimed_here {
            queue::publish_claimed_result(self.root, &kept, id)
        } else {
            queue::publish_queue_result(self.root, &kept, id)
        };
        match published {
            // The id belongs elsewhere (a hand-edited or pre-registry root): the refusal
            // is logged, and the slot's own result stands; never a reason to stop.
            Err(Error::NotPublished { .. }) => Ok(()),
            other => other,
        }
    }
}

/// Answer a refused input with a `rejected` result, and return the status that tells
/// of it. A reused id's earlier result is never overwritten, nor is one left here for
/// a task whose id went elsewhere (then only `result.json` answers it).
pub(crate) fn answer_rejected(
    root: &Root,
    paths: &WorkerPaths,
    id: TaskId,
    reason: &str,
) -> Result<Status> {
    let mut result = TaskResult::failed(id, Outcome::Rejected, format!("rejected: {reason}"));
    result.worker = Some(paths.slot.0);
    let keep_copy = !paths.result_for(&result.task_id).exists()
        && crate::ids::lookup(root, &result.task_id)
            .is_ok_and(|p| p.is_none_or(|p| p == crate::ids::Place::Worker(paths.slot)));
    if keep_copy {
        // Registered before its result shows, so whoever sees the result finds it in
        // `tasks` (`rejected`) as every other task (it raced a listing in CI).
        let place = crate::ids::Place::Worker(paths.slot);
        if let Err(e) = crate::ids::claim(root, &result.task_id, place) {
            tracing::warn!("registering rejected task {}: {e}", result.task_id);
        }
        publish_result(paths, &result, 0)?;
    } else {
        let bytes = fsio::to_json_bytes(&result);
        fsio::write_replace(&paths.result(), &bytes, Durability::Durable)?;
    }
    let mut st = Status::new(WorkerState::Error);
    st.task_id = Some(result.task_id);
    Ok(st)
}

/// Where a refused file will be kept in `rejected/` (`<stamp>-<id|nonce>.task.json`),
/// with its reason already written beside it (durably): whoever finds the file gone
/// from where it was can read why. The caller moves the file to the returned path.
pub(crate) fn note_rejection(
    paths: &WorkerPaths,
    id: Option<&TaskId>,
    reason_line: &str,
) -> Result<std::path::PathBuf> {
    let dir = paths.rejected_dir();
    fsio::ensure_dir(&dir)?;
    let stamp = crate::protocol::now_rfc3339().replace(':', "");
    let name = format!(
        "{stamp}-{}.task.json",
        id.map_or_else(fsio::nonce, TaskId::to_string)
    );
    fsio::write_replace(
        &dir.join(format!("{name}.reason")),
        reason_line.as_bytes(),
        Durability::Durable,
    )?;
    Ok(dir.join(name))
}

/// Link `running.json` as `tasks/<id>.json`, before its result is published, so the
/// record is there the moment anyone sees the result (`conductor retry` right away).
/// A link: no copy, and later removing `running.json` frees nothing.
pub(crate) fn record_task(paths: &WorkerPaths, id: &TaskId) -> Result<()> {
    let record = paths.task_record(id);
    let link = || fs::hard_link(paths.running(), &record);
    match link() {
        Ok(()) => Ok(()),
        // Already recorded (a crash after linking, or a reused id's earlier run).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound && paths.running().exists() => {
            // tasks/ is missing (a slot made by an older conductor): make it, once.
            fsio::ensure_dir(&paths.tasks_dir())?;
            link().map_err(|e| Error::io("record task as", record, e))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("record task as", record, e)),
    }
}

/// The slot no longer has a task in hand: `running.json` goes (its record stays as
/// `tasks/<id>.json`).
pub(crate) fn retire_running(paths: &WorkerPaths, id: &TaskId) -> Result<()> {
    record_task(paths, id)?;
    fsio::remove_file_if_exists(&paths.running()).map(drop)
}

/// `results/<id>.json` (durable), then `result.json` — unless a result for this id is
/// already there from another run: results are linked in without replacing, so a late
/// writer (a holder that was paused past its lease while a newer holder ended the
/// task) can never overwrite the terminal result. Its result is kept aside as
/// `results/superseded/<id>.<epoch>.json` for the curious. A result of this same run
/// (an earlier try of this end, cut short by a full disk) is replaced.
pub(crate) fn publish_result(
    paths: &WorkerPaths,
    result: &TaskResult,
    epoch: u64,
) -> Result<Published> {
    let bytes = fsio::to_json_bytes(result);
    fsio::ensure_dir(&paths.results_dir())?;
    let kept = paths.result_for(&result.task_id);
    // A new name, so one shared commit after the link: a crash before it returns may
    // leave it cut short, and recovery sets a result that does not parse aside and
    // ends the task `interrupted`, as it would with none.
    match fsio::write_new(&kept, &bytes, Durability::Grouped) {
        Ok(()) => {}
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
            if !same_run(&kept, result) {
                return keep_superseded(paths, result, epoch).map(Published::Superseded);
            }
            fsio::write_replace(&kept, &bytes, Durability::Durable)?;
        }
        Err(e) => return Err(e),
    }
    // result.json is the same file under the name original clients read: a hard link
    // costs no second write and no fsync (results/<id>.json is the durable record).
    fsio::link_replace(&kept, &paths.result())?;
    Ok(Published::Published)
}

/// Whether the result at `kept` is an earlier try of this same end (same worker,
/// attempt, start and finish: the finish is stamped once, before the first try).
/// Recovery's result for the same run has its own finish, so it is never ours.
fn same_run(kept: &std::path::Path, result: &TaskResult) -> bool {
    match TaskResult::read(kept) {
        Ok(Some(r)) => {
            r.worker == result.worker
                && r.attempt == result.attempt
                && r.started_at == result.started_at
                && r.finished_at == result.finished_at
                && r.finished_at.is_some()
        }
        // Unreadable: not a terminal result anyone can use; ours replaces it.
        _ => true,
    }
}

/// Keep `result` aside as `results/superseded/<id>.<epoch>.json`: the result of a
/// holder whose lock was taken over (its epoch superseded). It is never the task's
/// result; nothing else of the slot is touched.
pub(crate) fn keep_superseded(
    paths: &WorkerPaths,
    result: &TaskResult,
    epoch: u64,
) -> Result<std::path::PathBuf> {
    let dir = paths.results_dir().join("superseded");
    fsio::ensure_dir(&dir)?;
    let aside = dir.join(format!("{}.{epoch}.json", result.task_id));
    fsio::write_replace(&aside, &fsio::to_json_bytes(result), Durability::Durable)?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Client;
    use crate::layout::Slot;

    /// The rejection is registered before its result can be seen: here the result
    /// cannot be written at all, and the id is registered all the same.
    #[test]
    fn a_rejected_task_is_registered_before_its_result_is_published() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        let client = Client::new(root.clone());
        client.init_queue().unwrap();
        let paths = client.create_worker(Slot(0)).unwrap();
        // A file where the results directory goes: publishing fails.
        let _ = fs::remove_dir_all(paths.results_dir());
        fs::write(paths.results_dir(), b"").unwrap();
        let id = TaskId::from("hand1");
        assert!(answer_rejected(&root, &paths, id.clone(), "not valid JSON").is_err());
        assert_eq!(
            crate::ids::lookup(&root, &id).unwrap(),
            Some(crate::ids::Place::Worker(Slot(0)))
        );
    }
}
