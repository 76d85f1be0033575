//! How every command that waits for a result ends: the result, a dead worker, nobody, or time.

use std::time::Duration;

use crate::verbs::wait::{await_result, Got, WaitEvent};
use crate::wait::OnDeath;
use crate::{Error, TaskResult};

use super::common::exit;
use super::output::print_result;

/// Wait with `wait` (called with what to do on a death and the time left) and finish
/// the command: print the result (exit 0, or 1 if the task failed); when the worker
/// dies with the task, say so at once on stderr and wait on for recovery's result; when
/// nobody serves the wait (or nobody is left to recover the task), say what to start
/// and exit 4; when `timeout` passes first, say so with `carries_on` (what the user may
/// do about the task that carries on) and exit 1. The `wait` verb's one-result wait.
pub fn finish(
    timeout: Option<Duration>,
    json: bool,
    carries_on: &str,
    wait: impl Fn(OnDeath, Duration) -> crate::Result<TaskResult>,
) -> anyhow::Result<i32> {
    let mut on_event = |e: WaitEvent<'_>| {
        if let WaitEvent::Died(e) = e {
            say_died(e);
        }
        Ok(true)
    };
    match await_result(timeout, &mut on_event, wait)? {
        Got::Result(result) => print_result(&result, json),
        Got::TimedOut(e) => {
            eprintln!("error: {e}; {carries_on}");
            Ok(exit::FAILURE)
        }
        Got::Nobody(e) => Ok(say_nobody(&e)),
    }
}

/// Say that the worker died with the task (the wait goes on for its recovery).
pub fn say_died(e: &Error) {
    if let Error::WorkerDied {
        slot, pid, task, ..
    } = e
    {
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        eprintln!(
            "warning: worker {slot}{pid} died with task {task} in hand; waiting for its recovery to give it a result"
        );
    }
}

/// Say who must act when nobody will answer a wait; the exit code (4).
pub fn say_nobody(e: &Error) -> i32 {
    match e {
        Error::WorkerDied { .. } => eprintln!("error: no live worker is left to recover it: {e}"),
        e => eprintln!("error: {e}"),
    }
    exit::NOBODY
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
