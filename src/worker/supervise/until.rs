//! A task's `until` loop: after each round its check runs; while it fails, the session goes on.
//!
//! All rounds run inside the one claim of the task (its locks renewed while the check
//! runs), so a worker that dies between rounds leaves a task in hand like any other:
//! recovery writes its one result (or retries it, a fresh first round), and that result
//! tells the rounds run so far from `workers/<N>/until.json`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::run::{Run, Stop};
use crate::dirlock::DirLock;
use crate::env::{ENV_HOME, ENV_TASK_ID};
use crate::preset::Preset;
use crate::protocol::{until, CheckVerdict, Outcome, Task, TaskResult, Until};
use crate::review::check::{self, CheckRun, CHECK_BOUND};
use crate::worker::admit::Hold;

/// What follows a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Another round: the check failed, and rounds are left.
    Again,
    /// The task ends with the result in hand.
    Done,
    /// It ends, and the worker was asked to stop while its check ran.
    Stopping,
}

/// The rounds of one task (none of this applies to a task without `until`).
pub(super) struct Rounds {
    until: Option<Until>,
    round: u32,
    /// The next round's prompt and the session it resumes.
    prompt: Option<String>,
    resume: Option<String>,
    last: Option<CheckVerdict>,
    slot_dir: std::path::PathBuf,
}

impl Rounds {
    pub(super) fn start(run: &Run, task: &Task) -> Rounds {
        let slot_dir = run.slot.paths.dir.clone();
        if task.until.is_some() {
            // A retried attempt starts again at round 1: a record of an earlier one is stale.
            until::forget_record(&slot_dir);
        }
        Rounds {
            until: task.until.clone(),
            round: 1,
            prompt: None,
            resume: None,
            last: None,
            slot_dir,
        }
    }

    pub(super) fn first(&self) -> bool {
        self.round == 1
    }

    /// The task this round runs: after the first, its prompt is the check's report and,
    /// where the agent reported a session its preset can resume, it resumes that.
    pub(super) fn task(&self, task: &Task) -> Task {
        let mut t = task.clone();
        if let Some(p) = &self.prompt {
            t.prompt = p.clone();
            t.resume = self.resume.clone().or(t.resume);
        }
        t
    }

    /// `r` telling of the rounds so far (a task with `until` only).
    pub(super) fn told(&self, mut r: TaskResult) -> Box<TaskResult> {
        if self.until.is_some() {
            r.until.rounds = Some(self.round);
            r.until.check = self.last.clone();
        }
        Box::new(r)
    }

    /// The task's result is out: the slot's record of the loop is done.
    pub(super) fn ended(&self) {
        if self.until.is_some() {
            until::forget_record(&self.slot_dir);
        }
    }

    /// After a round: run the check (the agent ended well) and say what follows;
    /// `result` tells of the rounds and the check's verdict.
    pub(super) fn after(
        &mut self,
        run: &Run,
        (task, preset): (&Task, Preset),
        result: &mut TaskResult,
        dir: Option<&Path>,
        locks: (&mut DirLock, &mut Hold),
        shutdown: &crossbeam_channel::Receiver<()>,
    ) -> Next {
        let Some(u) = self.until.clone() else {
            return Next::Done;
        };
        let told = *self.told(std::mem::replace(
            result,
            TaskResult::failed(run.id.clone(), Outcome::Failure, ""),
        ));
        *result = told;
        let Some(dir) = dir.filter(|_| result.success) else {
            settle_log(run, "");
            return Next::Done;
        };
        let (verdict, stop) = run.check(&u.check, task, dir, locks, shutdown);
        let verdict = match verdict {
            Ok(v) => v,
            Err(e) => CheckVerdict {
                command: u.check.clone(),
                passed: false,
                exit_code: None,
                output_tail: format!("the check could not run: {e}"),
            },
        };
        let section = log_section(&verdict, self.round);
        self.last = Some(verdict.clone());
        result.until.check = Some(verdict.clone());
        until::write_record(&self.slot_dir, &run.id, &result.until);
        if let Some(stop) = stop {
            settle_log(run, &section);
            let stopping = matches!(stop, Stop::Interrupted(_));
            stopped_in_check(result, stop, self.round);
            return if stopping { Next::Stopping } else { Next::Done };
        }
        if verdict.passed || self.round >= u.rounds() {
            if !verdict.passed {
                failed_for_good(result, &verdict, self.round);
            }
            settle_log(run, &section);
            return Next::Done;
        }
        fold_log(run, &section);
        self.next_round(run, task, preset, result, &verdict, u.rounds());
        Next::Again
    }

