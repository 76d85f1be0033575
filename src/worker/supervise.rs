//! Supervising a claimed task's agent: spawn, heartbeat, cancel, timeout, its result.

mod not_started;
mod put_back;
mod result;
mod round;
mod run;
mod until;
mod working;

use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use super::admit::Hold;
use super::fence::{self, Fence};
use super::cancel;
use super::slot_server::{Pickup, Shared, SlotServer};
use crate::agent::{Agent, AgentCommand, Launch};
use crate::dirlock::DirLock;
use crate::env::{ENV_CONTEXT, ENV_DEPTH, ENV_HOME, ENV_WORKER};
use crate::error::{Error, Result};
use not_started::{is_transient, NotStarted, TRANSIENT_SPAWN_BOUND};
use run::{fenced, went_back, Run, Stop};
mod command;

use crate::protocol::{
    now_rfc3339, Outcome, Status, Task, TaskId, TaskResult, WorkerState,
};

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
    let run = Run::new(shared, slot, &task);
    let preset = run.agent.as_ref().map_or(shared.opts.preset, |(p, _)| *p);
    if let Some(who) = cancel::requested(&slot.paths, &run.id, false) {
        tracing::info!("task {} was cancelled before it started ({who})", run.id);
        let r = TaskResult::failed(run.id.clone(), Outcome::Cancelled, "cancelled");
        return run.end(r, lock, hold, shutdown);
    }
    // Before the agent exists: should this worker die, the key and run slot stay taken
    // while the task's processes outlive it.
    record_task(&mut hold, &run.id);
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
    let mut rounds = until::Rounds::start(&run, &task);
    loop {
        let round_task = rounds.task(&task);
        let (out, stop) =
            match run.agent_round(&round_task, cwd, (&mut lock, &mut hold), wake, shutdown) {
                Ok(ran) => ran,
                Err(NotStarted::WentBack(b)) => {
                    return Ok(b.went_back(slot, tree.as_ref(), lock, hold))
                }
                Err(NotStarted::Failed(r)) => {
                    return run.end(*concluded(rounds.told(*r)), lock, hold, shutdown)
                }
                Err(NotStarted::Stopping(r)) => {
                    run.end(*concluded(rounds.told(*r)), lock, hold, shutdown)?;
                    return Ok(Pickup::Stop);
                }
            };
        let shutting_down = matches!(stop, Some(Stop::Interrupted(_)));
        let ended = run.round_result(&task, preset, &out, stop, rounds.first(), (&lock, &hold))?;
        let mut result = match ended {
            round::Ended::Result(r) => *r,
            round::Ended::WentBack(back) => {
                went_back(slot, tree.as_ref(), lock, hold, &back);
                return Ok(if shutting_down {
                    Pickup::Stop
                } else {
                    Pickup::Ran
                });
            }
        };
        let check_dir = cwd.map_or_else(|| run.cwd(&task).ok(), Some);
        let locks = (&mut lock, &mut hold);
        let next = rounds.after(
            &run,
            (&task, preset),
            &mut result,
            check_dir,
            locks,
            shutdown,
        );
        if next == until::Next::Again {
            continue;
        }
        result::conclude_worktree(tree.as_ref(), &task, &mut result);
        let ended = run.end(result, lock, hold, shutdown)?;
        rounds.ended();
        let stopping = shutting_down || next == until::Next::Stopping;
        return Ok(if stopping { Pickup::Stop } else { ended });
    }
}

/// Record the task in each lock it holds, so that should this worker die, the key and
/// run slot stay taken while the task's processes outlive it.
fn record_task(hold: &mut Hold, id: &TaskId) {
    for held in hold.locks_mut() {
        if let Err(e) = held.record_task(&id.to_string()) {
            tracing::warn!("cannot record task {id} in {}: {e}", held.path().display());
        }
    }
}

