//! The `wait` verb (`conductor wait`, and what `submit`/`send`/`retry --wait` and the MCP `wait` tool share): a typed request, a stream of events as tasks finish, and an end that always says why.
//!
//! Every wait ends: with the results, with its timeout (the task carries on), or with a
//! message naming who must act (no live worker serves it, or none is left to recover a
//! task whose worker died). `--any` is [`super::wait_any`].

use std::time::{Duration, Instant, SystemTime};

use super::wait_any::{wait_any, AnyEnd};
use crate::hooks::Event;
use crate::inspect::{self, task_files::TaskSource};
use crate::wait::OnDeath;
use crate::{Client, Error, Slot, TaskId, TaskResult};

/// What to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitTargets {
    /// These tasks, wherever they run, each in turn (with `any`: the first of them; with
    /// `any` and none, any task of the root).
    Tasks(Vec<TaskId>),
    /// A slot's task `id`, or with `None` its current one (running, else the one its
    /// status.json names, else the one waiting in its inbox).
    Slot {
        /// The worker slot.
        slot: Slot,
        /// The task; `None`: the slot's current one.
        id: Option<TaskId>,
    },
}

/// A wait, as the CLI's `wait` and its `--wait` options ask for it.
#[derive(Debug, Clone)]
pub struct WaitRequest {
    /// What to wait for.
    pub targets: WaitTargets,
    /// Give up after this long (one deadline for all); the tasks carry on. `None`: as
    /// long as it takes.
    pub timeout: Option<Duration>,
    /// End at the first task finished, question asked or budget spent ([`super::wait_any`]).
    pub any: bool,
    /// With `any`: only news after this time wakes the wait.
    pub since: Option<SystemTime>,
}

