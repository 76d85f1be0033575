//! Changing a root on an operator's request, one concern per module:
//!
//! - [`cancel`]: asking a worker to cancel its running task (`conductor cancel`).
//! - [`lock_cleanup`]: removing stale locks and dead processes' spares (`conductor locks clean`).
//! - [`gc`]: deciding which old files go, and removing them (`conductor gc`).
//!
//! Every removal is planned first and only applied on request; nothing here ever
//! touches a live holder's lock or a file of a task that is running.

pub mod cancel;
pub mod gc;
pub mod lock_cleanup;

pub use cancel::{request_cancel, CancelOutcome};
pub use gc::{
    apply_gc, plan_gc, GcOptions, GcPlan, TEMP_FILE_AGE,
};
pub use lock_cleanup::{clean_locks, CleanAction, CleanedLock};
