//! Supervising a claimed task's agent: spawn, heartbeat, cancel, timeout, its result.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, Receiver};
use nix::sys::signal::Signal;

use super::admit::Hold;
use super::fence::{self, Fence};
use super::{cancel, space, Pickup, Shared, SlotServer, ENV_WORKER};
use crate::agent::{self, Agent, AgentCommand, AgentOutput, Launch};
use crate::dirlock::DirLock;
use crate::env::{ENV_CONTEXT, ENV_DEPTH, ENV_HOME};
use crate::error::{Error, Result};
use crate::fsio;
use crate::ledger::Ledger;
use crate::preset::{Preset, RateLimit};
mod command;

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
    /// A pause made `--now` applies to it (names what was paused): it goes back where
    /// it came from, to run once resumed.
    Paused(String),
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
    /// The preset that runs it (the task's `agent`, else the worker's default) and its
    /// command line; `None` when this worker does not serve the preset the task names.
    agent: Option<(Preset, AgentCommand)>,
    /// The task's, else the worker's, else the root's.
    timeout: Option<Duration>,
    /// Its key and group: what a pause made `--now` may name.
    key: Option<String>,
    group: Option<String>,
}

/// How long a worker whose inbox its owner filled waits, once it asked, for the owner
/// to take that task back so that its stopped one can go back there.
const OWNER_GIVES_BACK: Duration = Duration::from_secs(2);

/// How long a task waits out a passing shortage before its agent can start.
const TRANSIENT_SPAWN_BOUND: Duration = Duration::from_secs(120);

/// Why the agent of a task was not started.
enum NotStarted {
    /// For good: the task ends with this result.
    Failed(Box<TaskResult>),
    /// The worker was asked to stop while the task waited to start.
    Stopping(Box<TaskResult>),
}

/// A shortage that passes: processes (EAGAIN), memory, descriptors.
fn is_transient(e: &crate::error::Error) -> bool {
    use nix::libc::{EAGAIN, EMFILE, ENFILE, ENOMEM};
    match e {
        crate::error::Error::Spawn { source, .. } => {
            matches!(
                source.raw_os_error(),
                Some(EAGAIN | ENOMEM | ENFILE | EMFILE)
            )
        }
        _ => false,
    }
}

