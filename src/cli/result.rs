//! `conductor result TASK_ID | N [TASK_ID]`: print a finished task's result.

use crate::verbs::result::{result, ResultAnswer, ResultRequest};

use super::args::RootArg;
use super::target::{at_most_one, single, Target, Targets, TARGET_HELP};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{TARGET_HELP}\n\nWith a slot and no TASK_ID: the slot's newest \
result (result.json). Exits 1 when the task failed or has no result yet (it waits or runs)."))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Print the whole result as JSON instead of its output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let request = match args.targets.resolve(client.root(), "result")? {
        Target::Tasks(ids) => ResultRequest::Task(single(ids, "result")?),
        Target::Slot { slot, ids } => ResultRequest::Slot {
            slot,
            id: at_most_one(ids, "result")?,
        },
    };
    let not_yet = match (result(&client, &request)?, &request) {
        (ResultAnswer::Finished(r), _) => return super::output::print_result(&r, args.json),
        (ResultAnswer::NotYet(loc), ResultRequest::Task(id)) => {
            let state = loc.map_or_else(|| "unknown".to_string(), |l| l.state.to_string());
            eprintln!(
                "task {id} has no result yet (it is {state}); `conductor wait {id}` waits for it"
            );
            return Ok(exit::FAILURE);
        }
        (_, ResultRequest::Slot { slot, id: Some(id) }) => {
            format!("worker {slot} has no result for task {id}")
        }
        (_, ResultRequest::Slot { slot, id: None }) => format!("worker {slot} has no result yet"),
    };
    Err(anyhow::anyhow!(not_yet))
}
