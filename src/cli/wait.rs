//! `conductor wait TASK_ID… | N [TASK_ID] [--timeout D] [--json]`: wait for tasks' results.

use std::io::IsTerminal;
use std::time::Duration;

use crate::inspect;
use crate::Error;

use super::target::{Target, Targets, TARGET_HELP};
use super::{parse_duration_arg, print_result, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = help_text())]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Give up after this long: seconds (`30`) or a duration (`90s`, `5m`, `1h30m`).
    /// Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// Print the whole result as JSON instead of its output (an array for several tasks).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

fn help_text() -> String {
    format!("{TARGET_HELP}\n\n{SLOT_HELP}")
}

const SLOT_HELP: &str = "\
With task ids, waits until every one has a result, wherever it runs, and prints them in \
the order given. With a slot and no TASK_ID, waits for the slot's current task: the one running (running.json), else \
the one status.json says the worker is on, else the one waiting in the inbox; exits 1 if \
there is none. Prints the task's output (or the whole result with --json) and exits 0 if \
it succeeded, 1 if it failed. When --timeout expires first, prints `timed out after …` \
on stderr and exits 1; the task itself carries on.";

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let (slot, task_id) = match args.targets.resolve(client.root())? {
        Target::Tasks(ids) => return wait_tasks(&client, &ids, &args),
        Target::Slot { slot, ids } => (slot, super::target::at_most_one(ids, "wait")?),
    };
    let id = match task_id {
        Some(id) => id,
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

/// Wait for each task by id (one deadline for all); print their results in order.
fn wait_tasks(client: &crate::Client, ids: &[crate::TaskId], args: &Args) -> anyhow::Result<i32> {
    let timeout = args.timeout.unwrap_or(Duration::MAX);
    let deadline = std::time::Instant::now().checked_add(timeout);
    let mut results = Vec::new();
    for id in ids {
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(std::time::Instant::now())
        });
        match client.wait_for_task(id, left) {
            Ok(r) => results.push(r),
            Err(Error::Timeout { .. }) => {
                eprintln!(
                    "error: timed out after {:.1}s waiting for the result of task {id}; the task carries on (wait again, or `conductor cancel {id}`)",
                    timeout.as_secs_f64()
                );
                return Ok(exit::FAILURE);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if args.json && results.len() > 1 {
        super::emit_json(&results)?;
        let failed = results.iter().filter(|r| !r.success).count();
        for r in results.iter().filter(|r| !r.success) {
            eprintln!(
                "task {} failed: {}",
                r.task_id,
                r.error.as_deref().unwrap_or("no reason recorded")
            );
        }
        return Ok(if failed == 0 { exit::OK } else { exit::FAILURE });
    }
    let mut code = exit::OK;
    for r in &results {
        code = code.max(print_result(r, args.json)?);
    }
    Ok(code)
}