    /// Ready the next round: its prompt, the session it resumes, a fresh output log.
    fn next_round(
        &mut self,
        run: &Run,
        task: &Task,
        preset: Preset,
        result: &TaskResult,
        verdict: &CheckVerdict,
        bound: u32,
    ) {
        self.round += 1;
        run.round.set(self.round);
        // Recorded before the round starts: a worker dying in it leaves a result that
        // counts it (recovery's, from this record).
        let report = crate::protocol::UntilReport {
            rounds: Some(self.round),
            check: self.last.clone(),
        };
        until::write_record(&self.slot_dir, &run.id, &report);
        let session = result
            .session_id
            .clone()
            .filter(|_| preset != Preset::Command);
        self.prompt = Some(next_prompt(
            task,
            verdict,
            session.is_some(),
            (self.round, bound),
        ));
        self.resume = session;
        tracing::info!(
            "task {}: its check failed (exit {}); round {} of {bound}{}",
            run.id,
            exit_text(verdict.exit_code),
            self.round,
            match &self.resume {
                Some(s) => format!(", resuming session {s}"),
                None => ", a fresh agent in the same worktree".to_string(),
            }
        );
        if let Err(e) = crate::agent::ready_log(&run.slot.paths.output_log()) {
            tracing::warn!("{e}");
        }
    }
}

impl Run<'_> {
    /// Run the task's check in `dir` with the task's environment, bounded by what is left
    /// of its timeout, its locks renewed meanwhile; a cancel, a lost lock, a stop request
    /// or the timeout stop it (the `Stop` says which).
    fn check(
        &self,
        cmd: &str,
        task: &Task,
        dir: &Path,
        (lock, hold): (&mut DirLock, &mut Hold),
        shutdown: &crossbeam_channel::Receiver<()>,
    ) -> (crate::Result<CheckVerdict>, Option<Stop>) {
        let mut env: Vec<(String, String)> = task.env.clone().into_iter().collect();
        env.push((
            ENV_HOME.into(),
            self.shared.opts.root.path().display().to_string(),
        ));
        env.push((ENV_TASK_ID.into(), self.id.to_string()));
        let left = self.timeout.map(|t| t.saturating_sub(self.clock.elapsed()));
        let bound = left.map_or(CHECK_BOUND, |l| l.min(CHECK_BOUND));
        let log = self.slot.paths.dir.join("until-check.log");
        let recorded = |pid| self.record_check(pid);
        let run = CheckRun {
            dir,
            cmd,
            env: &env,
            log: &log,
            bound,
            on_start: &recorded,
        };
        let heartbeat = self
            .shared
            .opts
            .heartbeat
            .min(crate::gate::renew_every(self.shared.lock_opts.lease));
        let mut status = self.working_status();
        let mut next_beat = Instant::now() + heartbeat;
        let mut stop = None;
        let started = Instant::now();
        let verdict = check::run_bounded(&run, || {
            if !shutdown.is_empty() {
                stop = Some(self.interrupted());
            } else if Instant::now() >= next_beat {
                next_beat = Instant::now() + heartbeat;
                stop = if self.cancelled() {
                    Some(Stop::Cancelled)
                } else {
                    self.beat(&mut status, 0, lock, hold)
                };
            }
            stop.is_none()
        });
        if stop.is_none() && left.is_some_and(|l| started.elapsed() >= l) {
            stop = self.timeout.map(Stop::Timeout);
        }
        let verdict = verdict.map(|v| CheckVerdict {
            command: cmd.to_string(),
            passed: v.passed && stop.is_none(),
            exit_code: v.exit,
            output_tail: v.tail,
        });
        (verdict, stop)
    }
}

