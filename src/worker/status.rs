//! Publishing a slot's `status.json` without freeing file data on the pickup path.

use std::fs;
use std::io;
use std::path::PathBuf;

use crossbeam_channel::Sender;

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::host;
use crate::layout::WorkerPaths;
use crate::protocol::Status;

/// Writes a slot's status. The replaced file is first linked into `.trash/` so the
/// rename frees nothing, and a reaper thread frees it: freeing file data costs ~1 ms of
/// kernel time on some filesystems (ext4 here), and a status write sits between a
/// task's result and the next pickup. Clones share the reaper.
#[derive(Clone)]
pub(crate) struct StatusBoard {
    status: PathBuf,
    trash: PathBuf,
    reaper: Sender<PathBuf>,
}

impl StatusBoard {
    /// Free what a previous worker parked and did not free, and start the reaper.
    pub fn start(paths: &WorkerPaths) -> Result<StatusBoard> {
        Ok(Self::with_reaper(paths, spawn_reaper(&paths.trash_dir())?))
    }

    /// Free what a previous worker parked, and park replaced inodes with `reaper`
    /// (one reaper serves every slot of a many-slot worker).
    pub fn with_reaper(paths: &WorkerPaths, reaper: Sender<PathBuf>) -> StatusBoard {
        let trash = paths.trash_dir();
        if let Ok(entries) = fs::read_dir(&trash) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        StatusBoard {
            status: paths.status(),
            trash,
            reaper,
        }
    }

    /// Replace `status.json` with `status`, stamped with this process and host.
    pub fn publish(&self, mut status: Status) -> Result<()> {
        status.worker_pid = Some(std::process::id());
        status.host = Some(host::hostname().to_string());
        status.host_id = Some(host::host_id().to_string());
        let parked = self.trash.join(fsio::nonce());
        let parked = match fs::hard_link(&self.status, &parked) {
            Ok(()) => Some(parked),
            Err(e) => {
                if e.kind() == io::ErrorKind::NotFound && !self.trash.exists() {
                    fsio::ensure_dir(&self.trash)?;
                }
                None
            }
        };
        fsio::write_json(&self.status, &status, Durability::Atomic)?;
        if let Some(p) = parked {
            let _ = self.reaper.send(p);
        }
        Ok(())
    }
}

/// The thread that frees parked inodes; it ends when every board using it is gone.
/// `place` names what it serves in an error.
pub(crate) fn spawn_reaper(place: &std::path::Path) -> Result<Sender<PathBuf>> {
    let (reaper, parked) = crossbeam_channel::unbounded::<PathBuf>();
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            for p in parked {
                let _ = fs::remove_file(p);
            }
        })
        .map_err(|e| Error::io("start the reaper thread for", place, e))?;
    Ok(reaper)
}
