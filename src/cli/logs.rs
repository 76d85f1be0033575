//! `conductor logs N [-f]`: a worker's live output (`output.log`), or a finished task's.

use std::io::Write;
use std::time::Duration;

use crate::inspect::{self, LogFollower};
use crate::watch::WatchMode;
use crate::{Error, Slot};
use crossbeam_channel::select;

use super::{parse_slot, task_id_arg, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
output.log holds the running agent's stdout; when the task ends it moves to \
tasks/<id>.log (see --task) and an empty output.log takes its place. -f keeps following \
the name across tasks, like `tail -F`, until Ctrl-C or until nobody reads the output.")]
pub struct Args {
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// Follow: print what the agent writes as it writes it, across tasks, until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    /// Print the full output of a finished task (tasks/<TASK_ID>.log) instead.
    #[arg(long, value_name = "TASK_ID", conflicts_with = "follow")]
    pub task: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
}

/// Write to stdout; `Ok(false)` when the reader has gone away.
fn write_out(bytes: &[u8]) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.client()?.root().clone();
    let paths = inspect::require_slot(&root, args.slot)?;
    if let Some(id) = &args.task {
        let id = task_id_arg(id)?;
        let path = paths.task_log(&id);
        let Some(mut f) = inspect::open_log(&path)? else {
            anyhow::bail!(Error::Usage(format!(
                "worker {} has no log for task {id} ({} is missing: the task never ran there, is still running, or was collected by gc)",
                args.slot,
                path.display()
            )));
        };
        return copy_out(&mut f);
    }
    if !args.follow {
        return match inspect::open_log(&paths.output_log())? {
            Some(mut f) => copy_out(&mut f),
            None => Ok(exit::OK),
        };
    }
    let stop = super::interrupt_channel()?;
    let mut follower = LogFollower::new(&paths.output_log(), WatchMode::Auto)?;
    tracing::debug!("following with {}", follower.watcher_kind());
    loop {
        while let Some(chunk) = follower.next_chunk()? {
            if !write_out(&chunk)? {
                return Ok(exit::OK);
            }
        }
        select! {
            recv(follower.wake()) -> _ => {}
            recv(stop) -> _ => return Ok(exit::OK),
            // The slow safety net: events are only wake-ups, and a closed stdout
            // must end us even when the agent is silent.
            default(Duration::from_millis(500)) => {}
        }
        if super::stdout_closed() {
            return Ok(exit::OK);
        }
    }
}

fn copy_out(f: &mut std::fs::File) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    match std::io::copy(f, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(exit::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(anyhow::Error::new(e).context("copying the log to stdout")),
    }
}
