//! Reading a root's state for people and tools; nothing here writes.
//!
//! - [`slot_report`]: one report per worker slot (status, ages, pids, gate and lock
//!   holders, what looks wrong): `conductor status`.
//! - [`locks`]: every lock under the root, judged alive, stale or free: `conductor locks`.
//! - [`task_files`]: which task a slot has in hand or waiting: `conductor wait`.
//! - [`follow`]: reading `output.log`, and following it like `tail -F`: `conductor logs`.

pub mod follow;
pub mod locks;
pub mod slot_report;
pub mod task_files;

use crate::config::Config;
use crate::dirlock::LockOptions;
use crate::layout::Root;

pub use follow::{open_log, LogFollower};
pub use locks::{list_locks, LockEntry, LockKind, LockStatus};
pub use slot_report::{slot_reports, Flag, SlotReport};
#[cfg(test)]
pub use slot_report::slot_report;
pub use task_files::{current_task, read_task_file, TaskFile};

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
