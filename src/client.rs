//! The orchestrator's API: create slots, deliver tasks, read and wait for state.

use std::io;
use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::ids::{self, Place};
use crate::layout::{Root, Slot, WorkerPaths};
use crate::protocol::{Status, Task, TaskId, TaskResult, WorkerState, SCHEMA};
use crate::wait::{self, OnDeath};
use crate::watch::WatchMode;

/// A handle on one conductor root, for orchestrators.
#[derive(Debug, Clone)]
pub struct Client {
    root: Root,
    watch_mode: WatchMode,
    /// How a delivered `task.json` is written ([`Client::with_delivery`]).
    delivery: Durability,
}

impl Client {
    /// A client of the root at `root` (nothing is created until a write needs it).
    pub fn new(root: Root) -> Client {
        Client {
            root,
            watch_mode: WatchMode::Auto,
            delivery: Durability::Grouped,
        }
    }

    /// How deliveries are written: durable before `write_task` returns (the default,
    /// [`Durability::Grouped`]), or [`Durability::Atomic`] for a client that keeps its
    /// tasks itself until their results come and dies with the machine anyway
    /// (`conductor run`): the worker's claim commits the task's bytes with the claim,
    /// and a task lost with the machine before its claim was never started.
    pub(crate) fn with_delivery(mut self, delivery: Durability) -> Client {
        self.delivery = delivery;
        self
    }

    /// Open the root given by `--root`, `$CONDUCTOR_HOME` or the default.
    pub fn from_env(explicit_root: Option<&Path>) -> Result<Client> {
        Ok(Client::new(Root::resolve(explicit_root)?))
    }

    /// Wait by polling instead of native events (for filesystems without events).
    pub fn with_watch_mode(mut self, mode: WatchMode) -> Client {
        self.watch_mode = mode;
        self
    }

    /// The root this client writes to.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The files of worker slot `slot` on this client's root.
    pub fn worker(&self, slot: Slot) -> WorkerPaths {
        self.root.worker(slot)
    }

    /// Create the root and its shared directories (0700) ([`crate::queue::init_root`]).
    /// Idempotent.
    pub fn init_queue(&self) -> Result<()> {
        crate::queue::init_root(&self.root)
    }

    /// Create `workers/<slot>/` with `results/`, `tasks/` and `rejected/`, and an `idle` status
    /// if the slot has none yet. Idempotent. A slot at or over [`crate::layout::MAX_SLOTS`] is
    /// refused.
    pub fn create_worker(&self, slot: Slot) -> Result<WorkerPaths> {
        Slot::checked(slot.0)?;
        crate::trust::verify_for_slot(&self.root, slot)?;
        let w = self.root.worker(slot);
        w.create_files()?;
        Ok(w)
    }

    /// The slots under `workers/`, in order ([`Root::slots`]).
    pub fn list_workers(&self) -> Result<Vec<Slot>> {
        self.root.slots()
    }

    /// Deliver `task` to the slot's inbox. Never overwrites a waiting task: if the inbox
    /// holds one, fails with [`Error::InboxBusy`] naming it. Assigns an id if the task has
    /// none; an id already used anywhere on the root is refused ([`Error::IdTaken`], naming
    /// where it went). A task with dependencies (`after`) is refused
    /// ([`Error::AfterNeedsQueue`]: only the shared queue keeps them), so is a `dir` that
    /// is no directory of ours ([`Error::BadTaskDir`]). Returns the id. Durable when it
    /// returns.
    ///
    /// The slot must exist ([`Client::create_worker`], `conductor create-worker N`, or a
    /// worker that served it): a task is never left in a slot made by mistake.
    pub fn write_task(&self, slot: Slot, task: &Task) -> Result<TaskId> {
        crate::trust::verify_for_slot(&self.root, slot)?;
        self.root.existing_slot(slot)?;
        // The worker enforces the root's configured limit; refuse here what it would reject.
        let limit = Config::load(&self.root.config_file())?.max_task_bytes();
        self.write_task_checked(slot, task, limit)
    }

