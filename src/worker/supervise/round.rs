//! One round of a task's agent: made, started, watched to its end, and what its end means.

use std::path::Path;

use crossbeam_channel::Receiver;

use super::not_started::NotStarted;
use super::run::{Run, Stop};
use crate::agent::AgentOutput;
use crate::dirlock::DirLock;
use crate::error::Result;
use crate::preset::Preset;
use crate::protocol::{Task, TaskResult};
use crate::worker::admit::Hold;

/// How a round ended.
pub(super) enum Ended {
    /// With this result (the task's, unless another round follows).
    Result(Box<TaskResult>),
    /// The task went back where it came from (what to log): paused `--now`, or
    /// deferred past a usage limit.
    WentBack(String),
}

impl Run<'_> {
    /// One round: the agent made, started and watched to its end. Err: it did not start.
    pub(super) fn agent_round(
        &self,
        task: &Task,
        cwd: Option<&Path>,
        (lock, hold): (&mut DirLock, &mut Hold),
        wake: &Receiver<()>,
        shutdown: &Receiver<()>,
    ) -> std::result::Result<(AgentOutput, Option<Stop>), NotStarted> {
        let command = self.command(task).map_err(NotStarted::Failed)?;
        let mut agent = self.spawn_patiently(task, &command, cwd, (&*lock, &*hold), shutdown)?;
        let fence = self.started(&agent, lock, hold);
        let stop = self.watch(&mut agent, lock, hold, &fence, wake, shutdown);
        // Disarmed before the agent's leader is reaped (`finish`): the group id stays its own.
        drop(fence);
        if stop.is_some() {
            agent.stop(self.shared.opts.kill_grace);
        }
        Ok((agent.finish(), stop))
    }

    /// The round's result; a first round stopped by a pause made `--now`, or ended by a
    /// usage limit, goes back instead (a later round never does: its worktree holds the
    /// earlier rounds' work, which a fresh start would lose).
    pub(super) fn round_result(
        &self,
        task: &Task,
        preset: Preset,
        out: &AgentOutput,
        stop: Option<Stop>,
        first: bool,
        (lock, hold): (&DirLock, &Hold),
    ) -> Result<Ended> {
        if let (Some(Stop::Paused(what)), true) = (&stop, first) {
            if let Some(back) = self.put_back_paused(task, what, lock, hold)? {
                // It runs again once resumed, in a worktree made afresh then.
                return Ok(Ended::WentBack(back));
            }
        }
        let (mut result, limit) = self.result_of(preset, out, stop);
        if let (Some(limit), true) = (limit, first) {
            if let Some(deferred) = self.defer(task, preset, &limit, lock, hold)? {
                // It runs again after the reset, in a worktree made afresh then.
                return Ok(Ended::WentBack(deferred));
            }
            limit.note_gave_up(&mut result, task.deferrals.unwrap_or(0));
        }
        Ok(Ended::Result(Box::new(result)))
    }
}