impl Run<'_> {
    /// The check runs as the task's process now: named in the agent record and the
    /// status, so that recovery after a crash stops it (its whole group) as it would
    /// the agent.
    fn record_check(&self, pid: u32) {
        let start = crate::host::process_start_time(pid);
        let record = crate::protocol::AgentRecord::new(self.id.clone(), pid, start);
        if let Err(e) = record.write(&self.slot.paths.agent_record()) {
            tracing::warn!("task {}: recording its check's pid: {e}", self.id);
        }
        let mut status = self.working_status();
        status.agent_pid = Some(pid);
        status.agent_start_time = start;
        if let Err(e) = self.slot.board.publish(status) {
            tracing::warn!("publishing the status of the check: {e}");
        }
    }
}

/// The prompt of the round after a failed check: with the session resumed, the check's
/// report; else (a fresh agent) the task's prompt, then that report.
fn next_prompt(task: &Task, v: &CheckVerdict, resumed: bool, (round, bound): (u32, u32)) -> String {
    let report = format!(
        "The check `{}` failed (exit {}) on the work in this directory. The end of its \
         output:\n```\n{}\n```\nFix the cause so that the check passes (round {round} of \
         {bound}).",
        v.command,
        exit_text(v.exit_code),
        v.output_tail.trim_end()
    );
    if resumed {
        report
    } else {
        format!(
            "{}\n\n---\nAn earlier round of this task left its work in this directory. {report}",
            task.prompt
        )
    }
}

fn exit_text(code: Option<i32>) -> String {
    code.map_or_else(|| "killed".to_string(), |c| c.to_string())
}

/// A check that never passed: the task fails, saying so (its work stays on its branch).
fn failed_for_good(result: &mut TaskResult, v: &CheckVerdict, rounds: u32) {
    result.success = false;
    result.outcome = Some(Outcome::Failure);
    result.error = Some(format!(
        "the check `{}` still failed after {rounds} round(s) (exit {})",
        v.command,
        exit_text(v.exit_code)
    ));
}

/// The check was stopped: the task ends as the stop says.
fn stopped_in_check(result: &mut TaskResult, stop: Stop, round: u32) {
    let during = format!("during the check after round {round}");
    let (outcome, why) = match stop {
        Stop::Timeout(t) => (
            Outcome::Timeout,
            format!("timed out after {}s ({during})", t.as_secs()),
        ),
        Stop::Cancelled => (Outcome::Cancelled, format!("cancelled ({during})")),
        Stop::Interrupted(why) | Stop::Fenced(why) | Stop::Paused(why) => {
            (Outcome::Interrupted, format!("{why} ({during})"))
        }
    };
    result.success = false;
    result.outcome = Some(outcome);
    result.error = Some(why);
}

/// What the task log says of a check.
fn log_section(v: &CheckVerdict, round: u32) -> String {
    format!(
        "\n--- conductor: after round {round}, the check `{}` {} (exit {}); its output ends: ---\n{}\n--- end of the check's output ---\n",
        v.command,
        if v.passed { "passed" } else { "failed" },
        exit_text(v.exit_code),
        v.output_tail.trim_end()
    )
}

/// The earlier rounds' log, beside the task's own (`tasks/<id>.log`), while rounds go on.
fn earlier_log(run: &Run) -> std::path::PathBuf {
    let log = run.slot.paths.task_log(&run.id);
    log.with_extension("rounds.log")
}

/// Move the round's log, then `section`, to the end of the earlier rounds' log.
fn fold_log(run: &Run, section: &str) {
    let log = run.slot.paths.task_log(&run.id);
    let earlier = earlier_log(run);
    let body = fs::read(&log).unwrap_or_default();
    let appended = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&earlier)
        .and_then(|mut f| {
            f.write_all(&body)?;
            f.write_all(section.as_bytes())
        });
    match appended {
        Ok(()) => {
            let _ = fs::remove_file(&log);
        }
        Err(e) => tracing::warn!("task {}: keeping its round's log: {e}", run.id),
    }
}

/// The task log of the whole loop: every round's output and check, in order.
fn settle_log(run: &Run, section: &str) {
    fold_log(run, section);
    let earlier = earlier_log(run);
    if earlier.exists() {
        if let Err(e) = fs::rename(&earlier, run.slot.paths.task_log(&run.id)) {
            tracing::warn!("task {}: settling its log: {e}", run.id);
        }
    }
}