/// Run a claimed task to its one result. `Pickup::Stop` if asked to shut down.
pub(crate) fn run(
    shared: &Shared,
    slot: &SlotServer,
    mut task: Task,
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
        agent: shared
            .opts
            .agent_for(task.agent.as_deref())
            .map(|(p, c)| (p, c.clone())),
        timeout: task
            .timeout_secs
            .map(Duration::from_secs)
            .or(shared.opts.timeout)
            .or(shared.config.timeout_secs.map(Duration::from_secs)),
        key: task.key.clone(),
        group: task.group.clone(),
    };
    let preset = run.agent.as_ref().map_or(shared.opts.preset, |(p, _)| *p);
    if let Some(who) = cancel::requested(&slot.paths, &run.id, false) {
        tracing::info!("task {} was cancelled before it started ({who})", run.id);
        let r = TaskResult::failed(run.id.clone(), Outcome::Cancelled, "cancelled");
        return run.end(r, lock, hold, shutdown);
    }
    // Before the agent exists: should this worker die, the key and run slot stay taken
    // while the task's processes outlive it.
    for held in hold.locks_mut() {
        if let Err(e) = held.record_task(&run.id.to_string()) {
            tracing::warn!(
                "cannot record task {} in {}: {e}",
                run.id,
                held.path().display()
            );
        }
    }
    let tree = match super::worktree::prepare(shared, &slot.paths, &mut task, &mut hold) {
        Ok(t) => t,
        Err(r) => return run.end(*r, lock, hold, shutdown),
    };
    let cwd = tree.as_ref().map(|t| t.cwd.as_path());
    let concluded = |mut r: Box<TaskResult>| {
        if let Some(t) = &tree {
            r.worktree = Some(super::worktree::conclude(t, &task, r.outcome));
        }
        r
    };
    let command = match run.command(&task) {
        Ok(c) => c,
        Err(r) => return run.end(*concluded(r), lock, hold, shutdown),
    };
    let mut agent = match run.spawn_patiently(&task, &command, cwd, shutdown) {
        Ok(a) => a,
        Err(NotStarted::Failed(r)) => return run.end(*concluded(r), lock, hold, shutdown),
        Err(NotStarted::Stopping(r)) => {
            run.end(*concluded(r), lock, hold, shutdown)?;
            return Ok(Pickup::Stop);
        }
    };
    // From here until the agent is reaped, a thread of its own stops it should the
    // locks go unrenewed for too long (a hung mount blocks the heartbeat, not that
    // thread). Armed before anything else: even a log line may block in a hung mount.
    let fence = fence::arm(
        agent.pid(),
        fence::Policy::for_lease(shared.lock_opts.lease, shared.opts.kill_grace),
        renewed_at(&lock, &hold),
    );
    // Its inbox is empty again: an owner keeping it filled may deliver the next task.
    shared.tell_owner();
    tracing::info!(
        "started \"{}\" · task {} · pid {} · {}us after claim",
        run.preview,
        run.id,
        agent.pid(),
        run.clock.elapsed().as_micros()
    );
    let stop = run.watch(&mut agent, &mut lock, &mut hold, &fence, wake, shutdown);
    // Disarmed before the agent's leader is reaped (`finish`): the group id stays its own.
    drop(fence);
    if stop.is_some() {
        agent.stop(shared.opts.kill_grace);
    }
    let shutting_down = matches!(stop, Some(Stop::Interrupted(_)));
    let out = agent.finish();
    if let Some(Stop::Paused(what)) = &stop {
        if let Some(back) = run.put_back_paused(&task, what, &lock, &hold)? {
            drop(lock);
            drop(hold);
            if let Some(t) = &tree {
                // It runs again once resumed, in a worktree made afresh then.
                crate::worktree::remove(&t.repo, &t.path, Some(&t.branch));
                super::worktree::forget_record(&slot.paths.dir);
            }
            if let Err(e) = agent::ready_log(&slot.paths.output_log()) {
                tracing::warn!("{e}");
            }
            tracing::info!("{back}");
            return Ok(if shutting_down {
                Pickup::Stop
            } else {
                Pickup::Ran
            });
        }
    }
    let stopped = stop.is_some();
    let mut result = run.build_result(&out, stop);
    let limit = (!stopped && !result.success)
        .then(|| preset.rate_limit(&result.output, out.limit_event.as_deref()))
        .flatten();
    if stopped {
        preset.lift_stopped(&mut result, &run.slot.paths.task_log(&run.id));
    }
    preset.interpret(&mut result);
    result.agent = Some(preset.to_string());
    if let Some(limit) = limit {
        if let Some(deferred) = run.defer(&task, preset, &limit, &lock, &hold)? {
            drop(lock);
            drop(hold);
            if let Some(t) = &tree {
                // It runs again after the reset, in a worktree made afresh then.
                crate::worktree::remove(&t.repo, &t.path, Some(&t.branch));
                super::worktree::forget_record(&slot.paths.dir);
            }
            if let Err(e) = agent::ready_log(&slot.paths.output_log()) {
                tracing::warn!("{e}");
            }
            tracing::info!("{deferred}");
            return Ok(Pickup::Ran);
        }
        limit.note_gave_up(&mut result, task.deferrals.unwrap_or(0));
    }
    if let Some(t) = &tree {
        let stopped = result
            .outcome
            .filter(|o| *o != Outcome::Success && *o != Outcome::Failure);
        result.worktree = Some(super::worktree::conclude(t, &task, stopped));
        super::worktree::fail_if_refused_and_unchanged(&mut result);
    }
    let ended = run.end(result, lock, hold, shutdown)?;
    Ok(if shutting_down { Pickup::Stop } else { ended })
}

