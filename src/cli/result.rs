//! `conductor result TASK_ID | N [TASK_ID]`: print a finished task's result.

use anyhow::Context as _;

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
    let result = match args.targets.resolve(client.root(), "result")? {
        Target::Tasks(ids) => {
            let id = single(ids, "result")?;
            match client.result_of(&id)? {
                Some(r) => r,
                None => {
                    let state = client
                        .find_task(&id)?
                        .map_or_else(|| "unknown".to_string(), |l| l.state.to_string());
                    eprintln!("task {id} has no result yet (it is {state}); `conductor wait {id}` waits for it");
                    return Ok(exit::FAILURE);
                }
            }
        }
        Target::Slot { slot, ids } => match at_most_one(ids, "result")? {
            Some(id) => client
                .read_result_for(slot, &id)?
                .with_context(|| format!("worker {slot} has no result for task {id}"))?,
            None => client
                .read_result(slot)?
                .with_context(|| format!("worker {slot} has no result yet"))?,
        },
    };
    super::output::print_result(&result, args.json)
}