impl Run<'_> {
    /// The agent started: arm its fence, then tell the owner and the log. From here
    /// until the agent is reaped, the fence's thread of its own stops it should the
    /// locks go unrenewed for too long (a hung mount blocks the heartbeat, not that
    /// thread). Armed before anything else: even a log line may block in a hung mount.
    fn started(&self, agent: &Agent, lock: &DirLock, hold: &Hold) -> Fence {
        let shared = self.shared;
        let fence = fence::arm(
            agent.pid(),
            fence::Policy::for_lease(shared.lock_opts.lease, shared.opts.kill_grace),
            renewed_at(lock, hold),
        );
        // Its inbox is empty again: an owner keeping it filled may deliver the next task.
        shared.tell_owner_started();
        tracing::info!(
            "started \"{}\" · task {} · pid {} · {}us after claim",
            self.preview,
            self.id,
            agent.pid(),
            self.clock.elapsed().as_micros()
        );
        fence
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
    /// Start the agent; a shortage that passes (EAGAIN past a process limit, no memory
    /// or descriptors for a moment) is waited out with backoff, holding the task, for up
    /// to [`TRANSIENT_SPAWN_BOUND`]: only a lasting error fails a task that never started.
    fn spawn_patiently(
        &self,
        task: &Task,
        command: &AgentCommand,
        worktree_cwd: Option<&Path>,
        (lock, hold): (&DirLock, &Hold),
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
            if let Some(back) = self.put_back_short(task, &e, lock, hold) {
                return Err(NotStarted::WentBack(back));
            }
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
        let asks = super::approval::wanted(&self.shared.config, preset, &command.args);
        self.asks.set(self.asks.get() || asks);
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

    /// The pause made `--now` that applies to this run, if any.
    fn paused_now(&self) -> Option<Stop> {
        // The look's reading stands while the watcher told of no change in `paused/`:
        // the other slots' claims and locks wake this one several times a task.
        self.slot
            .shared_seen
            .pauses_now(&self.shared.opts.root, self.shared.idle_look())
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
        // Published once the agent has run for a moment, off the pickup path: the
        // agent's own record was written before it could run, and `running.json` says
        // the task is in hand. A task that ends sooner writes one status, its end.
        let mut status = self.working_status();
        status.agent_pid = Some(agent.pid());
        let mut working_due = Some(Instant::now() + working::AFTER);
        let timeout = self.timeout;
        // A timeout too large to represent is no timeout.
        let deadline = timeout.and_then(|t| self.clock.checked_add(t));
        // Other hosts judge the locks by their lease: renewed at least every quarter of it.
        let heartbeat = super::kept_lock::beat_every(self.shared);
        let mut next_beat = super::kept_lock::first_beat(lock, heartbeat);
        loop {
            let now = Instant::now();
            if let (Some(d), Some(t)) = (deadline, timeout) {
                if now >= d {
                    return Some(Stop::Timeout(t));
                }
            }
            // Before any beat, which publishes the status too.
            if working_due.is_some_and(|at| now >= at.min(next_beat)) {
                working_due = None;
                self.publish_working(&mut status, agent);
            }
            if now >= next_beat {
                // No event follows a `touch cancel`: look again on every beat.
                if let Some(stop) = self.cancelled_or_paused() {
                    return Some(stop);
                }
                if let Some(fenced) = self.beat(&mut status, agent.output_bytes(), lock, hold) {
                    return Some(fenced);
                }
                fence.renewed(renewed_at(lock, hold));
                next_beat = now + heartbeat;
            }
            let mut wait = next_beat
                .min(working_due.unwrap_or(next_beat))
                .saturating_duration_since(now);
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            let event = self.next_event(agent, wake, shutdown, wait);
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
                Watched::Wake if self.shared.opts.wake_pipes => {}
                Watched::Wake => {
                    if let Some(stop) = self.cancelled_or_paused() {
                        return Some(stop);
                    }
                }
                Watched::Stop => return Some(self.interrupted()),
                Watched::Quiet => {}
            }
        }
    }

    /// Wait at most `wait` for the agent's exit, a wake-up or a stop request (serving
    /// the agent's pipes meanwhile when this thread reads them).
    fn next_event(
        &self,
        agent: &mut Agent,
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
        wait: Duration,
    ) -> Watched {
        match &self.slot.inline {
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
        }
    }

    /// Whether the task was cancelled or paused `--now` (and so how it stops).
    fn cancelled_or_paused(&self) -> Option<Stop> {
        if self.cancelled() {
            return Some(Stop::Cancelled);
        }
        self.paused_now()
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
        output_bytes: u64,
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
        status.output_bytes = Some(output_bytes);
        if let Err(e) = self.slot.board.publish(status.clone()) {
            tracing::warn!("heartbeat: {e}");
        }
        None
    }
}

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

/// When the least recently renewed of the task's locks was last renewed
/// ([`DirLock::renewed_at`]): what its fence counts from.
fn renewed_at(lock: &DirLock, hold: &Hold) -> Duration {
    std::iter::once(lock)
        .chain(hold.locks())
        .map(DirLock::renewed_at)
        .min()
        .unwrap_or_default()
}