impl Run<'_> {
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
    /// Start the agent; a shortage that passes (EAGAIN past a process limit, no memory
    /// or descriptors for a moment) is waited out with backoff, holding the task, for up
    /// to [`TRANSIENT_SPAWN_BOUND`]: only a lasting error fails a task that never started.
    fn spawn_patiently(
        &self,
        task: &Task,
        command: &AgentCommand,
        worktree_cwd: Option<&Path>,
        shutdown: &Receiver<()>,
    ) -> std::result::Result<Agent, NotStarted> {
        let cwd = match worktree_cwd {
            Some(dir) => dir,
            None => self.cwd(task).map_err(NotStarted::Failed)?,
        };
        let deadline = Instant::now() + TRANSIENT_SPAWN_BOUND;
        let mut pause = Duration::from_millis(20);
        loop {
            let e = match self.spawn(task, command, cwd) {
                Ok(agent) => return Ok(agent),
                Err(e) => e,
            };
            let failed =
                |outcome, why: String| Box::new(TaskResult::failed(self.id.clone(), outcome, why));
            if !is_transient(&e) || Instant::now() + pause > deadline {
                return Err(NotStarted::Failed(failed(Outcome::Failure, e.to_string())));
            }
            tracing::warn!(
                "task {} waits to start: {e}; trying again in {}ms",
                self.id,
                pause.as_millis()
            );
            if shutdown.recv_timeout(pause).is_ok() {
                return Err(NotStarted::Stopping(failed(
                    Outcome::Interrupted,
                    format!("interrupted: the worker stopped before the agent could start ({e})"),
                )));
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    fn spawn(&self, task: &Task, command: &AgentCommand, cwd: &Path) -> Result<Agent> {
        let context = task
            .context
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_else(|| "null".into());
        let (opts, paths) = (&self.shared.opts, &self.slot.paths);
        let preset = self.agent.as_ref().map_or(opts.preset, |(p, _)| *p);
        let command = &super::approval::arm(self.shared, paths, &self.id, preset, command.clone());
        let stream_raw = self.streams().then(|| paths.output_stream());
        // The program found on PATH at start is the default preset's; another preset's
        // is looked up as it starts.
        let default = self
            .agent
            .as_ref()
            .is_some_and(|(_, c)| c.program == opts.agent.program);
        let launch = Launch {
            command,
            program_path: self.shared.agent_path.as_deref().filter(|_| default),
            cwd,
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
            task_env: task.env.clone().into_iter().collect(),
            prompt: task.prompt.clone(),
            output_log: &paths.output_log(),
            inline_cap: opts.inline_output,
            log_cap: opts.log_cap,
            stream_raw: stream_raw.as_deref(),
            // Its thread reads the slot's watcher itself: it reads the agent's output too.
            serve_inline: self.slot.inline.is_some(),
        };
        // The agent runs only once its record names it, so recovery can always find it.
        Agent::spawn(launch, &paths.agent_record())
    }

    /// Whether the task's agent prints an event stream.
    fn streams(&self) -> bool {
        self.agent.as_ref().is_some_and(|(p, _)| p.streams())
    }

    /// The agent hit a usage limit with a reset time: put the task back to wait for it
    /// (same attempt; nothing is published), and record the limit root-wide so no
    /// worker starts a task of this preset before then. `None` when it is not deferred
    /// (turned off, or the inbox already holds another task): it fails as it is.
    ///
    /// Crash safety: `running.json` is first rewritten (durably) with `notBefore`, then
    /// moved in one rename — into `queue/pending/` (a queue task) or back to the inbox
    /// without replacing (`RENAME_NOREPLACE`; an inbox task) — so the task is in exactly
    /// one place at every instant. A worker dying between the two steps leaves a
    /// `running.json` whose `notBefore` is ahead, which recovery recognises (a task is
    /// never claimed before its `notBefore`) and finishes deferring.
    fn defer(
        &self,
        task: &Task,
        preset: Preset,
        limit: &RateLimit,
        lock: &DirLock,
        hold: &Hold,
    ) -> Result<Option<String>> {
        let shared = self.shared;
        if !shared.opts.defer_rate_limited || !shared.config.defer_rate_limited() {
            return Ok(None);
        }
        let deferrals = task.deferrals.unwrap_or(0);
        let Some(until) = limit.next_run(deferrals, SystemTime::now()) else {
            return Ok(None);
        };
        if still_held(lock, hold).is_some() {
            return Ok(None);
        }
        let root = &shared.opts.root;
        if let Err(e) = crate::queue::limits::record(
            root,
            &preset.to_string(),
            until,
            &limit.message,
            Some(&self.id),
        ) {
            tracing::warn!("recording the {preset} usage limit: {e}");
        }
        let mut t = task.clone();
        t.id = Some(self.id.clone());
        t.not_before = Some(rfc3339(until));
        t.deferrals = Some(deferrals + 1);
        let until_text = crate::protocol::rfc3339(until);
        if !self.put_back(&t, hold)? {
            tracing::warn!(
                "task {}: cannot wait in the inbox for the reset ({until_text}): another \
                 task was delivered meanwhile; it fails instead",
                self.id
            );
            return Ok(None);
        }
        let mut idle = Status::new(WorkerState::Idle);
        idle.problem = Some(format!(
            "{preset} is rate-limited until {}: {}",
            crate::queue::limits::hh_mm(until),
            limit.message
        ));
        if let Err(e) = self.slot.board.publish(idle) {
            tracing::warn!("{e}");
        }
        Ok(Some(format!(
            "deferred \"{}\" · task {}: {preset} is rate-limited until {until_text} ({}); it \
             waits {} and runs then (deferral {} of at most {})",
            self.preview,
            self.id,
            limit.message,
            if hold.queued {
                "in the queue"
            } else {
                "in the inbox"
            },
            deferrals + 1,
            crate::preset::MAX_DEFERRALS
        )))
    }

    /// Put `t` (this run's task, as it is to run next) back where it came from, nothing
    /// published: `running.json` rewritten durably, then moved in one rename — into
    /// `queue/pending/` (a queue task) or back to the inbox without replacing (an inbox
    /// task). `false`: the inbox holds another task meanwhile, and `t` stays in hand.
    fn put_back(&self, t: &Task, hold: &Hold) -> Result<bool> {
        let running = self.slot.paths.running();
        if hold.queued {
            crate::queue::requeue(&self.shared.opts.root, &running, t)?;
            return Ok(true);
        }
        fsio::write_json(&running, t, fsio::Durability::Durable)?;
        let inbox = self.slot.paths.task();
        let taken = |e: &Error| e.io_kind() == Some(std::io::ErrorKind::AlreadyExists);
        let mut asked: Option<Instant> = None;
        loop {
            match fsio::rename_noreplace(&running, &inbox) {
                Ok(()) => return fsio::fsync_dir(&self.slot.paths.dir).map(|()| true),
                Err(e) if !taken(&e) => return Err(e),
                Err(_) => {}
            }
            // A run that keeps its workers' inboxes filled put the next task there: it
            // takes that one back when asked, in a moment.
            match asked {
                None if self.shared.ask_owner_for_inbox(self.slot.slot()) => {
                    asked = Some(Instant::now());
                }
                Some(at) if at.elapsed() < OWNER_GIVES_BACK => {}
                _ => return Ok(false),
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A pause made `--now` stopped the agent: put the task back (same attempt) to run
    /// once resumed. `None` when it cannot go back (a lock was lost, or the inbox holds
    /// another task): it ends `interrupted`.
    fn put_back_paused(
        &self,
        task: &Task,
        what: &str,
        lock: &DirLock,
        hold: &Hold,
    ) -> Result<Option<String>> {
        if still_held(lock, hold).is_some() {
            return Ok(None);
        }
        let mut t = task.clone();
        t.id = Some(self.id.clone());
        if !self.put_back(&t, hold)? {
            tracing::warn!(
                "task {}: stopped by the pause of {what}, but cannot go back to the inbox: \
                 another task was delivered meanwhile; it ends interrupted",
                self.id
            );
            return Ok(None);
        }
        let whence = if hold.queued {
            "the queue"
        } else {
            "the inbox"
        };
        let mut idle = Status::new(WorkerState::Idle);
        idle.problem = Some(format!(
            "task {} interrupted by the pause of {what}; back in {whence}",
            self.id
        ));
        if let Err(e) = self.slot.board.publish(idle) {
            tracing::warn!("{e}");
        }
        Ok(Some(format!(
            "interrupted \"{}\" · task {}: {what} was paused --now; it waits in {whence} and \
             runs again once resumed",
            self.preview, self.id
        )))
    }

    /// The pause made `--now` that applies to this run, if any.
    fn paused_now(&self) -> Option<Stop> {
        crate::queue::pause::Paused::load(&self.shared.opts.root)
            .stops(
                self.slot.slot().0,
                self.key.as_deref(),
                self.group.as_deref(),
            )
            .map(|t| Stop::Paused(t.to_string()))
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
        agent: &mut Agent,
        lock: &mut DirLock,
        hold: &mut Hold,
        fence: &Fence,
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
        let timeout = self.timeout;
        // A timeout too large to represent is no timeout.
        let deadline = timeout.and_then(|t| self.clock.checked_add(t));
        // Other hosts judge the locks by their lease: renewed at least every quarter of it.
        let heartbeat = self
            .shared
            .opts
            .heartbeat
            .min(crate::gate::renew_every(self.shared.lock_opts.lease));
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
                if let Some(paused) = self.paused_now() {
                    return Some(paused);
                }
                if let Some(fenced) = self.beat(&mut status, agent, lock, hold) {
                    return Some(fenced);
                }
                fence.renewed(renewed_at(lock, hold));
                next_beat = now + heartbeat;
            }
            let mut wait = next_beat.saturating_duration_since(now);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            let event = match &self.slot.inline {
                // This thread reads the slot's watcher (and, when it serves the agent, its
                // pidfd and pipes). Without a pidfd to poll (a kernel without
                // `pidfd_open`) a helper serves the agent and tells its exit on the
                // channel, looked at between short waits.
                Some(inline) => {
                    let (exited, stop) = match agent.exit_fd() {
                        Some(exit_fd) => {
                            // The pidfd first, then the output pipes.
                            let mut fds = vec![exit_fd];
                            fds.extend(agent.io_fds());
                            let seen = inline.wait_once(&fds, wait);
                            if seen.extra & !1 != 0 {
                                agent.pump();
                            }
                            (seen.extra & 1 != 0, seen.stop)
                        }
                        None => {
                            let seen = inline.wait_once(&[], wait.min(EXIT_LOOK));
                            (agent.exit_channel().try_recv().is_ok(), seen.stop)
                        }
                    };
                    if exited {
                        Watched::Exit
                    } else if stop {
                        // Taken, as the select below takes it: a second stop request
                        // is then one more message (a full disk's retry waits for it).
                        let _ = shutdown.try_recv();
                        Watched::Stop
                    } else if wake.try_recv().is_ok() {
                        Watched::Wake
                    } else {
                        Watched::Quiet
                    }
                }
                None => select! {
                    recv(agent.exit_channel()) -> _ => Watched::Exit,
                    recv(wake) -> _ => Watched::Wake,
                    recv(shutdown) -> _ => Watched::Stop,
                    default(wait) => Watched::Quiet,
                },
            };
            match event {
                Watched::Exit => {
                    agent.note_exit();
                    // Stopped by its fence: its locks went unrenewed for too long.
                    if let Some(why) = fence.fired() {
                        tracing::error!("task {}: {why}", self.id);
                        return Some(Stop::Fenced(why));
                    }
                    // A service manager often signals the whole group at once: the agent
                    // dying of that same stop request is an interruption, not a failure.
                    return (!shutdown.is_empty()).then(|| self.interrupted());
                }
                // A byte from a woken worker's owner is news of its inbox (the next task
                // put behind this one), not of a cancel or pause: those wait for the beat.
                Watched::Wake if self.shared.tell_owner.is_some() => {}
                Watched::Wake => {
                    if self.cancelled() {
                        return Some(Stop::Cancelled);
                    }
                    if let Some(paused) = self.paused_now() {
                        return Some(paused);
                    }
                }
                Watched::Stop => return Some(self.interrupted()),
                Watched::Quiet => {}
            }
        }
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
        // The result tells of the worktree now; the slot's record of it is done.
        super::worktree::forget_record(&self.slot.paths.dir);
        super::approval::clear(&self.slot.paths.dir);
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
        // The root's callback, if any: started now, watched and reaped by a thread.
        super::callback::run(
            &self.shared.config,
            &self.shared.opts.root,
            self.slot.slot(),
            &r,
            self.slot.paths.result_for(&r.task_id),
        );
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
        let mut trimmed = false;
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

/// Why a holder is fenced: `lost` names the lock taken over.
/// How often an agent's exit is looked for where it cannot be polled (see [`Run::watch`]).
const EXIT_LOOK: Duration = Duration::from_millis(20);

/// What ended one wait of [`Run::watch`].
enum Watched {
    /// The agent's leader exited.
    Exit,
    /// A change worth a look: a cancel, a pause.
    Wake,
    /// The worker is told to stop.
    Stop,
    /// The time ran out, or only changes of no interest came.
    Quiet,
}

fn fenced(lost: &Error, epoch: u64) -> Stop {
    Stop::Fenced(format!(
        "interrupted: fenced at epoch {epoch}: {lost}; the agent was stopped and nothing \
         of this run is published as the task's result"
    ))
}

/// When the least recently renewed of the task's locks was last renewed
/// ([`DirLock::renewed_at`]): what its fence counts from.
fn renewed_at(lock: &DirLock, hold: &Hold) -> Duration {
    std::iter::once(lock)
        .chain(hold.locks())
        .map(DirLock::renewed_at)
        .min()
        .unwrap_or_default()
}

/// `None` while every lock the task holds is still ours; else why not.
fn still_held(lock: &DirLock, hold: &Hold) -> Option<String> {
    std::iter::once(lock)
        .chain(hold.locks())
        .find_map(|l| match l.check() {
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
