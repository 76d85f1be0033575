//! `conductor cancel N [--task ID]`: ask a worker to cancel its running task.

use crate::maintenance::{request_cancel, CancelOutcome};
use crate::Slot;

use super::{parse_slot, task_id_arg, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Writes the running task's id into workers/<N>/cancel (atomically); the worker stops the \
agent's process group and records a `cancelled` result (`conductor wait N ID` shows it). \
Exits 1, writing nothing, when nothing is running, when --task names another task, or \
when no live worker serves the slot.")]
pub struct Args {
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// Cancel only if this task is the one running.
    #[arg(long, value_name = "TASK_ID")]
    pub task: Option<String>,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    let slot = args.slot;
    let only = args.task.as_deref().map(task_id_arg).transpose()?;
    match request_cancel(client.root(), slot, only.as_ref())? {
        CancelOutcome::Requested { id } => {
            println!("cancel requested for task {id} on worker {slot}");
            Ok(exit::OK)
        }
        CancelOutcome::NothingRunning { inbox } => {
            match inbox {
                Some(id) => eprintln!(
                    "nothing is running on worker {slot} (task {id} waits in the inbox; nothing cancelled)"
                ),
                None => eprintln!("nothing is running on worker {slot}; nothing cancelled"),
            }
            Ok(exit::FAILURE)
        }
        CancelOutcome::OtherTaskRunning { running } => {
            eprintln!(
                "task {} is not running on worker {slot} (task {running} is); nothing cancelled",
                only.map(|i| i.to_string()).unwrap_or_default()
            );
            Ok(exit::FAILURE)
        }
        CancelOutcome::IdNotReadable => {
            eprintln!(
                "error: worker {slot} has a task in hand whose id cannot be read yet; try again in a moment"
            );
            Ok(exit::USAGE)
        }
        CancelOutcome::NoLiveWorker { id } => {
            eprintln!(
                "no live worker serves slot {slot}, so nobody would act on a cancel{}; \
                 run `conductor recover {slot}` to finish it as interrupted",
                id.map(|i| format!(" (task {i} was left behind)"))
                    .unwrap_or_default()
            );
            Ok(exit::FAILURE)
        }
    }
}
