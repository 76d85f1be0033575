//! How every command that waits for a result ends: the result, a dead worker, nobody, or time.

use std::time::{Duration, Instant};

use crate::wait::OnDeath;
use crate::{Error, TaskResult};

use super::common::exit;
use super::output::print_result;

/// Wait with `wait` (called with what to do on a death and the time left) and finish
/// the command: print the result (exit 0, or 1 if the task failed); when the worker
/// dies with the task, say so at once on stderr and wait on for recovery's result; when
/// nobody serves the wait (or nobody is left to recover the task), say what to start
/// and exit 4; when `timeout` passes first, say so with `carries_on` (what the user may
/// do about the task that carries on) and exit 1.
pub fn finish(
    timeout: Option<Duration>,
    json: bool,
    carries_on: &str,
    wait: impl Fn(OnDeath, Duration) -> crate::Result<TaskResult>,
) -> anyhow::Result<i32> {
    finish_with(timeout, carries_on, wait, |r| print_result(r, json))
}

/// [`finish`], the result printed by `print` (which returns the exit code).
pub fn finish_with(
    timeout: Option<Duration>,
    carries_on: &str,
    wait: impl Fn(OnDeath, Duration) -> crate::Result<TaskResult>,
    print: impl FnOnce(&TaskResult) -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let total = timeout.unwrap_or(Duration::MAX);
    let outcome = match wait(OnDeath::Fail, total) {
        Err(Error::WorkerDied {
            slot, pid, task, ..
        }) => {
            let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
            eprintln!(
                "warning: worker {slot}{pid} died with task {task} in hand; waiting for its recovery to give it a result"
            );
            wait(
                OnDeath::AwaitRecovery,
                total.saturating_sub(started.elapsed()),
            )
        }
        other => other,
    };
    match outcome {
        Ok(result) => print(&result),
        Err(Error::Timeout { what, .. }) => {
            let e = Error::Timeout { what, after: total };
            eprintln!("error: {e}; {carries_on}");
            Ok(exit::FAILURE)
        }
        Err(e @ Error::NobodyServes { .. }) => {
            eprintln!("error: {e}");
            Ok(exit::NOBODY)
        }
        Err(e @ Error::WorkerDied { .. }) => {
            eprintln!("error: no live worker is left to recover it: {e}");
            Ok(exit::NOBODY)
        }
        Err(e) => Err(e.into()),
    }
}

/// Warn on stderr, without failing, that no live worker serves `slot` (a task sent
/// there waits in its inbox until one starts).
pub fn warn_if_unserved_slot(root: &crate::Root, slot: crate::Slot) {
    if matches!(crate::wait::slot_served(root, slot), Ok(false)) {
        let nobody = Error::NobodyServes {
            slot: Some(slot.0),
            task: None,
            root: root.path().to_path_buf(),
        };
        eprintln!("warning: {nobody}; the task waits in its inbox until then");
    }
}

/// Warn on stderr, without failing, that no live worker serves the root's queue.
pub fn warn_if_unserved_queue(root: &crate::Root) {
    if matches!(crate::wait::root_served(root), Ok(false)) {
        warn_unserved_queue(root);
    }
}

/// Warn on stderr that no live worker serves the root's queue (the caller looked).
pub fn warn_unserved_queue(root: &crate::Root) {
    let nobody = Error::NobodyServes {
        slot: None,
        task: None,
        root: root.path().to_path_buf(),
    };
    eprintln!("warning: {nobody}; the task stays pending until then");
}