    /// [`Client::write_task`] for a caller that has checked the slot's directories
    /// ([`crate::trust::verify_for_slot`]) and read the root's task size limit already:
    /// an orchestrator delivering task after task, for which those ~25 `stat`s and a
    /// config read a task were a fifth of its work on the path between a result and the
    /// next task. The slot is not looked for first either (a `stat` a task): a slot
    /// gone since is found missing by the delivery itself, and said so.
    pub(crate) fn write_task_checked(&self, slot: Slot, task: &Task, limit: u64) -> Result<TaskId> {
        let w = self.root.worker(slot);
        let mut task = task.clone();
        task.schema = SCHEMA;
        // Only a worker that claims a task from queue/pending makes it a queue task.
        task.origin = None;
        let generated = task.id.is_none();
        if generated {
            task.id = Some(ids::fresh(&self.root)?);
        }
        let id = task.id.clone().expect("given or made above");
        let bytes = task.to_bytes_checked(limit)?;
        if !task.after.is_empty() {
            return Err(Error::AfterNeedsQueue {
                task: id.to_string(),
                after: crate::protocol::id_list(&task.after),
            });
        }
        if let Some(dir) = &task.dir {
            crate::workdir::check(dir)?;
        }
        let place = Place::Worker(slot);
        if generated {
            ids::reserve_fresh(&self.root, &id, place)?;
        } else {
            ids::reserve(&self.root, &id, place)?;
        }
        match self.deliver(&w, &bytes) {
            Ok(()) => Ok(id),
            Err(e) => {
                // Not delivered: the id stays free for a retry of this send.
                if let Err(undo) = ids::release(&self.root, &id, place) {
                    tracing::warn!("giving back task id {id}: {undo}");
                }
                if e.io_kind() == Some(io::ErrorKind::NotFound) {
                    // The slot's directory is not there (`NoSuchSlot`, or `NoRoot`).
                    self.root.existing_slot(slot)?;
                }
                Err(e)
            }
        }
    }

