//! Publishing a slot's `status.json` without making or freeing an inode per write.

use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::kept_swap::KeptSwap;
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
    /// The slot's directory, open for as long as the worker serves it (a single-slot
    /// worker: [`StatusBoard::keep_dir_open`]), so a publish opens nothing.
    writing: Arc<Mutex<Option<fs::File>>>,
    /// With the directory kept open: the status and its second name kept open too
    /// ([`KeptSwap`]), from the first publish that leaves both in place.
    kept: Arc<Mutex<Option<KeptSwap>>>,
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
            writing: Arc::new(Mutex::new(None)),
            kept: Arc::new(Mutex::new(None)),
        }
    }

    /// Replace `status.json` with `status`, stamped with this process and host.
    pub fn publish(&self, mut status: Status) -> Result<()> {
        status.worker_pid = Some(crate::host::pid());
        status.host = Some(host::hostname().to_string());
        status.host_id = Some(host::host_id().to_string());
        status.presets = self.presets.to_vec();
        let bytes = fsio::to_json_bytes(&status);
        let dir = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let swapped = dir.as_ref().and_then(|dir| {
            let name = self.status.file_name()?;
            let next = fsio::next_name(name);
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) = kept.as_mut() {
                if k.publish(dir, name, &next, &bytes) {
                    return Some(Ok(()));
                }
                *kept = None;
            }
            let done = fsio::swap_in_at(dir, name, &self.status, &bytes)?;
            if done.is_ok() {
                *kept = KeptSwap::open(dir, name, &next);
            }
            Some(done)
        });
        swapped.unwrap_or_else(|| fsio::write_swapped(&self.status, &bytes))
    }

    /// Keep the slot's directory open from now on: two of a task's opens fewer. Only
    /// for a worker of one slot (a thousand slots' descriptors would each be closed at
    /// every agent's exec). Opened without following a link, as every write's is; a
    /// directory moved or replaced later is never written through by name.
    pub fn keep_dir_open(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let Some(dir) = self.status.parent() else {
            return;
        };
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags(dir_flags())
            .open(dir);
        if let Ok(fd) = opened {
            *self.writing.lock().unwrap_or_else(|e| e.into_inner()) = Some(fd);
        }
    }
}

/// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`.
fn dir_flags() -> i32 {
    use nix::fcntl::OFlag;
    (OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits()
}
