//! `logs --follow` as a verb: a task's or slot's log as a stream of events, handed to a sink (the CLI prints them raw or as JSON Lines).
//!
//! By id, the follow waits for a waiting or queued task to start, reads its live
//! `output.log` while `running.json` still holds it (so the next task's fresh log is never
//! mistaken for it), and ends with the rest of its kept log once its result is out. Like
//! every wait it ends when nobody would ever run the task ([`Vigil`]: exit 4 in the CLI).
//! A slot's log is followed by name across its tasks, like `tail -F`, until stopped.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver};

use crate::inspect::{read_task_file, LogFollower};
use crate::tasks::{self, TaskLocation, TaskState};
use crate::wait::{Awaited, OnDeath, Vigil};
use crate::watch::{DirWatcher, Interest, WatchMode};
use crate::{Error, Root, Slot, TaskId, WorkerPaths};

/// How often a follower looks again without an event (events are only wake-ups).
const TICK: Duration = Duration::from_millis(250);

/// What a follow tells its sink.
#[derive(Debug)]
pub enum LogEvent<'a> {
    /// Bytes the agent wrote, as written (a chunk may end inside a character).
    Output(&'a [u8]),
    /// No live worker serves the followed slot (said once each time it stops being
    /// served); the follow goes on.
    Unserved(&'a Error),
}

/// Where a follow's events go.
pub trait LogSink {
    /// The error the sink's writes fail with (the crate's errors convert into it).
    type Error: From<Error>;
    /// Take one event; `Ok(false)`: the reader has gone, stop.
    fn event(&mut self, event: LogEvent<'_>) -> Result<bool, Self::Error>;
    /// Whether the reader has gone, looked at on every turn (even with nothing to say).
    fn gone(&self) -> bool;
}

/// How a follow ended.
#[derive(Debug)]
pub enum FollowEnd {
    /// The followed task ended and its whole log was told.
    Ended(TaskId),
    /// By id, the task does not run (it had already ended, or ended before it was seen
    /// running): where it is; read its log once instead.
    NotRunning(TaskLocation),
    /// `stop` fired (Ctrl-C).
    Stopped,
    /// The sink said its reader has gone.
    ReaderGone,
}

/// Follow task `id`'s log until it ends (see the module doc).
pub fn follow_task<S: LogSink>(
    root: &Root,
    id: &TaskId,
    stop: &Receiver<()>,
    sink: &mut S,
) -> Result<FollowEnd, S::Error> {
    let loc = find(root, id)?;
    let loc = match until_started(root, id, loc, stop, sink)? {
        Ok(loc) => loc,
        Err(end) => return Ok(end),
    };
    match (loc.state, loc.slot) {
        (TaskState::Running, Some(slot)) => {
            let vigil = Vigil::new(
                root.clone(),
                Awaited::Slot(slot),
                Some(id.clone()),
                OnDeath::AwaitRecovery,
            );
            follow_running(root.worker(slot), id, stop, vigil, sink)
        }
        _ => Ok(FollowEnd::NotRunning(loc)),
    }
}

fn find(root: &Root, id: &TaskId) -> crate::Result<TaskLocation> {
    tasks::find(root, id)?.ok_or_else(|| tasks::no_such_task(root, id))
}

/// Wait (re-looking every tick) until a waiting or queued task runs or ends: where it
/// is then, or how the follow ended meanwhile. Ends with the same error as `wait` when
/// no live worker serves its slot (or, queued, the root) for [`crate::wait::NOBODY_GRACE`].
fn until_started<S: LogSink>(
    root: &Root,
    id: &TaskId,
    mut loc: TaskLocation,
    stop: &Receiver<()>,
    sink: &S,
) -> Result<Result<TaskLocation, FollowEnd>, S::Error> {
    let mut vigil: Option<(Awaited, Vigil)> = None;
    while matches!(loc.state, TaskState::Waiting | TaskState::Queued) {
        let awaited = match (loc.queued, loc.slot) {
            (false, Some(slot)) => Awaited::Slot(slot),
            _ => Awaited::Queue,
        };
        if vigil.as_ref().is_none_or(|(a, _)| *a != awaited) {
            let v = Vigil::new(
                root.clone(),
                awaited,
                Some(id.clone()),
                OnDeath::AwaitRecovery,
            );
            vigil = Some((awaited, v));
        }
        if let Some((_, v)) = vigil.as_mut() {
            v.check()?;
        }
        select! {
            recv(stop) -> _ => return Ok(Err(FollowEnd::Stopped)),
            default(TICK) => {}
        }
        if sink.gone() {
            return Ok(Err(FollowEnd::ReaderGone));
        }
        loc = find(root, id)?;
    }
    Ok(Ok(loc))
}

/// The file being read and how far.
struct Reading {
    path: PathBuf,
    file: File,
    ident: (u64, u64),
    pos: u64,
}

impl Reading {
    /// Tell what is new in the file; `Ok(false)` when the reader has gone away.
    fn drain<S: LogSink>(&mut self, sink: &mut S) -> Result<bool, S::Error> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .file
                .read_at(&mut buf, self.pos)
                .map_err(|e| Error::io("read", &self.path, e))?;
            if n == 0 {
                return Ok(true);
            }
            self.pos += n as u64;
            if !sink.event(LogEvent::Output(&buf[..n]))? {
                return Ok(false);
            }
        }
    }
}

