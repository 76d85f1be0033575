//! Asking the worker serving a slot to cancel its running task, through `workers/<N>/cancel`.

use crate::error::Result;
use crate::fsio::{self, Durability};
use crate::gate;
use crate::inspect::{read_task_file, task_files::status_task};
use crate::layout::{Root, Slot};
use crate::protocol::TaskId;

/// What [`request_cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// `cancel` now names the running task; its worker stops the agent.
    Requested {
        /// The task asked to stop.
        id: TaskId,
    },
    /// Nothing is running on the slot (a task may wait in the inbox).
    NothingRunning {
        /// The task waiting in the slot's inbox, if any.
        inbox: Option<TaskId>,
    },
    /// Another task than the one asked for is running; nothing was written.
    OtherTaskRunning {
        /// The task that runs there.
        running: TaskId,
    },
    /// A task is in hand but no live worker serves the slot; nothing was written.
    NoLiveWorker {
        /// The task in hand, when its id can be read.
        id: Option<TaskId>,
    },
    /// A live worker has a task in hand whose id cannot be read yet (its files are
    /// being written); nothing was written, asking again in a moment will do.
    IdNotReadable,
}

/// Ask the worker serving `slot` to cancel its running task, by writing the task's id
/// into `workers/<N>/cancel` (atomically). With `only`, only if that task is the one
/// running. The id is always written (never an empty file), so a request that arrives
/// after the task ended cannot cancel the next one.
pub fn request_cancel(root: &Root, slot: Slot, only: Option<&TaskId>) -> Result<CancelOutcome> {
    let paths = root.existing_slot(slot)?;
    let running = read_task_file(&paths.running());
    let worker_live = gate::probe(&paths.worker_gate())?.is_some();
    let Some(running) = running else {
        let inbox = read_task_file(&paths.task()).and_then(|f| f.task_id);
        return Ok(CancelOutcome::NothingRunning { inbox });
    };
    // running.json without a readable id: the status names what the worker runs.
    let id = running.task_id.or_else(|| status_task(&paths));
    if !worker_live {
        return Ok(CancelOutcome::NoLiveWorker { id });
    }
    let Some(id) = id else {
        return Ok(CancelOutcome::IdNotReadable);
    };
    if let Some(want) = only {
        if *want != id {
            return Ok(CancelOutcome::OtherTaskRunning { running: id });
        }
    }
    fsio::write_replace(
        &paths.cancel(),
        format!("{id}\n").as_bytes(),
        Durability::Atomic,
    )?;
    Ok(CancelOutcome::Requested { id })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;
    use crate::Client;

    #[test]
    fn a_task_in_hand_without_a_readable_id_is_an_outcome_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        let paths = Client::new(root.clone()).create_worker(Slot(0)).unwrap();
        let _serving = Gate::acquire(&paths.worker_gate(), "worker 0").unwrap();
        // Being written by a worker: no id yet, and no working status names one.
        std::fs::write(paths.running(), "{").unwrap();
        let outcome = request_cancel(&root, Slot(0), None).unwrap();
        assert_eq!(outcome, CancelOutcome::IdNotReadable);
        assert!(!paths.cancel().exists());
    }

    #[test]
    fn a_missing_slot_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        // The root exists; only the slot is missing (no root at all is Error::NoRoot).
        crate::queue::init_root(&root).unwrap();
        let err = request_cancel(&root, Slot(7), None).unwrap_err();
        assert!(
            matches!(err, crate::Error::NoSuchSlot { slot: 7, .. }),
            "{err}"
        );
    }
}
