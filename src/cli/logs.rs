//! `conductor logs TASK_ID [-f] | N [-f]`: a task's output by id (live or finished), or a slot's live output.

use std::time::Duration;

use crate::cli::usage::CliError;
use crate::fsio::{self, RESULT_SIZE_LIMIT};
use crate::inspect::{self, LogFollower};
use crate::protocol::parse_result;
use crate::watch::WatchMode;
use crate::{TaskId, WorkerPaths};
use crossbeam_channel::select;

use super::args::RootArg;
use super::output::{copy_out, write_out};
use super::target::{at_most_one, single, Target, Targets, TARGET_HELP};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{TARGET_HELP}\n\n\
A log is the agent's stdout with its stderr lines marked `stderr│ `; with the claude \
preset, stdout is Claude Code's event stream shown as readable lines (its messages, `› Tool \
what` for each tool use, `‹ …` for what the tool gave back, a `✓ done` or `✗` line with \
turns, cost and session), the raw events kept in workers/N/tasks/<id>.jsonl.\n\n\
By id: a finished task's whole log (workers/N/tasks/<id>.log), or what a running task \
has written so far; -f follows a running task (or waits for a waiting or queued one to \
start) until it ends. With a slot: output.log, the running agent's live log, or when \
nothing runs there the log of the slot's last task; when a task ends its output.log moves \
to tasks/<id>.log and an empty one takes its place. -f keeps following the name across \
tasks, like `tail -F`, until Ctrl-C or until nobody reads the output."))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Follow: print what the agent writes as it writes it, until the task ends (by id)
    /// or, for a slot, across tasks until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.client()?.root().clone();
    let (slot, task) = match args.targets.resolve(&root, "logs")? {
        Target::Tasks(ids) => {
            return super::logs_by_id::run(&root, &single(ids, "logs")?, args.follow)
        }
        Target::Slot { slot, ids } => (slot, at_most_one(ids, "logs")?),
    };
    let paths = root.existing_slot(slot)?;
    if let Some(id) = task {
        if args.follow {
            return super::logs_by_id::run(&root, &id, true);
        }
        let path = paths.task_log(&id);
        let Some(mut f) = inspect::open_log(&path)? else {
            anyhow::bail!(CliError::Usage(format!(
                "worker {} has no log for task {id} ({} is missing: the task never ran there, is still running, or was collected by gc)",
                slot,
                path.display()
            )));
        };
        return copy_out(&mut f);
    }
    if !args.follow {
        return match slot_log(&paths)? {
            Some((mut f, ended)) => {
                if let Some(id) = ended {
                    eprintln!("(worker {slot} runs nothing now; the log of its last task, {id}:)");
                }
                copy_out(&mut f)
            }
            None => Ok(exit::OK),
        };
    }
    let stop = super::args::interrupt_channel()?;
    let mut follower = LogFollower::new(&paths.output_log(), WatchMode::Auto)?;
    tracing::debug!("following with {}", follower.watcher_kind());
    // A slot's log is followed across its tasks, for as long as asked; but a slot
    // nobody serves is said to be one (once per time it stops being served).
    let mut vigil = crate::wait::Vigil::new(
        root.clone(),
        crate::wait::Awaited::Slot(slot),
        None,
        crate::wait::OnDeath::AwaitRecovery,
    );
    let mut said_unserved = false;
    loop {
        match vigil.check() {
            Ok(()) => said_unserved = false,
            Err(e) if !said_unserved => {
                eprintln!("conductor: {e}; following on");
                said_unserved = true;
            }
            Err(_) => {}
        }
        while let Some(chunk) = follower.next_chunk()? {
            if !write_out(&chunk)? {
                return Ok(exit::OK);
            }
        }
        select! {
            recv(follower.wake()) -> _ => {}
            recv(stop) -> _ => return Ok(exit::INTERRUPTED),
            // The slow safety net: events are only wake-ups, and a closed stdout
            // must end us even when the agent is silent.
            default(Duration::from_millis(500)) => {}
        }
        if super::output::stdout_closed() {
            return Ok(exit::OK);
        }
    }
}

/// What `logs N` prints: the live log of the task the slot runs, or once that task has
/// ended (or nothing runs), the kept log of its last task — with that task's id.
fn slot_log(paths: &WorkerPaths) -> anyhow::Result<Option<(std::fs::File, Option<TaskId>)>> {
    // Opened first: a task that ends after this keeps the same file under its new name.
    let live = inspect::open_log(&paths.output_log())?;
    let task = match inspect::read_task_file(&paths.running()) {
        Some(running) => running.task_id,
        None => last_result_id(paths),
    };
    if let Some(id) = task {
        // Its log is kept only once it has ended.
        if let Some(kept) = inspect::open_log(&paths.task_log(&id))? {
            return Ok(Some((kept, Some(id))));
        }
    }
    Ok(live.map(|f| (f, None)))
}

/// The id `result.json` answers: the slot's last finished task.
fn last_result_id(paths: &WorkerPaths) -> Option<TaskId> {
    let bytes = fsio::read_bounded(&paths.result(), RESULT_SIZE_LIMIT).ok()??;
    parse_result(&paths.result(), &bytes)
        .ok()
        .map(|r| r.task_id)
}
