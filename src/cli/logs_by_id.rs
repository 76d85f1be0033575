//! `conductor logs TASK_ID [-f]`: one task's output wherever it ran, followed until it ends.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver};

use crate::cli::usage::CliError;
use crate::inspect::{self, read_task_file};
use crate::tasks::{self, TaskLocation, TaskState};
use crate::wait::{Awaited, OnDeath, Vigil};
use crate::watch::{DirWatcher, Interest, WatchMode};
use crate::{Error, Root, TaskId, WorkerPaths};

use super::output::{copy_out, write_out};
use crate::cli::common::exit;

/// How often a follower looks again without an event (events are only wake-ups).
const TICK: Duration = Duration::from_millis(250);

pub fn run(root: &Root, id: &TaskId, follow: bool) -> anyhow::Result<i32> {
    let loc = tasks::find(root, id)?.ok_or_else(|| tasks_error(root, id))?;
    if !follow {
        return print_once(root, &loc);
    }
    let stop = super::args::interrupt_channel()?;
    let loc = match until_started(root, id, loc, &stop)? {
        Followed::Yes(loc) => loc,
        Followed::Interrupted => return Ok(exit::INTERRUPTED),
        Followed::ReaderGone => return Ok(exit::OK),
    };
    match (loc.state, loc.slot) {
        (TaskState::Running, Some(slot)) => {
            let vigil = Vigil::new(
                root.clone(),
                Awaited::Slot(slot),
                Some(id.clone()),
                OnDeath::AwaitRecovery,
            );
            follow_running(root.worker(slot), id, &stop, vigil)
        }
        _ => print_once(root, &loc),
    }
}

/// How a wait for a task to start ended.
enum Followed {
    /// It runs or has ended: where it is now.
    Yes(TaskLocation),
    /// Ctrl-C.
    Interrupted,
    /// Nobody reads what we print any more.
    ReaderGone,
}

fn tasks_error(root: &Root, id: &TaskId) -> anyhow::Error {
    Error::NoSuchTask {
        id: id.to_string(),
        root: root.path().to_path_buf(),
    }
    .into()
}

/// What the task has written: the whole log of a finished task, the output so far of a
/// running one.
fn print_once(root: &Root, loc: &TaskLocation) -> anyhow::Result<i32> {
    let id = &loc.id;
    let Some(slot) = loc.slot else {
        anyhow::bail!(CliError::Usage(format!(
            "task {id} has not run (it is {}), so it has no output yet",
            loc.state
        )));
    };
    let w = root.worker(slot);
    let path = match loc.state {
        TaskState::Waiting => anyhow::bail!(CliError::Usage(format!(
            "task {id} waits in worker {slot}'s inbox and has no output yet (-f waits for it)"
        ))),
        TaskState::Running => w.output_log(),
        _ => w.task_log(id),
    };
    let mut opened = inspect::open_log(&path)?;
    if loc.state == TaskState::Running {
        // Its end may have come since it was found: the log then has moved (opened
        // before the move, the file is the same; after it, output.log is the next one's).
        if let Some(kept) = inspect::open_log(&w.task_log(id))? {
            opened = Some(kept);
        }
    }
    match opened {
        Some(mut f) => copy_out(&mut f),
        None if loc.state == TaskState::Running => Ok(exit::OK),
        None => anyhow::bail!(CliError::Usage(format!(
            "task {id} ({}) has no log: {} is missing (it never started, or gc collected it)",
            loc.state,
            path.display()
        ))),
    }
}

/// Wait (re-looking every tick) until a waiting or queued task runs or ends. `None`
/// when interrupted.
///
/// Like every wait it ends when nobody would ever run the task: no live worker serves
/// its slot (or, queued, the root) for [`crate::wait::NOBODY_GRACE`] — with the same
/// error as `wait`, which says what to start (exit 4).
fn until_started(
    root: &Root,
    id: &TaskId,
    mut loc: TaskLocation,
    stop: &Receiver<()>,
) -> anyhow::Result<Followed> {
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
            recv(stop) -> _ => return Ok(Followed::Interrupted),
            default(TICK) => {}
        }
        if super::output::stdout_closed() {
            return Ok(Followed::ReaderGone);
        }
        loc = tasks::find(root, id)?.ok_or_else(|| tasks_error(root, id))?;
    }
    Ok(Followed::Yes(loc))
}

/// The file being read and how far.
struct Reading {
    file: File,
    ident: (u64, u64),
    pos: u64,
}

impl Reading {
    /// Print what is new in the file; `Ok(false)` when the reader has gone away.
    fn drain(&mut self) -> anyhow::Result<bool> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.file.read_at(&mut buf, self.pos)?;
            if n == 0 {
                return Ok(true);
            }
            self.pos += n as u64;
            if !write_out(&buf[..n])? {
                return Ok(false);
            }
        }
    }
}

fn open_ident(path: &std::path::Path) -> anyhow::Result<Option<(File, (u64, u64))>> {
    Ok(crate::fsio::open_regular(path)?.map(|(f, m)| (f, (m.dev(), m.ino()))))
}

/// Follow a running task's `output.log` until its result appears, then print the rest
/// of its kept log (`tasks/<id>.log`, the same file renamed) and stop. `output.log` is
/// read only while `running.json` still holds the task, so the next task's fresh log is
/// never mistaken for it.
///
/// If the worker dies with the task, the follow waits for recovery's result while
/// someone can recover it, and otherwise ends saying who must (exit 4), as `wait` does.
fn follow_running(
    w: WorkerPaths,
    id: &TaskId,
    stop: &Receiver<()>,
    mut vigil: Vigil,
) -> anyhow::Result<i32> {
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
            return finish(&w, id, reading);
        }
        if let Some((file, ident)) = open_ident(&w.output_log())? {
            let ours = read_task_file(&w.running())
                .and_then(|f| f.task_id)
                .as_ref()
                == Some(id);
            if ours && reading.as_ref().is_none_or(|r| r.ident != ident) {
                reading = Some(Reading {
                    file,
                    ident,
                    pos: 0,
                });
            }
        }
        if let Some(r) = reading.as_mut() {
            if !r.drain()? {
                return Ok(exit::OK);
            }
        }
        if !finished(&w, id) {
            vigil.check()?;
        }
        select! {
            recv(wake) -> _ => {}
            recv(stop) -> _ => return Ok(exit::INTERRUPTED),
            default(TICK) => {}
        }
        if super::output::stdout_closed() {
            return Ok(exit::OK);
        }
    }
}

fn finished(w: &WorkerPaths, id: &TaskId) -> bool {
    w.result_for(id).exists()
}

/// The task has ended: the rest of its kept log, from where we were if it is the file
/// we read (renamed), else all of it.
fn finish(w: &WorkerPaths, id: &TaskId, reading: Option<Reading>) -> anyhow::Result<i32> {
    let Some((file, ident)) = open_ident(&w.task_log(id))? else {
        return Ok(exit::OK);
    };
    let mut r = match reading {
        Some(r) if r.ident == ident => r,
        _ => Reading {
            file,
            ident,
            pos: 0,
        },
    };
    r.drain()?;
    Ok(exit::OK)
}
