//! `conductor result N [TASK_ID]`: print a finished task's result.

use crate::Slot;
use anyhow::Context as _;

use super::{parse_slot, RootArg};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// Which task (default: the newest result, `result.json`).
    pub task_id: Option<String>,
    /// Print the whole result as JSON instead of its output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let slot = args.slot;
    let result = match &args.task_id {
        Some(id) => {
            let id = super::task_id_arg(id)?;
            client
                .read_result_for(slot, &id)?
                .with_context(|| format!("worker {slot} has no result for task {id}"))?
        }
        None => client
            .read_result(slot)?
            .with_context(|| format!("worker {slot} has no result yet"))?,
    };
    super::print_result(&result, args.json)
}