fn open_ident(path: &Path) -> crate::Result<Option<(File, (u64, u64))>> {
    Ok(crate::fsio::open_regular(path)?.map(|(f, m)| (f, (m.dev(), m.ino()))))
}

/// Follow a running task's `output.log` until its result appears, then tell the rest of
/// its kept log (`tasks/<id>.log`, the same file renamed) and stop. If the worker dies
/// with the task, the follow waits for recovery's result while someone can recover it,
/// and otherwise ends saying who must, as `wait` does.
fn follow_running<S: LogSink>(
    w: WorkerPaths,
    id: &TaskId,
    stop: &Receiver<()>,
    mut vigil: Vigil,
    sink: &mut S,
) -> Result<FollowEnd, S::Error> {
    let (tx, wake) = bounded(1);
    let interest: Interest = Arc::new(|_| true);
    let _watcher = DirWatcher::new(
        &[w.dir.clone(), w.results_dir(), w.tasks_dir()],
        WatchMode::Auto,
        interest,
        tx,
    )?;
    let mut reading: Option<Reading> = None;
    loop {
        if finished(&w, id) {
            return finish(&w, id, reading, sink);
        }
        if let Some((file, ident)) = open_ident(&w.output_log())? {
            let ours = read_task_file(&w.running())
                .and_then(|f| f.task_id)
                .as_ref()
                == Some(id);
            if ours && reading.as_ref().is_none_or(|r| r.ident != ident) {
                reading = Some(Reading {
                    path: w.output_log(),
                    file,
                    ident,
                    pos: 0,
                });
            }
        }
        if let Some(r) = reading.as_mut() {
            if !r.drain(sink)? {
                return Ok(FollowEnd::ReaderGone);
            }
        }
        if !finished(&w, id) {
            vigil.check()?;
        }
        select! {
            recv(wake) -> _ => {}
            recv(stop) -> _ => return Ok(FollowEnd::Stopped),
            default(TICK) => {}
        }
        if sink.gone() {
            return Ok(FollowEnd::ReaderGone);
        }
    }
}

fn finished(w: &WorkerPaths, id: &TaskId) -> bool {
    w.result_for(id).exists()
}

/// The task has ended: the rest of its kept log, from where we were if it is the file
/// we read (renamed), else all of it.
fn finish<S: LogSink>(
    w: &WorkerPaths,
    id: &TaskId,
    reading: Option<Reading>,
    sink: &mut S,
) -> Result<FollowEnd, S::Error> {
    let Some((file, ident)) = open_ident(&w.task_log(id))? else {
        return Ok(FollowEnd::Ended(id.clone()));
    };
    let mut r = match reading {
        Some(r) if r.ident == ident => r,
        _ => Reading {
            path: w.task_log(id),
            file,
            ident,
            pos: 0,
        },
    };
    if !r.drain(sink)? {
        return Ok(FollowEnd::ReaderGone);
    }
    Ok(FollowEnd::Ended(id.clone()))
}

/// Follow slot `slot`'s `output.log` by name across its tasks until `stop` fires or the
/// reader goes; a slot nobody serves is told as [`LogEvent::Unserved`], once each time
/// it stops being served.
pub fn follow_slot<S: LogSink>(
    root: &Root,
    slot: Slot,
    stop: &Receiver<()>,
    sink: &mut S,
) -> Result<FollowEnd, S::Error> {
    let paths = root.existing_slot(slot)?;
    let mut follower = LogFollower::new(&paths.output_log(), WatchMode::Auto)?;
    tracing::debug!("following with {}", follower.watcher_kind());
    let mut vigil = Vigil::new(
        root.clone(),
        Awaited::Slot(slot),
        None,
        OnDeath::AwaitRecovery,
    );
    let mut said_unserved = false;
    loop {
        match vigil.check() {
            Ok(()) => said_unserved = false,
            Err(e) if !said_unserved => {
                if !sink.event(LogEvent::Unserved(&e))? {
                    return Ok(FollowEnd::ReaderGone);
                }
                said_unserved = true;
            }
            Err(_) => {}
        }
        while let Some(chunk) = follower.next_chunk()? {
            if !sink.event(LogEvent::Output(&chunk))? {
                return Ok(FollowEnd::ReaderGone);
            }
        }
        select! {
            recv(follower.wake()) -> _ => {}
            recv(stop) -> _ => return Ok(FollowEnd::Stopped),
            // The slow safety net: events are only wake-ups, and a gone reader must
            // end us even when the agent is silent.
            default(Duration::from_millis(500)) => {}
        }
        if sink.gone() {
            return Ok(FollowEnd::ReaderGone);
        }
    }
}
