//! Readying a task's new worktree before its agent starts, on the worker's side: its
//! port (config.json `portRange`), the files `worktreeSetup` copies or links in, and
//! its setup command, whose output is `tasks/<id>.setup.log` (the task's log too, if it
//! fails). The work itself is [`crate::worktree::setup`]'s.

use std::fs;
use std::path::Path;

use crate::env::{ENV_HOME, ENV_PORT};
use crate::layout::WorkerPaths;
use crate::protocol::{Outcome, Task, TaskId, TaskResult, WorktreeRecord};
use super::conclude::conclude;
use crate::worker::admit::Hold;
use crate::worker::slot_server::Shared;
use crate::worktree;
use crate::worktree::setup::{self as worktree_setup, WorktreeSetup};

/// Set by the setup command's environment to the main checkout's top directory.
pub const ENV_MAIN_CHECKOUT: &str = "CONDUCTOR_MAIN_CHECKOUT";

/// Ready the worktree `rec` just made for `task`: a port of its own (held in `hold`,
/// set in the task's environment as `CONDUCTOR_PORT`), the setup's files, its command.
/// Err: the task's failed result, its worktree concluded as any failed task's is.
pub(super) fn ready(
    shared: &Shared,
    paths: &WorkerPaths,
    task: &mut Task,
    rec: &mut WorktreeRecord,
    hold: &mut Hold,
) -> Result<(), Box<TaskResult>> {
    let id = rec.task_id.clone();
    let fail = |rec: &WorktreeRecord, task: &Task, (outcome, why): (Outcome, String)| {
        let mut r = TaskResult::failed(id.clone(), outcome, why);
        r.worktree = Some(conclude(rec, task, None));
        Box::new(r)
    };
    if let Some(range) = shared.config.port_range {
        match take_port(shared, &id, range) {
            Ok((port, lock)) => {
                hold.port = Some(lock);
                task.env.insert(ENV_PORT.to_string(), port.to_string());
            }
            Err(why) => return Err(fail(rec, task, (Outcome::Failure, why))),
        }
    }
    let Some(setup) = &shared.config.worktree_setup else {
        return Ok(());
    };
    let log = paths.tasks_dir().join(format!("{id}.setup.log"));
    match run(shared, (setup, paths), task, rec, hold, &log) {
        Ok(()) => {
            let said = format!("worktree setup done (its output: {})", log.display());
            rec.note = Some(match rec.note.take() {
                Some(n) => format!("{n}; {said}"),
                None => said,
            });
            Ok(())
        }
        Err((outcome, why)) => {
            // The agent never ran: the setup's output is the task's log.
            if let Err(e) = fs::rename(&log, paths.task_log(&id)) {
                tracing::warn!("keeping the setup log of task {id}: {e}");
            }
            let why = why.replace(
                &log.display().to_string(),
                &paths.task_log(&id).display().to_string(),
            );
            tracing::warn!("task {id}: {why}");
            Err(fail(rec, task, (outcome, why)))
        }
    }
}

/// The first free port of `range`, its lock recorded as held for task `id`.
fn take_port(
    shared: &Shared,
    id: &TaskId,
    range: [u16; 2],
) -> Result<(u16, crate::dirlock::DirLock), String> {
    let taken = worktree_setup::take_port(&shared.opts.root, range, &shared.lock_opts)
        .map_err(|e| format!("no port for the task: {e}"))?;
    let Some((port, mut lock)) = taken else {
        return Err(format!(
            "no port for the task: every port of portRange [{}, {}] is held by a running \
             task (widen portRange in config.json)",
            range[0], range[1]
        ));
    };
    // Before anything runs with it: a worker that dies leaves the port taken while
    // the task's processes still run (a dev server on it).
    if let Err(e) = lock.record_task(&id.to_string()) {
        tracing::warn!("cannot record task {id} in port lock {port}: {e}");
    }
    Ok((port, lock))
}

/// Place the setup's files and run its command in the worktree's top directory, the
/// task's locks renewed while it runs. Err: how the task ends (failed, or cancelled
/// while the command ran) and why.
fn run(
    shared: &Shared,
    (setup, paths): (&WorktreeSetup, &WorkerPaths),
    task: &Task,
    rec: &mut WorktreeRecord,
    hold: &mut Hold,
    log_path: &Path,
) -> Result<(), (Outcome, String)> {
    let failed = |e: crate::Error| (Outcome::Failure, format!("worktree setup failed: {e}"));
    let mut log = open_log(log_path).map_err(failed)?;
    let placed = worktree_setup::place_files(setup, rec, &mut log).map_err(failed)?;
    if !placed.is_empty() {
        rec.setup_paths = placed;
        // Recovery, too, must leave them out of what it commits.
        worktree::write_record(&paths.dir, rec).map_err(failed)?;
    }
    let mut env: Vec<(String, String)> = task.env.clone().into_iter().collect();
    env.extend([
        (
            ENV_HOME.to_string(),
            shared.opts.root.path().display().to_string(),
        ),
        (crate::env::ENV_TASK_ID.to_string(), rec.task_id.to_string()),
        (
            ENV_MAIN_CHECKOUT.to_string(),
            rec.repo.display().to_string(),
        ),
    ]);
    let mut renewed = std::time::Instant::now();
    let mut cancelled = None;
    let beat = || {
        if renewed.elapsed() >= std::time::Duration::from_secs(1) {
            renewed = std::time::Instant::now();
            for l in hold.locks_mut() {
                if let Err(e) = l.heartbeat() {
                    tracing::warn!("renewing {} during worktree setup: {e}", l.path().display());
                }
            }
        }
        cancelled = crate::worker::cancel::requested(paths, &rec.task_id, true);
        cancelled
            .clone()
            .map(|who| format!("the task was cancelled ({who})"))
    };
    let ran = worktree_setup::run_command(setup, &rec.path, &env, (&log, log_path), beat);
    ran.map_err(|why| match cancelled {
        Some(_) => (Outcome::Cancelled, format!("cancelled: {why}")),
        None => (Outcome::Failure, why),
    })
}

fn open_log(path: &Path) -> crate::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        crate::fsio::ensure_dir(dir)?;
    }
    fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| crate::Error::io("create", path, e))
}
