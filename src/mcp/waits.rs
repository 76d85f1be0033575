//! The `wait` tool's waits: driven on the async thread, woken by the server's one shared watcher, ended at once by the client's cancel, telling progress as they go.
//!
//! Each awaited task is a [`Wait`] from the library (its checks, deadline and vigil are
//! the ones `conductor wait` uses); here nothing blocks between looks: a look runs on the
//! blocking pool for a moment, then the call sleeps on the hub's wake-up, the wait's own
//! recheck timer, or the request's cancellation, whichever comes first. A pending `wait`
//! therefore holds no thread and no inotify instance of its own, and a cancelled one is
//! gone at the next turn of the runtime.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::reply;
use crate::tasks::{TaskLocation, TaskState};
use crate::verbs::wait::{held_reason, Got, WaitRequest, WaitTargets};
use crate::wait::{Hub, OnDeath, Step, Subscription, Wait};
use crate::watch::Interest;
use crate::{Client, Error, TaskId, TaskResult};

/// Where progress notifications go: the client's peer and the token it sent.
#[derive(Clone)]
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// How often at most the last output line of a running task is looked at again when
/// its output changes (an agent may write many times a second).
const OUTPUT_LOOK_EVERY: Duration = Duration::from_millis(250);

/// The longest last-output line a progress message carries, in characters.
const LINE_CHARS: usize = 200;

/// What became of one awaited task.
enum Outcome {
    Pending(Wait<'static, TaskResult>),
    Finished(Box<TaskResult>),
    /// Not finished within the wait (`None`), or not moving for now (why).
    Stopped(Option<String>),
}

/// What a task looked like at the last progress message.
#[derive(Clone, PartialEq, Default)]
struct Seen {
    state: Option<TaskState>,
    slot: Option<u32>,
    line: Option<String>,
}

/// The `wait` verb's request for task ids, driven here: wait for every one until the
/// timeout (one deadline for all): each one's result if it finished, else where it is. `None` when `cancelled` fired first.
/// Unknown ids are refused before any wait.
#[allow(clippy::too_many_arguments)]
pub async fn wait_all(
    client: Client,
    hub: Hub,
    request: WaitRequest,
    output_chars: usize,
    cancelled: impl std::future::Future<Output = ()>,
    progress: Option<Progress>,
) -> crate::Result<Option<Value>> {
    let (ids, timeout) = ids_of(request)?;
    let woken = Arc::new(Notify::new());
    let output = Arc::new(Notify::new());
    let started = {
        let (client, hub, ids) = (client.clone(), hub.clone(), ids.clone());
        let (woken, output) = (woken.clone(), output.clone());
        let watch_output = progress.is_some();
        blocking(move || {
            start(
                &client,
                &hub,
                &ids,
                timeout,
                woken,
                watch_output.then_some(output),
            )
        })
        .await??
    };
    let (mut outcomes, _subscriptions) = started;
    tokio::pin!(cancelled);
    let mut seen: Vec<Seen> = vec![Seen::default(); ids.len()];
    let mut sent = 0u64;
    let mut next_output_look = Instant::now();
    loop {
        let look_output = progress.is_some() && Instant::now() >= next_output_look;
        if look_output {
            next_output_look = Instant::now() + OUTPUT_LOOK_EVERY;
        }
        let (client2, ids2) = (client.clone(), ids.clone());
        let want_progress = progress.is_some();
        let prior = seen.clone();
        let (next, now_seen, sleep) =
            blocking(move || look(&client2, &ids2, outcomes, want_progress, look_output, prior))
                .await??;
        outcomes = next;
        if let Some(p) = &progress {
            for (i, now) in now_seen.into_iter().enumerate() {
                if now != seen[i] {
                    if let Some(message) = describe(&ids[i], &now) {
                        sent += 1;
                        let note = ProgressNotificationParam::new(p.token.clone(), sent as f64)
                            .with_total(ids.len() as f64 + sent as f64)
                            .with_message(message);
                        // The client may have gone; the wait ends by itself then.
                        let _ = p.peer.notify_progress(note).await;
                    }
                    seen[i] = now;
                }
            }
        }
        let Some(sleep) = sleep else {
            break;
        };
        let output_due = tokio::time::sleep_until(next_output_look.into());
        tokio::select! {
            _ = &mut cancelled => return Ok(None),
            _ = woken.notified() => {}
            _ = tokio::time::sleep(sleep) => {}
            _ = async { output_due.await; output.notified().await }, if progress.is_some() => {}
        }
    }
    let (client2, ids2) = (client.clone(), ids.clone());
    blocking(move || answer(&client2, &ids2, outcomes, timeout, output_chars))
        .await?
        .map(Some)
}

/// The ids and the timeout of a wait for every one of them (the only wait the tool makes).
fn ids_of(request: WaitRequest) -> crate::Result<(Vec<TaskId>, Duration)> {
    match (request.targets, request.any) {
        (WaitTargets::Tasks(ids), false) => Ok((ids, request.timeout.unwrap_or(Duration::MAX))),
        _ => Err(Error::BadArgument {
            field: "ids".into(),
            reason: "the wait tool waits for every one of the task ids given".into(),
        }),
    }
}

/// Run `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> crate::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::CallFailed {
            what: "a look at the awaited tasks".into(),
            reason: e.to_string(),
        })
}

type Started = (Vec<Outcome>, Vec<Subscription>);

