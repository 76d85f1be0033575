//! `conductor wait N [TASK_ID] [--timeout D] [--json]`: wait for a task's result.

use std::io::IsTerminal;
use std::time::Duration;

use crate::inspect;
use crate::{Error, Slot};

use super::{parse_duration_arg, parse_slot, print_result, task_id_arg, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Without TASK_ID, waits for the slot's current task: the one running (running.json), else \
the one status.json says the worker is on, else the one waiting in the inbox; exits 1 if \
there is none. Prints the task's output (or the whole result with --json) and exits 0 if \
it succeeded, 1 if it failed. When --timeout expires first, prints `timed out after …` \
on stderr and exits 1; the task itself carries on.")]
pub struct Args {
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// The task to wait for (default: the slot's current task).
    pub task_id: Option<String>,
    /// Give up after this long: seconds (`30`) or a duration (`90s`, `5m`, `1h30m`).
    /// Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// Print the whole result as JSON instead of its output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let slot = args.slot;
    let id = match &args.task_id {
        Some(id) => task_id_arg(id)?,
        None => match inspect::current_task(client.root(), slot)? {
            Some((id, source)) => {
                if std::io::stderr().is_terminal() {
                    eprintln!("waiting for task {id} ({source}) on worker {slot}");
                }
                id
            }
            None => {
                let newest = client.read_result(slot).ok().flatten();
                eprintln!(
                    "nothing to wait for: worker {slot} has no task running or waiting{}",
                    match newest {
                        Some(r) => format!(
                            " (its newest result is task {}: `conductor result {slot}`)",
                            r.task_id
                        ),
                        None => String::new(),
                    }
                );
                return Ok(exit::FAILURE);
            }
        },
    };
    let timeout = args.timeout.unwrap_or(Duration::MAX);
    match client.wait_for_result(slot, &id, timeout) {
        Ok(result) => print_result(&result, args.json),
        Err(e @ Error::Timeout { .. }) => {
            eprintln!("error: {e}; the task carries on (wait again, or `conductor cancel {slot}`)");
            Ok(exit::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}
