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

pub use follow::{open_log, LogFollower};
pub use locks::{list_locks, lock_options, LockEntry, LockKind, LockStatus};
pub use slot_report::{slot_reports, Flag, SlotReport};
#[cfg(test)]
pub use slot_report::slot_report;
pub use task_files::{current_task, read_task_file, TaskFile};
