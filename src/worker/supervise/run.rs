//! A claimed task's run: what it is (`Run`), why its agent stopped (`Stop`), and the
//! helpers the supervision's steps share (whether its locks are still ours, going back).

use std::time::{Duration, Instant, SystemTime};

use crate::agent::{self, AgentCommand};
use crate::dirlock::DirLock;
use crate::error::Error;
use crate::preset::Preset;
use crate::protocol::{rfc3339, Task, TaskId, WorktreeRecord};
use crate::worker::admit::Hold;
use crate::worker::slot_server::{Shared, SlotServer};

/// Why the agent stopped before finishing on its own.
pub(super) enum Stop {
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
pub(super) struct Run<'a> {
    pub(super) shared: &'a Shared,
    pub(super) slot: &'a SlotServer,
    pub(super) id: TaskId,
    pub(super) started_at: String,
    pub(super) clock: Instant,
    pub(super) attempt: u32,
    /// The prompt's start, so the worker's log lines say what the task is.
    pub(super) preview: String,
    /// The preset that runs it (the task's `agent`, else the worker's default) and its
    /// command line; `None` when this worker does not serve the preset the task names.
    pub(super) agent: Option<(Preset, AgentCommand)>,
    /// The task's, else the worker's, else the root's.
    pub(super) timeout: Option<Duration>,
    /// Its key and group: what a pause made `--now` may name.
    pub(super) key: Option<String>,
    pub(super) group: Option<String>,
    /// The round of an `until` task (1 before the first check): a later round is never
    /// put back to start afresh, which would lose the earlier rounds' work.
    pub(super) round: std::cell::Cell<u32>,
    /// Whether an agent of it was given the permission tool that asks a person.
    pub(super) asks: std::cell::Cell<bool>,
}

impl<'a> Run<'a> {
    /// The run of `task`, claimed just now, with what it takes from the worker.
    pub(super) fn new(shared: &'a Shared, slot: &'a SlotServer, task: &Task) -> Run<'a> {
        Run {
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
            round: std::cell::Cell::new(1),
            asks: std::cell::Cell::new(false),
        }
    }
}

/// The task went back where it came from (`back` says how): release its locks, remove
/// its worktree and ready the output log for the next task.
pub(super) fn went_back(
    slot: &SlotServer,
    tree: Option<&WorktreeRecord>,
    lock: DirLock,
    hold: Hold,
    back: &str,
) {
    drop(lock);
    drop(hold);
    if let Some(t) = tree {
        crate::worktree::remove(&t.repo, &t.path, Some(&t.branch));
        crate::worker::worktree::forget_record(&slot.paths.dir);
    }
    if let Err(e) = agent::ready_log(&slot.paths.output_log()) {
        tracing::warn!("{e}");
    }
    tracing::info!("{back}");
}

/// Why a holder is fenced: `lost` names the lock taken over.
pub(super) fn fenced(lost: &Error, epoch: u64) -> Stop {
    Stop::Fenced(format!(
        "interrupted: fenced at epoch {epoch}: {lost}; the agent was stopped and nothing \
         of this run is published as the task's result"
    ))
}

/// `None` while every lock the task holds is still ours; else why not.
pub(super) fn still_held(lock: &DirLock, hold: &Hold) -> Option<String> {
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
