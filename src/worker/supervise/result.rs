//! The end of a task's run: its result read from the agent's output, its worktree
//! concluded, the result written through the ledger and its locks freed.

use std::fs;
use std::sync::atomic::Ordering;

use crossbeam_channel::{select, Receiver};
use nix::sys::signal::Signal;

use super::run::{still_held, Run, Stop};
use crate::agent::{self, AgentOutput};
use crate::dirlock::DirLock;
use crate::error::{Error, Result};
use crate::fsio;
use crate::ledger::Ledger;
use crate::preset::{Preset, RateLimit};
use crate::protocol::{
    now_rfc3339, Outcome, Status, Task, TaskResult, WorkerState, WorktreeRecord,
};
use crate::worker::admit::Hold;
use crate::worker::slot_server::Pickup;
use crate::worker::{space, worktree};

impl Run<'_> {
    /// The task's result from its agent's output, as its preset reads it, and the usage
    /// limit the agent reported when it failed on its own.
    pub(super) fn result_of(
        &self,
        preset: Preset,
        out: &AgentOutput,
        stop: Option<Stop>,
    ) -> (TaskResult, Option<RateLimit>) {
        let stopped = stop.is_some();
        let mut result = self.build_result(out, stop);
        let limit = (!stopped && !result.success)
            .then(|| preset.rate_limit(&result.output, out.limit_event.as_deref()))
            .flatten();
        if stopped {
            preset.lift_stopped(&mut result, &self.slot.paths.task_log(&self.id));
        }
        preset.interpret(&mut result);
        result.agent = Some(preset.to_string());
        (result, limit)
    }

    fn build_result(&self, out: &AgentOutput, stop: Option<Stop>) -> TaskResult {
        use std::os::unix::process::ExitStatusExt;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let (outcome, error) = match stop {
            Some(Stop::Timeout(t)) => (
                Outcome::Timeout,
                Some(format!("timed out after {}s", t.as_secs())),
            ),
            Some(Stop::Cancelled) => (Outcome::Cancelled, Some("cancelled".to_string())),
            Some(Stop::Interrupted(why) | Stop::Fenced(why)) => (Outcome::Interrupted, Some(why)),
            Some(Stop::Paused(what)) => (
                Outcome::Interrupted,
                Some(format!(
                    "interrupted: {what} was paused --now, and the task could not be put back"
                )),
            ),
            None if out.status.success() => (Outcome::Success, None),
            None => (Outcome::Failure, Some(failure_reason(out, &stderr))),
        };
        let mut r = TaskResult::failed(self.id.clone(), outcome, String::new());
        r.success = outcome == Outcome::Success;
        r.error = error;
        r.output = String::from_utf8_lossy(&out.stdout).into_owned();
        r.exit_code = out.status.code();
        r.signal = out.status.signal();
        r.stderr = Some(stderr);
        self.keep_output_log(out, &mut r);
        r
    }

    /// The run's stdout log moves beside its task record (renaming frees nothing,
    /// unlike truncating it for the next run would).
    fn keep_output_log(&self, out: &AgentOutput, r: &mut TaskResult) {
        let paths = &self.slot.paths;
        let log = paths.task_log(&self.id);
        if let Err(e) = fsio::ensure_dir(&paths.tasks_dir()).and_then(|()| {
            fs::rename(paths.output_log(), &log)
                .map_err(|e| Error::io("keep output log as", &log, e))
        }) {
            tracing::warn!("{e}");
        }
        if self.streams() {
            let raw = paths.task_stream(&self.id);
            if let Err(e) = fs::rename(paths.output_stream(), &raw) {
                tracing::warn!("keeping the raw stream as {}: {e}", raw.display());
            }
        }
        if out.log_cut > 0 {
            r.output_truncated = true;
            r.output_file = Some(log.display().to_string());
            r.output_note = Some(format!(
                "{} of {} bytes of output were cut from the middle of {} to keep it under \
                 its cap (a marker line shows where)",
                out.log_cut,
                out.stdout_total,
                log.display()
            ));
        }
        if out.stdout_truncated {
            r.output_truncated = true;
            r.output_file = Some(log.display().to_string());
            tracing::info!(
                "task {}: {} bytes of output, {} kept inline, the log in {}",
                self.id,
                out.stdout_total,
                out.stdout.len(),
                log.display()
            );
        }
    }

    /// Stamp the result, end the task through the ledger, then free its locks.
    /// `Pickup::Stop` when a shutdown request came while the result waited for space.
    pub(super) fn end(
        &self,
        mut r: TaskResult,
        lock: DirLock,
        mut hold: Hold,
        shutdown: &Receiver<()>,
    ) -> Result<Pickup> {
        r.started_at = Some(self.started_at.clone());
        r.finished_at = Some(now_rfc3339());
        r.timestamp = r.finished_at.clone().unwrap_or_default();
        r.duration_ms = Some(self.clock.elapsed().as_millis() as u64);
        r.attempt = Some(self.attempt);
        r.worker = Some(self.slot.slot().0);
        // The last look before publishing: a holder cut off since its last heartbeat
        // publishes nothing (the overlap with the new holder ends here, at most one
        // heartbeat after the takeover).
        if let Some(lost) = still_held(&lock, &hold) {
            tracing::error!("task {}: {lost}", r.task_id);
            if r.success {
                r.success = false;
                r.outcome = Some(Outcome::Interrupted);
                r.error = Some(lost);
            }
            let aside = crate::ledger::keep_superseded(&self.slot.paths, &r, lock.epoch())?;
            tracing::warn!("its result is kept aside as {}", aside.display());
            return Ok(Pickup::Ran);
        }
        // The agent is gone, and with it whoever asked: no question outlives the result
        // (a view reading the slot after the result must not show one). Only an agent
        // given the permission tool can have asked (no listing of the slot otherwise).
        if self.asks.get() {
            crate::worker::approval::clear(&self.slot.paths.dir);
        }
        // The agent is gone: its run slots (the root's and its group's) are let go
        // before its result is out, so that whoever sees the result sees them free
        // (`group rm` right after `wait` was refused "1 running"). The key and the
        // slot's own lock stay until the result is out: they fence a second run.
        hold.let_go_of_run_slots();
        // On an ordered journal the result's commit (and its queue copy's) is owed to
        // the slot's next claim: one journal commit for both (`worker/owed.rs`).
        let (queued, epoch) = (hold.queued, lock.epoch());
        let (written, debt) = fsio::owing(|| self.write_end(&mut r, queued, epoch, shutdown));
        if !written? {
            debt.pay()?;
            tracing::warn!(
                "stopping with the result of task {} unwritten (the disk is full); it stays in \
                 hand, and recovery ends it when a worker starts on this slot again",
                r.task_id
            );
            return Ok(Pickup::Stop);
        }
        // The result tells of the worktree now; the slot's record of it is done.
        worktree::forget_record(&self.slot.paths.dir);
        tracing::info!(
            "{} \"{}\" in {}{} · task {}",
            &r.outcome_label(),
            self.preview,
            crate::text::format_took(r.duration_ms.unwrap_or(0)),
            r.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
            r.task_id,
        );
        // The slot's lock is kept for the next claim (let go by a look that claims
        // nothing): back-to-back tasks take it once. The key lock goes now.
        self.slot.keep_lock(lock);
        drop(hold);
        // The root's callback, if any, once the result is durable: now, or when the
        // commit it owes is paid.
        let kept = self.slot.paths.result_for(&r.task_id);
        self.slot.owe_end(self.shared, debt, r, kept);
        // Ready an empty output.log now, off the next pickup's path.
        if let Err(e) = agent::ready_log(&self.slot.paths.output_log()) {
            tracing::warn!("{e}");
        }
        Ok(Pickup::Ran)
    }

    /// Write the task's end through the ledger. On a full disk the result waits here,
    /// in memory (shrunk to make room), and is retried with a backoff until it is
    /// written; only a shutdown request gives up on it (`false`; recovery then ends
    /// the task).
    fn write_end(
        &self,
        r: &mut TaskResult,
        queued: bool,
        epoch: u64,
        shutdown: &Receiver<()>,
    ) -> Result<bool> {
        let ledger = Ledger {
            root: &self.shared.opts.root,
            paths: &self.slot.paths,
            queued,
            claimed_here: queued,
            epoch,
        };
        let mut backoff = space::FIRST_BACKOFF;
        let mut waited = false;
        let mut trimmed = false;
        loop {
            let err = match ledger.finish(r, |st| self.slot.board.publish(st)) {
                Ok(published) => {
                    if matches!(published, crate::ledger::Published::Published) {
                        // `running.json` is gone: the next look need not look for it.
                        self.slot.running_gone.store(true, Ordering::Relaxed);
                    }
                    if waited {
                        tracing::info!(
                            "space was freed: the result of task {} is published",
                            r.task_id
                        );
                    }
                    return Ok(true);
                }
                Err(e) if e.is_no_space() => e,
                Err(e) => return Err(e),
            };
            if !waited {
                tracing::error!(
                    "cannot publish the result of task {}: {err}; it waits in memory and is \
                     retried until space is freed",
                    r.task_id
                );
                waited = true;
            }
            space::shrink(r);
            if !trimmed {
                trimmed = true;
                // The task's own log is what filled the disk more often than not: cut it
                // to its head, so the verdict can be published without anyone's help.
                if let Some(note) = space::trim_logs(&self.slot.paths, &r.task_id) {
                    tracing::warn!("task {}: {note}", r.task_id);
                    r.output_note = Some(match r.output_note.take() {
                        Some(before) => format!("{before}; {note}"),
                        None => note,
                    });
                    r.output_truncated = true;
                    continue;
                }
            }
            let mut st = Status::new(WorkerState::Working);
            st.task_id = Some(r.task_id.clone());
            st.problem = Some(format!(
                "disk full: the result of task {} waits in memory ({err})",
                r.task_id
            ));
            let _ = self.slot.board.publish(st);
            select! {
                recv(shutdown) -> _ => return Ok(false),
                default(backoff) => {}
            }
            backoff = space::next_backoff(backoff);
        }
    }
}

/// Conclude the task's worktree, if it has one, and tell of it in `result` (a stopped
/// task's leftovers are committed as such).
pub(super) fn conclude_worktree(
    tree: Option<&WorktreeRecord>,
    task: &Task,
    result: &mut TaskResult,
) {
    if let Some(t) = tree {
        let stopped = result
            .outcome
            .filter(|o| *o != Outcome::Success && *o != Outcome::Failure);
        result.worktree = Some(worktree::conclude(t, task, stopped));
        worktree::fail_if_refused_and_unchanged(result);
    }
}

/// `exit status 3: <last stderr line>`, or the signal that killed the agent.
fn failure_reason(out: &AgentOutput, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match (out.status.code(), out.status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!(
            "killed by signal {s} ({})",
            Signal::try_from(s).map(|s| s.as_str()).unwrap_or("unknown")
        ),
        _ => "agent failed".to_string(),
    };
    match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(line) => format!("{how}: {}", line.trim()),
        None => how,
    }
}
