//! Supervising a claimed task's agent: spawn, heartbeat, cancel, timeout, its result.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver};
use nix::sys::signal::Signal;

use super::admit::Hold;
use super::{cancel, space, Pickup, Shared, SlotServer, ENV_WORKER};
use crate::agent::{self, Agent, AgentCommand, AgentOutput, Launch};
use crate::dirlock::DirLock;
use crate::env::{ENV_CONTEXT, ENV_DEPTH, ENV_HOME};
use crate::error::{Error, Result};
use crate::fsio;
use crate::ledger::Ledger;
use crate::protocol::{
    now_rfc3339, rfc3339, Outcome, Status, Task, TaskId, TaskResult, WorkerState,
};

/// Why the agent stopped before finishing on its own.
enum Stop {
    Timeout(Duration),
    Cancelled,
    Interrupted(String),
    /// A lock we held was taken over (we were judged gone: paused or cut off past the
    /// lease); the task is someone else's now.
    Fenced(String),
}

/// A claimed task on its way to its one result.
struct Run<'a> {
    shared: &'a Shared,
    slot: &'a SlotServer,
    id: TaskId,
    started_at: String,
    clock: Instant,
    attempt: u32,
    /// The prompt's start, so the worker's log lines say what the task is.
    preview: String,
}

/// Run a claimed task to its one result. `Pickup::Stop` if asked to shut down.
pub(crate) fn run(
    shared: &Shared,
    slot: &SlotServer,
    task: Task,
    mut lock: DirLock,
    mut hold: Hold,
    wake: &Receiver<()>,
    shutdown: &Receiver<()>,
) -> Result<Pickup> {
    let run = Run {
        shared,
        slot,
        id: task.id.clone().expect("id ensured at claim"),
        started_at: rfc3339(SystemTime::now()),
        clock: Instant::now(),
        attempt: task.attempt(),
        preview: crate::text::prompt_preview(&task.prompt, 60),
    };
    if let Some(who) = cancel::requested(&slot.paths, &run.id, false) {
        tracing::info!("task {} was cancelled before it started ({who})", run.id);
        let r = TaskResult::failed(run.id.clone(), Outcome::Cancelled, "cancelled");
        return run.end(r, lock, hold, shutdown);
    }
    let mut agent = match run.command(&task).and_then(|c| run.spawn(&task, &c)) {
        Ok(a) => a,
        Err(r) => return run.end(*r, lock, hold, shutdown),
    };
    tracing::info!(
        "started \"{}\" · task {} · pid {} · {}us after claim",
        run.preview,
        run.id,
        agent.pid(),
        run.clock.elapsed().as_micros()
    );
    let stop = run.watch(&task, &mut agent, &mut lock, &mut hold, wake, shutdown);
    if stop.is_some() {
        agent.stop(shared.opts.kill_grace);
    }
    let shutting_down = matches!(stop, Some(Stop::Interrupted(_)));
    let out = agent.finish();
    let mut result = run.build_result(&out, stop);
    shared.opts.preset.interpret(&mut result);
    let ended = run.end(result, lock, hold, shutdown)?;
    Ok(if shutting_down { Pickup::Stop } else { ended })
}