    /// Create `task.json` with `bytes`, or say which task still waits there.
    fn deliver(&self, w: &WorkerPaths, bytes: &[u8]) -> Result<()> {
        let target = w.task();
        // A new name: a crash before this returns may leave it cut short, and the
        // worker then refuses it as a broken task (nobody was told it was accepted).
        match fsio::write_new(&target, bytes, self.delivery) {
            Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                let waiting = fsio::read_bounded(&target, fsio::TASK_SIZE_LIMIT)
                    .ok()
                    .flatten()
                    .and_then(|b| Task::salvage_id(&b))
                    .map(|id| id.to_string())
                    .unwrap_or_else(|| "(id unreadable)".to_string());
                Err(Error::InboxBusy {
                    path: target,
                    waiting,
                })
            }
            other => other,
        }
    }

    /// The undelivered task in the slot's inbox, if any.
    pub fn read_task(&self, slot: Slot) -> Result<Option<Task>> {
        Task::read(&self.root.worker(slot).task(), fsio::TASK_SIZE_LIMIT)
    }

    /// The slot's `status.json`, if written yet.
    pub fn read_status(&self, slot: Slot) -> Result<Option<Status>> {
        Status::read(&self.root.worker(slot).status())
    }

    /// Publish a status for the slot (normally only its worker does this).
    pub fn write_status(&self, slot: Slot, status: &Status) -> Result<()> {
        crate::trust::verify_for_slot(&self.root, slot)?;
        let mut status = status.clone();
        status.schema = SCHEMA;
        fsio::write_json(
            &self.root.worker(slot).status(),
            &status,
            Durability::Atomic,
        )
    }

    /// The slot's newest result (`result.json`), if any.
    pub fn read_result(&self, slot: Slot) -> Result<Option<TaskResult>> {
        TaskResult::read(&self.root.worker(slot).result())
    }

    /// The result of one task (`results/<id>.json`), if it has finished.
    pub fn read_result_for(&self, slot: Slot, id: &TaskId) -> Result<Option<TaskResult>> {
        id.validate()
            .map_err(|reason| Error::InvalidTask { reason })?;
        TaskResult::read(&self.root.worker(slot).result_for(id))
    }

    /// Remove `result.json` (the per-task copies in `results/` stay until gc).
    /// Returns whether there was one.
    pub fn clear_result(&self, slot: Slot) -> Result<bool> {
        crate::trust::verify_for_slot(&self.root, slot)?;
        fsio::remove_file_if_exists(&self.root.worker(slot).result())
    }

    /// Wait until the slot's status is one of `states`; returns that status. Ends with
    /// [`Error::NobodyServes`] when no live worker serves the slot (for
    /// [`crate::wait::NOBODY_GRACE`]), since then the status would never change.
    /// `working` is published once a task's agent has run 50 ms: a task that ends sooner
    /// goes from its claim straight to its end, so to know a task ran, wait for its
    /// result ([`Client::wait_for_result`]) rather than for `working`.
    pub fn wait_for_status(
        &self,
        slot: Slot,
        states: &[WorkerState],
        timeout: Duration,
    ) -> Result<Status> {
        wait::for_status(&self.root, self.watch_mode, slot, states, timeout)
    }

    /// Wait until task `id` on the slot has a result; returns it. Never blocks for
    /// nothing: ends with [`Error::NobodyServes`] when no live worker serves the slot
    /// (for [`crate::wait::NOBODY_GRACE`]). If its worker dies with the task in hand,
    /// waits on for recovery's result while someone can recover it (the worker started
    /// again, or another live worker of the root), else ends with [`Error::WorkerDied`].
    /// To hear of the death at once, use [`Client::wait_for_result_with`] and
    /// [`OnDeath::Fail`].
    pub fn wait_for_result(
        &self,
        slot: Slot,
        id: &TaskId,
        timeout: Duration,
    ) -> Result<TaskResult> {
        self.wait_for_result_with(slot, id, timeout, OnDeath::AwaitRecovery)
    }

    /// [`Client::wait_for_result`], doing `on_death` if the worker dies with the task.
    pub(crate) fn wait_for_result_with(
        &self,
        slot: Slot,
        id: &TaskId,
        timeout: Duration,
        on_death: OnDeath,
    ) -> Result<TaskResult> {
        wait::for_result(&self.root, self.watch_mode, slot, id, timeout, on_death)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The orchestrator's delivery does not look for the slot first: a slot that is not
    /// there is still told as such, and the id reserved for it is given back.
    #[test]
    fn a_checked_delivery_to_a_missing_slot_says_no_such_slot() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::new(Root::new(dir.path()));
        client.init_queue().unwrap();
        let task = Task::new("hi").with_id(TaskId::from("t1"));
        let err = client
            .write_task_checked(Slot(3), &task, 1 << 20)
            .unwrap_err();
        assert!(
            matches!(err, Error::NoSuchSlot { slot: 3, .. }),
            "{err}"
        );
        assert_eq!(ids::lookup(client.root(), &TaskId::from("t1")).unwrap(), None);
    }

    /// A root deleted under a run is refused, and nothing of it is made again (the
    /// registry's directories were made by a recursive mkdir when missing).
    #[test]
    fn a_delivery_to_a_deleted_root_says_no_root_and_makes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let client = Client::new(Root::new(&gone));
        for task in [Task::new("hi"), Task::new("hi").with_id(TaskId::from("t1"))] {
            let err = client
                .write_task_checked(Slot(0), &task, 1 << 20)
                .unwrap_err();
            assert!(matches!(err, Error::NoRoot { .. }), "{err}");
            assert!(!gone.exists(), "{} was made", gone.display());
        }
    }
}
