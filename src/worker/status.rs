//! Publishing a slot's `status.json` without making or freeing an inode per write.

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::fsio;
use crate::host;
use crate::layout::WorkerPaths;
use crate::protocol::Status;

/// Writes a slot's status by swapping it with its second name, `.status.json.next`
/// ([`fsio::write_swapped`]): a status write sits between a task's result and the next
/// pickup, and a temp file renamed over the old status made one inode and freed one
/// each time — on ext4 without a journal the freed ones made every later file creation
/// slower. Clones share one writer lock (one writer at a time per second name).
#[derive(Clone)]
pub(crate) struct StatusBoard {
    status: PathBuf,
    /// The presets the worker serves, stamped on every status.
    presets: Arc<Vec<String>>,
    writing: Arc<Mutex<()>>,
}

impl StatusBoard {
    /// The board of the slot at `paths`. What an older version parked in `.trash/` to
    /// free later is freed now.
    pub fn new(paths: &WorkerPaths, presets: Vec<String>) -> StatusBoard {
        let trash = paths.trash_dir();
        if let Ok(entries) = fs::read_dir(&trash) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
            let _ = fs::remove_dir(&trash);
        }
        StatusBoard {
            status: paths.status(),
            presets: Arc::new(presets),
            writing: Arc::new(Mutex::new(())),
        }
    }

    /// Replace `status.json` with `status`, stamped with this process and host.
    pub fn publish(&self, mut status: Status) -> Result<()> {
        status.worker_pid = Some(std::process::id());
        status.host = Some(host::hostname().to_string());
        status.host_id = Some(host::host_id().to_string());
        status.presets = self.presets.to_vec();
        let _one_writer = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        fsio::write_swapped(&self.status, &fsio::to_json_bytes(&status))
    }
}