/// What a wait tells as it goes.
#[derive(Debug)]
pub enum WaitEvent<'a> {
    /// A slot wait found the slot's current task, and where.
    Current {
        /// The slot.
        slot: Slot,
        /// Its current task.
        id: &'a TaskId,
        /// Where it was found.
        source: &'a TaskSource,
    },
    /// The task is queued and held back (a pause, its group's cap): why. The wait goes
    /// on until that lets it run.
    Held {
        /// The task.
        id: &'a TaskId,
        /// Why it does not run.
        why: &'a str,
    },
    /// The worker died with the task in hand (`Error::WorkerDied`): the wait goes on for
    /// its recovery's result.
    Died(&'a Error),
    /// A task finished: its result.
    Finished(&'a TaskResult),
    /// The timeout passed before task `id` (`None`: the slot's task, or with `any` any
    /// of them) finished; it carries on. `Error::Timeout`, over the whole timeout.
    TimedOut {
        /// The task waited for, when waited for by id.
        id: Option<&'a TaskId>,
        /// The timeout.
        error: &'a Error,
    },
    /// With `any`: something wants a person (a question asked, a budget spent).
    Told(&'a Event),
}

/// How a wait ended.
#[derive(Debug)]
pub enum WaitEnd {
    /// Every awaited task was told of (finished or timed out); with `any`, the first news.
    Done,
    /// A slot wait with nothing to wait for: the slot's newest result's task, if any.
    NothingOnSlot {
        /// The slot.
        slot: Slot,
        /// The task of its newest result.
        newest: Option<TaskId>,
    },
    /// Nobody will answer: no live worker serves it (`Error::NobodyServes`), or its
    /// worker died and no live worker is left to recover the task (`Error::WorkerDied`).
    /// The message names who must act.
    Nobody(Error),
}

/// Run the wait `request` asks for, telling `event` as it goes (`false` from it ends the
/// wait: the reader has gone).
pub fn wait(
    client: &Client,
    request: &WaitRequest,
    event: &mut dyn FnMut(WaitEvent<'_>) -> crate::Result<bool>,
) -> crate::Result<WaitEnd> {
    match &request.targets {
        WaitTargets::Tasks(ids) if request.any => {
            let got = match wait_any(client, ids, request.timeout, request.since)? {
                AnyEnd::Finished(r) => Got::Result(r),
                AnyEnd::Told(e) => {
                    event(WaitEvent::Told(&e))?;
                    return Ok(WaitEnd::Done);
                }
                AnyEnd::TimedOut(e) => Got::TimedOut(e),
                AnyEnd::Nobody(e) => Got::Nobody(e),
            };
            Ok(told(got, None, event)?.end())
        }
        WaitTargets::Slot { .. } if request.any => Err(Error::BadArgument {
            field: "any".into(),
            reason: "--any waits for task ids (`conductor wait --any ID ID…`), not a slot"
                .into(),
        }),
        WaitTargets::Tasks(ids) => tasks(client, ids, request.timeout, event),
        WaitTargets::Slot { slot, id } => {
            let id = match id {
                Some(id) => id.clone(),
                None => match inspect::current_task(client.root(), *slot)? {
                    Some((id, source)) => {
                        let current = WaitEvent::Current {
                            slot: *slot,
                            id: &id,
                            source: &source,
                        };
                        if !event(current)? {
                            return Ok(WaitEnd::Done);
                        }
                        id
                    }
                    None => {
                        let newest = client.read_result(*slot).ok().flatten();
                        return Ok(WaitEnd::NothingOnSlot {
                            slot: *slot,
                            newest: newest.map(|r| r.task_id),
                        });
                    }
                },
            };
            let got = await_result(request.timeout, event, |on_death, left| {
                client.wait_for_result_with(*slot, &id, left, on_death)
            })?;
            Ok(told(got, None, event)?.end())
        }
    }
}

/// Each task of `ids` in turn, one deadline for all.
fn tasks(
    client: &Client,
    ids: &[TaskId],
    timeout: Option<Duration>,
    event: &mut dyn FnMut(WaitEvent<'_>) -> crate::Result<bool>,
) -> crate::Result<WaitEnd> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    for id in ids {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if let Some(why) = held_reason(client, id) {
            if !event(WaitEvent::Held { id, why: &why })? {
                return Ok(WaitEnd::Done);
            }
        }
        let got = await_result(left, event, |on_death, left| {
            client.wait_for_task_with(id, left, on_death)
        })?;
        // One deadline for all: the tasks after a timeout are told of at once.
        if let Next::End(end) = told(got, Some(id), event)? {
            return Ok(end);
        }
    }
    Ok(WaitEnd::Done)
}

/// Why queued task `id` does not run (a pause, its group's cap), if it is held back.
pub fn held_reason(client: &Client, id: &TaskId) -> Option<String> {
    crate::queue::Queue::new(client.root().clone())
        .held_reason(id)
        .ok()
        .flatten()
}

/// What one task's wait came to.
#[derive(Debug)]
pub enum Got {
    /// Its result.
    Result(Box<TaskResult>),
    /// The timeout passed first (`Error::Timeout` over the whole timeout).
    TimedOut(Error),
    /// Nobody will answer (see [`WaitEnd::Nobody`]).
    Nobody(Error),
}

/// After one task's wait: on to the next, or the whole wait's end.
enum Next {
    Go,
    End(WaitEnd),
}

impl Next {
    fn end(self) -> WaitEnd {
        match self {
            Next::Go => WaitEnd::Done,
            Next::End(end) => end,
        }
    }
}

/// Tell what a task's wait came to; nobody to answer, or a reader gone (`false` from
/// `event`), ends the whole wait.
fn told(
    got: Got,
    id: Option<&TaskId>,
    event: &mut dyn FnMut(WaitEvent<'_>) -> crate::Result<bool>,
) -> crate::Result<Next> {
    let go_on = match got {
        Got::Result(r) => event(WaitEvent::Finished(&r))?,
        Got::TimedOut(e) => event(WaitEvent::TimedOut { id, error: &e })?,
        Got::Nobody(e) => return Ok(Next::End(WaitEnd::Nobody(e))),
    };
    Ok(if go_on { Next::Go } else { Next::End(WaitEnd::Done) })
}

/// Wait with `wait` (called with what to do on a death and the time left) for one
/// result: when the worker dies with the task, tell it at once ([`WaitEvent::Died`]) and
/// wait on for recovery's result; nobody serving the wait, or nobody left to recover the
/// task, is [`Got::Nobody`]; `timeout` passing first, [`Got::TimedOut`].
pub fn await_result(
    timeout: Option<Duration>,
    event: &mut dyn FnMut(WaitEvent<'_>) -> crate::Result<bool>,
    wait: impl Fn(OnDeath, Duration) -> crate::Result<TaskResult>,
) -> crate::Result<Got> {
    let started = Instant::now();
    let total = timeout.unwrap_or(Duration::MAX);
    let outcome = match wait(OnDeath::Fail, total) {
        Err(e @ Error::WorkerDied { .. }) => {
            event(WaitEvent::Died(&e))?;
            wait(
                OnDeath::AwaitRecovery,
                total.saturating_sub(started.elapsed()),
            )
        }
        other => other,
    };
    match outcome {
        Ok(r) => Ok(Got::Result(Box::new(r))),
        Err(Error::Timeout { what, .. }) => Ok(Got::TimedOut(Error::Timeout { what, after: total })),
        Err(e) => Got::of_error(e),
    }
}

impl Got {
    /// What a wait that ended with `e` came to: its timeout, nobody to answer it, or
    /// (`Err`) a failure of the wait itself.
    pub fn of_error(e: Error) -> crate::Result<Got> {
        match e {
            e @ Error::Timeout { .. } => Ok(Got::TimedOut(e)),
            e @ (Error::NobodyServes { .. } | Error::WorkerDied { .. }) => Ok(Got::Nobody(e)),
            e => Err(e),
        }
    }
}
