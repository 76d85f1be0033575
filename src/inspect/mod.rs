//! Reading a root's state for people and tools; nothing here writes.
//!
//! - [`slot_report`]: one report per worker slot (status, ages, pids, gate and lock
//!   holders, what looks wrong): `conductor status`.
//! - [`locks`]: every lock under the root, judged alive, stale or free: `conductor locks`.
//! - [`task_files`]: which task a slot has in hand or waiting: `conductor wait`.
//! - [`follow`]: reading `output.log`, and following it like `tail -F`: `conductor logs`.
//! - [`format`]: ages, sizes, run times and outcomes for people; ages for JSON.
//! - [`preview`]: one-line prompt previews; agent text without escape sequences.

pub mod follow;
pub mod format;
pub mod locks;
pub mod preview;
pub mod slot_report;
pub mod task_files;

use std::fs;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::dirlock::LockOptions;
use crate::error::{Error, Result};
use crate::layout::{Root, Slot, WorkerPaths};

pub use follow::{open_log, LogFollower};
pub(crate) use format::secs;
pub use format::{age_since, format_age, format_bytes, format_took, outcome_label};
pub use locks::{list_locks, spares_in, LockEntry, LockKind, LockState, LockStatus};
pub use preview::{fit, prompt_preview, without_escapes, PREVIEW_CHARS};
pub use slot_report::{slot_report, slot_reports, Flag, SlotReport};
pub use task_files::{current_task, read_task_file, running_task, TaskFile, TaskSource};

/// The root's lock timings from `config.json`; the defaults when it is missing or
/// unreadable (a broken config must not stop anyone from looking at the state).
pub fn lock_options(root: &Root) -> LockOptions {
    match Config::load(&root.config_file()) {
        Ok(c) => c.lock_options(),
        Err(e) => {
            tracing::warn!("using default lock timings: {e}");
            LockOptions::default()
        }
    }
}

/// The slot numbers under `workers/`, in order (other names are skipped).
pub fn list_slots(root: &Root) -> Result<Vec<Slot>> {
    root.slots()
}

/// The slot's paths, or [`Error::NoSuchSlot`] if the slot does not exist.
pub fn require_slot(root: &Root, slot: Slot) -> Result<WorkerPaths> {
    let w = root.worker(slot);
    if w.dir.is_dir() {
        Ok(w)
    } else {
        Err(Error::NoSuchSlot {
            slot: slot.0,
            root: root.path().to_path_buf(),
        })
    }
}

/// Entries of `dir` (sorted by name; symlinks not followed); a missing directory has none.
pub(crate) fn sorted_entries(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let Some(rd) = crate::fsio::read_dir_if_exists(dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let Ok(meta) = fs::symlink_metadata(entry.path()) else {
            continue; // gone meanwhile
        };
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
            meta,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Regular files in `dir`, sorted by name; a missing directory has none.
pub(crate) fn regular_files(dir: &Path) -> Result<Vec<(String, PathBuf, fs::Metadata)>> {
    let mut all = sorted_entries(dir)?;
    all.retain(|(_, _, meta)| meta.file_type().is_file());
    Ok(all)
}

/// `.NAME.<nonce>.tmp`: a file being written atomically, or what an interrupted write
/// left behind.
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > ".tmp".len() + 1
}