/// Every task's wait, subscribed to the hub before its first look; with `output`, also
/// woken when a slot's `running.json` or `output.log` changes (for progress).
fn start(
    client: &Client,
    hub: &Hub,
    ids: &[TaskId],
    timeout: Duration,
    woken: Arc<Notify>,
    output: Option<Arc<Notify>>,
) -> crate::Result<Started> {
    let root = client.root();
    for id in ids {
        if client.find_task(id)?.is_none() {
            return Err(reply::no_such_task(client, id));
        }
    }
    let mut subs = Vec::new();
    if let Some(output) = output {
        let dirs: Vec<_> = root
            .slots()?
            .into_iter()
            .map(|s| root.worker(s).dir)
            .collect();
        if !dirs.is_empty() {
            let names: HashSet<&str> = ["running.json", "output.log"].into();
            let interest: Interest = crate::wait::names_interest(names);
            subs.push(hub.subscribe(&dirs, interest, Arc::new(move || output.notify_one()))?);
        }
    }
    let mut outcomes = Vec::with_capacity(ids.len());
    for id in ids {
        let wait = crate::tasks::task_wait(root, id, timeout, OnDeath::AwaitRecovery)?;
        let woken = woken.clone();
        subs.push(hub.subscribe(
            &wait.dirs,
            wait.interest.clone(),
            Arc::new(move || woken.notify_one()),
        )?);
        outcomes.push(Outcome::Pending(wait));
    }
    Ok((outcomes, subs))
}

type Looked = (Vec<Outcome>, Vec<Seen>, Option<Duration>);

/// One look at every pending task: its outcome, what it looks like now (for progress),
/// and how long to sleep at most (`None`: nothing is pending any more).
fn look(
    client: &Client,
    ids: &[TaskId],
    outcomes: Vec<Outcome>,
    want_progress: bool,
    look_output: bool,
    prior: Vec<Seen>,
) -> crate::Result<Looked> {
    let mut sleep: Option<Duration> = None;
    let mut next = Vec::with_capacity(outcomes.len());
    let mut seen = Vec::with_capacity(outcomes.len());
    for ((id, outcome), before) in ids.iter().zip(outcomes).zip(prior) {
        let outcome = match outcome {
            Outcome::Pending(mut w) => match w.step() {
                Ok(Step::Ready(r)) => Outcome::Finished(Box::new(r)),
                Ok(Step::Sleep(d)) => {
                    sleep = Some(sleep.map_or(d, |s| s.min(d)));
                    Outcome::Pending(w)
                }
                Err(e) => match Got::of_error(e)? {
                    Got::Nobody(e) => Outcome::Stopped(Some(e.to_string())),
                    Got::TimedOut(_) | Got::Result(_) => Outcome::Stopped(None),
                },
            },
            done => done,
        };
        let now = if !want_progress {
            before
        } else {
            match &outcome {
                Outcome::Finished(r) => Seen {
                    state: Some(TaskState::of_result(r)),
                    slot: r.worker,
                    line: None,
                },
                _ => match client.find_task(id)? {
                    Some(loc) => seen_now(client, &loc, &before, look_output),
                    None => before,
                },
            }
        };
        next.push(outcome);
        seen.push(now);
    }
    Ok((next, seen, sleep))
}

/// What a task looks like now; its last output line read again only when `look_output`.
fn seen_now(client: &Client, loc: &TaskLocation, before: &Seen, look_output: bool) -> Seen {
    let slot = loc.slot.map(|s| s.0);
    let line = match (loc.state, loc.slot) {
        (TaskState::Running, Some(s)) if look_output || before.state != Some(loc.state) => {
            last_line(&client.root().worker(s).output_log())
        }
        (TaskState::Running, Some(_)) => before.line.clone(),
        _ => None,
    };
    Seen {
        state: Some(loc.state),
        slot,
        line,
    }
}

/// The last non-empty line of the log at `path` (its last 4 KiB looked at), control
/// characters removed, cut to [`LINE_CHARS`].
fn last_line(path: &Path) -> Option<String> {
    let file = crate::inspect::open_log(path).ok().flatten()?;
    let (text, _, _) = reply::read_tail(&file, 4096).ok()?;
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = line.chars().filter(|c| !c.is_control()).collect();
    Some(match clean.char_indices().nth(LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean,
    })
}

/// A progress message for a task now seen as `now`.
fn describe(id: &TaskId, now: &Seen) -> Option<String> {
    let state = now.state?;
    Some(match (state, now.slot, &now.line) {
        (TaskState::Running, Some(slot), Some(line)) => {
            format!("task {id}: working on slot {slot}: {line}")
        }
        (TaskState::Running, Some(slot), None) => format!("task {id}: working on slot {slot}"),
        (TaskState::Waiting, Some(slot), _) => format!("task {id}: waiting in slot {slot}'s inbox"),
        (state, _, _) => format!("task {id}: {state}"),
    })
}

/// The `wait` tool's answer.
fn answer(
    client: &Client,
    ids: &[TaskId],
    outcomes: Vec<Outcome>,
    timeout: Duration,
    output_chars: usize,
) -> crate::Result<Value> {
    let mut all = true;
    let mut tasks = Vec::with_capacity(ids.len());
    for (id, outcome) in ids.iter().zip(outcomes) {
        let note = match outcome {
            Outcome::Finished(r) => {
                tasks.push(reply::finished(id, &r, output_chars));
                continue;
            }
            Outcome::Stopped(Some(note)) => Some(note),
            // Not finished within the wait: held back by a pause or its group's cap?
            Outcome::Stopped(None) | Outcome::Pending(_) => {
                held_reason(client, id).map(|why| format!("queued and waits: {why}"))
            }
        };
        all = false;
        let loc = client
            .find_task(id)?
            .ok_or_else(|| reply::no_such_task(client, id))?;
        tasks.push(reply::location_view(&loc, note));
    }
    Ok(json!({
        "allFinished": all,
        "waitedSecs": timeout.as_secs_f64(),
        "tasks": tasks,
    }))
}
