//! Cancelling a task: a pending one withdrawn (moved aside, then answered `cancelled`),
//! a running one told by its worker's `cancel` file.

use std::fs;
use std::io;
use std::path::Path;

use super::{PendingTask, Queue};
use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::protocol::{Outcome, Task, TaskId, TaskResult};

impl Queue {
    /// Cancel a task: a pending one is removed and answered `cancelled`; a running one
    /// gets its worker's `cancel` file. `Ok(false)` if the id is unknown.
    pub fn cancel(&self, id: &TaskId) -> Result<bool> {
        crate::trust::verify_root(&self.root)?;
        if self.withdraw_pending(id)? {
            return Ok(true);
        }
        for slot in self.root.slots()? {
            let w = self.root.worker(slot);
            let running = fsio::read_bounded(&w.running(), fsio::TASK_SIZE_LIMIT)
                .ok()
                .flatten()
                .and_then(|b| Task::salvage_id(&b));
            if running.is_some_and(|r| r.to_string() == id.to_string()) {
                fsio::write_replace(
                    &w.cancel(),
                    format!("{id}\n").as_bytes(),
                    Durability::Atomic,
                )?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Withdraw task `id` if it is pending: moved aside into `queue/rejected/` first (the
    /// rename wins or loses the race with a worker's claim in one step), then answered
    /// `cancelled` in `queue/results/`, so the task is never gone without its result.
    /// `Ok(false)` when it is not pending (never was, or a worker claimed it just now).
    pub(crate) fn withdraw_pending(&self, id: &TaskId) -> Result<bool> {
        // By text: a pending name gives digits back as a number.
        let wanted = Some(id.to_string());
        let Some(p) = self
            .scan()?
            .into_iter()
            .find(|p| p.id.as_ref().map(TaskId::to_string) == wanted)
        else {
            return Ok(false);
        };
        self.withdraw(
            &p,
            Some(id),
            "cancelled before it started",
            "(conductor cancel)",
        )
    }

    /// Take a pending entry out of `pending/` and answer it `cancelled` with `why` (when
    /// its id is known). Moved aside first — one rename that wins or loses the race with
    /// a claim — then answered, so the task is never gone without its result. `false`:
    /// a worker claimed it first.
    pub(crate) fn withdraw(
        &self,
        p: &PendingTask,
        id: Option<&TaskId>,
        why: &str,
        note: &str,
    ) -> Result<bool> {
        fsio::ensure_dir(&self.root.queue_rejected())?;
        let name = p
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let aside = self.root.queue_rejected().join(name);
        match fs::rename(&p.path, &aside) {
            Ok(()) => {}
            // A worker claimed it just now.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("remove", &p.path, e)),
        }
        fsio::fsync_dir(&self.root.queue_pending())?;
        if let Some(id) = id {
            let r = TaskResult::failed(id.clone(), Outcome::Cancelled, why);
            fsio::ensure_dir(&self.root.queue_results())?;
            // Never replacing: an existing answer belongs to the task that holds the id.
            match fsio::write_new(
                &self.result_path(id),
                &fsio::to_json_bytes(&r),
                Durability::Durable,
            ) {
                Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                    tracing::warn!("not answering withdrawn queue task {id}: {e}");
                }
                other => other?,
            }
        }
        let mut reason = aside.into_os_string();
        reason.push(".reason");
        fsio::write_replace(
            Path::new(&reason),
            format!("{why} {note}\n").as_bytes(),
            Durability::Atomic,
        )?;
        Ok(true)
    }
}