impl Run<'_> {
    /// The agent command for this task: the worker's, with the task's model and the
    /// session it resumes as the preset passes them. Err: the task's rejected result.
    fn command(&self, task: &Task) -> std::result::Result<AgentCommand, Box<TaskResult>> {
        let opts = &self.shared.opts;
        if task.model.is_none() && task.resume.is_none() {
            return Ok(opts.agent.clone());
        }
        if let (Some(model), false) = (&task.model, opts.preset.takes_model()) {
            tracing::warn!(
                "task {} asks for model {model}, but the {} preset passes no model to its \
                 command: running it with the command's own",
                self.id,
                opts.preset
            );
        }
        match opts.preset.task_args(
            &opts.agent.args,
            task.model.as_deref(),
            task.resume.as_deref(),
        ) {
            Ok(args) => {
                let mut c = opts.agent.clone();
                c.args = args;
                Ok(c)
            }
            Err(why) => Err(Box::new(TaskResult::failed(
                self.id.clone(),
                Outcome::Rejected,
                why,
            ))),
        }
    }

    /// Where the agent runs: the task's `dir` if it has one (checked now, on the
    /// worker's side: it must exist and be the worker user's), else the project
    /// directory. Err: the task's rejected result.
    fn cwd<'t>(&'t self, task: &'t Task) -> std::result::Result<&'t Path, Box<TaskResult>> {
        let Some(dir) = task.dir.as_deref() else {
            return Ok(&self.shared.opts.project_dir);
        };
        crate::workdir::check(dir).map(|()| dir).map_err(|e| {
            Box::new(TaskResult::failed(
                self.id.clone(),
                Outcome::Rejected,
                format!("rejected: {e}"),
            ))
        })
    }

    /// Start the agent. Err: the task's failed result (the agent could not start).
    fn spawn(
        &self,
        task: &Task,
        command: &AgentCommand,
    ) -> std::result::Result<Agent, Box<TaskResult>> {
        let context = task
            .context
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_else(|| "null".into());
        let (opts, paths) = (&self.shared.opts, &self.slot.paths);
        let stream_raw = opts.preset.streams().then(|| paths.output_stream());
        let launch = Launch {
            command,
            program_path: self.shared.agent_path.as_deref(),
            cwd: self.cwd(task)?,
            task_id: self.id.to_string(),
            env: vec![
                (ENV_HOME, opts.root.path().display().to_string()),
                (ENV_WORKER, self.slot.slot().to_string()),
                (ENV_CONTEXT, context),
                // Sub-tasks this agent creates are one level deeper (env::stamp_depth).
                (
                    ENV_DEPTH,
                    task.depth.unwrap_or(0).saturating_add(1).to_string(),
                ),
            ],
            prompt: task.prompt.clone(),
            output_log: &paths.output_log(),
            inline_cap: opts.inline_output,
            log_cap: opts.log_cap,
            stream_raw: stream_raw.as_deref(),
        };
        // The agent runs only once its record names it, so recovery can always find it.
        Agent::spawn(launch, &paths.agent_record()).map_err(|e| {
            Box::new(TaskResult::failed(
                self.id.clone(),
                Outcome::Failure,
                e.to_string(),
            ))
        })
    }

    /// `working` on this task; the agent's pid and start time are added by the caller.
    fn working_status(&self) -> Status {
        let mut status = Status::new(WorkerState::Working);
        status.task_id = Some(self.id.clone());
        status.started_at = Some(self.started_at.clone());
        status.heartbeat_at = Some(self.started_at.clone());
        status.attempt = Some(self.attempt);
        status.output_bytes = Some(0);
        status
    }

    /// Watch the running agent until it exits, or a timeout, a cancel or a shutdown
    /// stops it; keep the status and every held lock fresh meanwhile.
    fn watch(
        &self,
        task: &Task,
        agent: &mut Agent,
        lock: &mut DirLock,
        hold: &mut Hold,
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
    ) -> Option<Stop> {
        // Published now, off the pickup path: the agent's own record was written
        // before it could run.
        let mut status = self.working_status();
        status.agent_pid = Some(agent.pid());
        status.agent_start_time = agent.start_time();
        if let Err(e) = self.slot.board.publish(status.clone()) {
            tracing::warn!("publishing the working status: {e}");
        }
        let timeout = self.timeout(task);
        // A timeout too large to represent is no timeout.
        let deadline = timeout.and_then(|t| self.clock.checked_add(t));
        let heartbeat = self.shared.opts.heartbeat;
        let mut next_beat = Instant::now() + heartbeat;
        loop {
            let now = Instant::now();
            if let (Some(d), Some(t)) = (deadline, timeout) {
                if now >= d {
                    return Some(Stop::Timeout(t));
                }
            }
            if now >= next_beat {
                // No event follows a `touch cancel`: look again on every beat.
                if self.cancelled() {
                    return Some(Stop::Cancelled);
                }
                if let Some(fenced) = self.beat(&mut status, agent, lock, hold) {
                    return Some(fenced);
                }
                next_beat = now + heartbeat;
            }
            let mut wait = next_beat.saturating_duration_since(now);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            select! {
                recv(agent.exit_channel()) -> _ => {
                    agent.note_exit();
                    // A service manager often signals the whole group at once: the agent
                    // dying of that same stop request is an interruption, not a failure.
                    return (!shutdown.is_empty()).then(|| self.interrupted());
                }
                recv(wake) -> _ => {
                    if self.cancelled() {
                        return Some(Stop::Cancelled);
                    }
                }
                recv(shutdown) -> _ => return Some(self.interrupted()),
                default(wait) => {}
            }
        }
    }

    fn timeout(&self, task: &Task) -> Option<Duration> {
        task.timeout_secs
            .map(Duration::from_secs)
            .or(self.shared.opts.timeout)
            .or(self.shared.config.timeout_secs.map(Duration::from_secs))
    }

    fn cancelled(&self) -> bool {
        let who = cancel::requested(&self.slot.paths, &self.id, true);
        if let Some(who) = &who {
            tracing::info!("task {} cancelled ({who})", self.id);
        }
        who.is_some()
    }

    fn interrupted(&self) -> Stop {
        Stop::Interrupted(format!(
            "interrupted: worker {} (pid {}) was asked to stop",
            self.slot.slot(),
            std::process::id()
        ))
    }

    /// Renew every lock held (other hosts judge each by its heartbeat), then refresh
    /// the status. A lock found taken over fences us: `Stop::Fenced`, and the status —
    /// no longer ours to write — is left alone.
    fn beat(
        &self,
        status: &mut Status,
        agent: &Agent,
        lock: &mut DirLock,
        hold: &mut Hold,
    ) -> Option<Stop> {
        for l in std::iter::once(lock).chain(hold.locks_mut()) {
            match l.heartbeat() {
                Ok(()) => {}
                Err(e @ Error::LockLost { .. }) => return Some(fenced(&e, l.epoch())),
                Err(e) => tracing::warn!("renewing lock: {e}"),
            }
        }
        status.heartbeat_at = Some(now_rfc3339());
        status.timestamp = now_rfc3339();
        status.output_bytes = Some(agent.output_bytes());
        if let Err(e) = self.slot.board.publish(status.clone()) {
            tracing::warn!("heartbeat: {e}");
        }
        None
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
        if self.shared.opts.preset.streams() {
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
    fn end(
        &self,
        mut r: TaskResult,
        lock: DirLock,
        hold: Hold,
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
        if !self.write_end(&mut r, hold.queued, lock.epoch(), shutdown)? {
            tracing::warn!(
                "stopping with the result of task {} unwritten (the disk is full); it stays in \
                 hand, and recovery ends it when a worker starts on this slot again",
                r.task_id
            );
            return Ok(Pickup::Stop);
        }
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
        drop(lock);
        drop(hold);
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
            epoch,
        };
        let mut backoff = space::FIRST_BACKOFF;
        let mut waited = false;
        loop {
            let err = match ledger.finish(r, |st| self.slot.board.publish(st)) {
                Ok(_) => {
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

/// Why a holder is fenced: `lost` names the lock taken over.
fn fenced(lost: &Error, epoch: u64) -> Stop {
    Stop::Fenced(format!(
        "interrupted: fenced at epoch {epoch}: {lost}; the agent was stopped and nothing \
         of this run is published as the task's result"
    ))
}

/// `None` while every lock the task holds is still ours; else why not.
fn still_held(lock: &DirLock, hold: &Hold) -> Option<String> {
    let held = [Some(lock), hold.key_lock.as_ref(), hold.run_slot.as_ref()];
    held.into_iter().flatten().find_map(|l| match l.check() {
        Err(e @ Error::LockLost { .. }) => match fenced(&e, l.epoch()) {
            Stop::Fenced(why) => Some(why),
            _ => None,
        },
        _ => None,
    })
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
