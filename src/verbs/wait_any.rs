//! `wait --any [TASK_ID…]` as a verb: wake at the first of the given tasks (or any task of the root) to finish or need a person.
//!
//! With ids, each is waited for by a thread of its own exactly as `wait ID` waits
//! (through a dead worker's recovery; nobody serving it ends that thread's wait), and
//! one more thread watches the root for a question from one of them and for a daily
//! budget spent. With none, that one thread is the whole wait: any task whose result
//! comes out after the wait began, any question waiting, any budget spent after it began.

use std::time::{Duration, SystemTime};

use crossbeam_channel::Sender;

use crate::hooks::news::{News, Seen};
use crate::hooks::Event;
use crate::wait::{Awaited, OnDeath, Vigil};
use crate::{Client, Error, TaskId, TaskResult};

/// What woke the wait.
enum Woke {
    Finished(Box<TaskResult>),
    Told(Event),
    /// An id's wait that ended without its result (timeout, nobody serves it).
    Ended(Error),
    /// The root watch ended without news: the end of the whole wait only without ids.
    WatchEnded(Error),
}

/// How a `--any` wait ended.
#[derive(Debug)]
pub enum AnyEnd {
    /// A task finished first: its result.
    Finished(Box<TaskResult>),
    /// Something wants a person first (a question asked, a budget spent).
    Told(Event),
    /// The timeout passed first (`Error::Timeout`); the tasks carry on.
    TimedOut(Error),
    /// Nobody serves the tasks (or the root) any more: who must act.
    Nobody(Error),
}

/// `--any`: the first news, the timeout, or nobody to serve the tasks (or the root).
pub fn wait_any(
    client: &Client,
    ids: &[TaskId],
    timeout: Option<Duration>,
    since: Option<SystemTime>,
) -> crate::Result<AnyEnd> {
    let left = timeout.unwrap_or(Duration::MAX);
    let (tx, rx) = crossbeam_channel::unbounded();
    for id in ids {
        let (client, id, tx) = (client.clone(), id.clone(), tx.clone());
        std::thread::spawn(move || {
            let got = client.wait_for_task_with(&id, left, OnDeath::AwaitRecovery);
            let _ = tx.send(match got {
                Ok(r) => Woke::Finished(Box::new(r)),
                Err(e) => Woke::Ended(e),
            });
        });
    }
    let watcher = {
        let (root, ids, tx) = (client.root().clone(), ids.to_vec(), tx.clone());
        std::thread::spawn(move || watch_root(root, ids, left, since, tx))
    };
    drop(tx);
    // Each thread sends once. With ids, once every id's wait has ended without a result
    // (nobody serves them, the timeout), so does this.
    let mut first_end = None;
    let mut ended = 0;
    for woke in rx.iter() {
        match woke {
            Woke::Finished(r) => return Ok(AnyEnd::Finished(r)),
            Woke::Told(e) => return Ok(AnyEnd::Told(e)),
            Woke::Ended(e) => {
                first_end.get_or_insert(e);
                ended += 1;
                if ended == ids.len() {
                    break;
                }
            }
            Woke::WatchEnded(e) if ids.is_empty() => {
                first_end = Some(e);
                break;
            }
            // The ids' own waits decide; their questions are simply not seen now.
            Woke::WatchEnded(e) => tracing::warn!("not watching for questions: {e}"),
        }
    }
    // Not joined: a watcher still waiting ends with the process.
    drop(watcher);
    match first_end.expect("every wait ends with a message") {
        Error::Timeout { .. } => Ok(AnyEnd::TimedOut(Error::Timeout {
            what: what_awaited(ids),
            after: left,
        })),
        e @ (Error::NobodyServes { .. } | Error::WorkerDied { .. }) => Ok(AnyEnd::Nobody(e)),
        e => Err(e),
    }
}

fn what_awaited(ids: &[TaskId]) -> String {
    if ids.is_empty() {
        "any task of the root to finish or need a person".to_string()
    } else {
        let ids: Vec<String> = ids.iter().map(TaskId::to_string).collect();
        format!("any of {} to finish or need a person", ids.join(", "))
    }
}

/// The one thread that watches the whole root: questions of `ids` (any task's, with
/// none), spent budgets, and — with no ids — any task's end.
fn watch_root(
    root: crate::Root,
    ids: Vec<TaskId>,
    left: Duration,
    since: Option<SystemTime>,
    tx: Sender<Woke>,
) {
    let mut seen = match since {
        Some(t) => Seen::since(&root, t),
        None => Seen::now(&root),
    };
    let wanted = |id: &TaskId| ids.is_empty() || ids.contains(id);
    let check = || -> crate::Result<Option<Woke>> {
        for news in seen.news(&root) {
            match news {
                News::Finished(_, r) if ids.is_empty() => return Ok(Some(Woke::Finished(r))),
                News::Finished(..) => {}
                News::Told(e @ Event::NeedsApproval { .. }) => {
                    if let Event::NeedsApproval { task_id, .. } = &e {
                        if wanted(task_id) {
                            return Ok(Some(Woke::Told(e)));
                        }
                    }
                }
                News::Told(e) => return Ok(Some(Woke::Told(e))),
            }
        }
        Ok(None)
    };
    // With ids, their own waits judge whether anyone serves them; this watch never
    // ends early. With none, nobody serving the root ends it.
    let vigil = Vigil::new(root.clone(), Awaited::Queue, None, OnDeath::AwaitRecovery);
    let vigil = if ids.is_empty() {
        vigil
    } else {
        vigil.with_grace(Duration::MAX)
    };
    let all: crate::watch::Interest = std::sync::Arc::new(|_: &std::path::Path| true);
    let got = crate::wait::until(
        &Seen::dirs(&root),
        crate::watch::WatchMode::Auto,
        all,
        left,
        what_awaited(&ids),
        vigil,
        check,
    );
    let _ = tx.send(got.unwrap_or_else(Woke::WatchEnded));
}
