//! The queue's submit side opened once for many tasks: what no task changes is done once.
//!
//! A submit checks the root (there, and trusted: [`crate::trust::verify_shared`], ~17
//! `stat`s), reads its task size limit (`config.json`) and makes sure `queue/tmp/` and
//! `queue/pending/` are there. None of that depends on the task, so `submit --batch`
//! opens one [`Submitter`] and submits every line through it: those calls were a third
//! of the submitter's per task, taken from the workers running the batch meanwhile
//! (issue 39.3). [`Queue::submit`](super::Queue::submit) opens one per task, as before.

use std::time::SystemTime;

use crate::config::Config;
use crate::error::Result;
use crate::fsio;
use crate::ids::{self, Place};
use crate::layout::Root;
use crate::protocol::{Task, TaskId, SCHEMA};

use super::handle::ORIGIN_QUEUE;
use super::order::PendingName;
use super::{deps, groups};

/// A root's queue checked and ready for tasks: see the module's doc.
#[derive(Debug, Clone)]
pub(crate) struct Submitter {
    root: Root,
    /// The root's task size limit, read at [`Submitter::open`].
    limit: u64,
}

impl Submitter {
    /// Check the root once for the tasks to come: it exists (submitting never makes
    /// one: [`Error::NoRoot`](crate::error::Error::NoRoot)), its shared directories are
    /// ours and private, its configuration reads; and make `queue/tmp/` and
    /// `queue/pending/` if missing.
    pub(crate) fn open(root: Root) -> Result<Submitter> {
        root.require_existing()?;
        crate::trust::verify_shared(&root)?;
        let limit = Config::load(&root.config_file())?.max_task_bytes();
        for dir in [root.queue_tmp(), root.queue_pending()] {
            fsio::ensure_dir(&dir)?;
        }
        Ok(Submitter { root, limit })
    }

    /// Accept one task, as [`Queue::submit`](super::Queue::submit) documents: its id
    /// given or made, checked, staged in `queue/tmp/` and linked into `queue/pending/`,
    /// durable on return (or, inside [`fsio::in_one_commit`], at its commit).
    pub(crate) fn submit(&self, task: &Task) -> Result<TaskId> {
        let root = &self.root;
        let mut task = task.clone();
        task.schema = SCHEMA;
        task.origin = Some(ORIGIN_QUEUE.to_string());
        let generated = task.id.is_none();
        if generated {
            task.id = Some(ids::fresh(root)?);
        }
        let id = task.id.clone().expect("given or made above");
        let bytes = task.to_bytes_checked(self.limit)?;
        if let Some(dir) = &task.dir {
            crate::workdir::check(dir)?;
        }
        if let Some(g) = &task.group {
            groups::require(root, g)?;
        }
        // Before our own id is reserved: that order is what rules out cycles.
        deps::check_known(root, &task, &id)?;
        let name = PendingName::for_task(&task, &id, SystemTime::now()).file_name();
        if generated {
            ids::reserve_fresh(root, &id, Place::Queue)?;
        } else {
            ids::reserve(root, &id, Place::Queue)?;
        }
        let written =
            fsio::write_new_via_grouped(&root.queue_tmp(), &root.queue_pending().join(name), &bytes);
        if let Err(e) = written {
            // Not accepted: the id stays free for a retry of this submit.
            if let Err(undo) = ids::release(root, &id, Place::Queue) {
                tracing::warn!("giving back task id {id}: {undo}");
            }
            return Err(e);
        }
        Ok(id)
    }
}
