//! Reading the slot's `cancel` file: whether it asks to stop the task in hand.

use std::fs;
use std::time::Duration;

use crate::fsio::{self, SMALL_FILE_LIMIT};
use crate::layout::WorkerPaths;
use crate::protocol::TaskId;

/// How long an empty `cancel` file must stay empty to count (writers truncate first).
const EMPTY_CANCEL_QUIET: Duration = Duration::from_millis(250);

/// What a `cancel` file means for the task `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelVerdict {
    /// It cancels this task (and is consumed).
    Cancel,
    /// It is stale (predates the task, or names a finished one): remove it.
    Stale,
    /// Not for this task, not yet: leave it.
    Leave,
}

/// Judge a `cancel` file. `named` is its trimmed content; `empty_quiet` whether an empty
/// file has stayed empty long enough to be a `touch cancel` rather than an `echo ID >
/// cancel` caught between truncate and write; `running` whether `id` runs already;
/// `names_finished` whether the named task already has its result.
pub(crate) fn judge(
    named: &str,
    empty_quiet: bool,
    running: bool,
    id: &TaskId,
    names_finished: bool,
) -> CancelVerdict {
    // An empty one means "whatever runs" — only once `id` runs, so a stray `touch
    // cancel` while idle cannot cancel the next task before it starts.
    if (named.is_empty() && empty_quiet && running) || named == id.to_string() {
        CancelVerdict::Cancel
    } else if (named.is_empty() && !running) || names_finished {
        // One naming another task may be for a task still waiting in the inbox: left
        // for that one, unless that task has already finished.
        CancelVerdict::Stale
    } else {
        CancelVerdict::Leave
    }
}

/// `Some(why)` when the slot's cancel file asks to cancel `id` (the file is consumed
/// then, so it cannot cancel a later task). Never fatal: a bad cancel file must not
/// stop the worker.
pub(crate) fn requested(paths: &WorkerPaths, id: &TaskId, running: bool) -> Option<String> {
    let path = paths.cancel();
    // Nearly always absent: a look at its name is cheaper than a failed open.
    if fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return None;
    }
    let bytes = match fsio::read_bounded(&path, SMALL_FILE_LIMIT) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("ignoring unreadable cancel file: {e}");
            return None;
        }
    };
    let named = String::from_utf8_lossy(&bytes).trim().to_string();
    let empty_quiet = named.is_empty()
        && fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() >= EMPTY_CANCEL_QUIET);
    let names_finished = TaskId::parse(&named).is_ok_and(|other| paths.result_for(&other).exists());
    match judge(&named, empty_quiet, running, id, names_finished) {
        CancelVerdict::Cancel => {
            if let Err(e) = fsio::remove_file_if_exists(&path) {
                tracing::warn!("{e}");
            }
            Some(format!("{} names it", path.display()))
        }
        CancelVerdict::Stale => {
            tracing::info!("removing stale cancel file {named:?}");
            let _ = fsio::remove_file_if_exists(&path);
            None
        }
        CancelVerdict::Leave => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_file_is_judged_by_what_it_names() {
        let id = TaskId::from("t1");
        assert_eq!(judge("t1", false, false, &id, false), CancelVerdict::Cancel);
        assert_eq!(judge("t1", false, true, &id, false), CancelVerdict::Cancel);
        // Empty: only a running task, and only once it stayed empty.
        assert_eq!(judge("", true, true, &id, false), CancelVerdict::Cancel);
        assert_eq!(judge("", false, true, &id, false), CancelVerdict::Leave);
        assert_eq!(judge("", true, false, &id, false), CancelVerdict::Stale);
        // Another task's: left for it, unless it has finished.
        assert_eq!(judge("t2", false, true, &id, false), CancelVerdict::Leave);
        assert_eq!(judge("t2", false, true, &id, true), CancelVerdict::Stale);
    }
}
