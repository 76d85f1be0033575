//! `conductor wait TASK_ID… | N [TASK_ID] [--wait-timeout D] [--json]`: wait for tasks' results.

use std::io::IsTerminal;
use std::time::Duration;

use super::target::{at_most_one, Target, Targets, TARGET_HELP};
use super::{args::parse_duration_arg, args::RootArg};
use crate::cli::common::exit;
use crate::inspect;

#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{TARGET_HELP}\n\n{WAIT_HELP}"))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Give up waiting after this long (the task carries on): seconds (`30`) or a
    /// duration (`90s`, `5m`, `1h30m`). Default: wait as long as it takes. As
    /// `submit --wait-timeout`; `--timeout` is everywhere else the task's own limit, and
    /// is still taken here for scripts.
    #[arg(long = "wait-timeout", alias = "timeout", value_name = "DURATION",
          value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// Print the whole result as JSON instead of its output (several tasks: JSON Lines,
    /// one compact result a line, in the order given).
    #[arg(long)]
    pub json: bool,
    /// End as soon as any of the given tasks (with none: any task of the root) has
    /// finished or needs approval, or a daily budget is spent; print which and why
    /// (see below). The others carry on.
    #[arg(long)]
    pub any: bool,
    /// With --any: wake only for what happened after TIME (RFC 3339, e.g. the last
    /// event's `askedAt`/`at`/`finishedAt`, or a duration ago: `10m`): a question asked
    /// or a budget spent at or before it does not wake the wait, a task finished after
    /// it does even if before the wait began. For polling (see below).
    #[arg(long, value_name = "TIME", requires = "any", value_parser = super::wait_any::parse_since)]
    pub since: Option<std::time::SystemTime>,
    #[command(flatten)]
    pub root: RootArg,
}

const WAIT_HELP: &str = "\
With task ids, waits for each in turn wherever it runs (one --wait-timeout for all) and prints \
their results in the order given, each output under a `── task ID · how it ended` line when \
there are several (--json: one result a line); exits 1 if any failed. With a slot and no TASK_ID, waits for the slot's current task: the one running (running.json), else \
the one status.json says the worker is on, else the one waiting in the inbox; exits 1 if \
there is none. Prints the task's output (or the whole result with --json) and exits 0 if \
it succeeded, 1 if it failed. When --wait-timeout expires first, prints `timed out after …` \
on stderr and exits 1; the task itself carries on.

A wait never blocks for nothing. When no live worker serves the slot (its gate has been \
free for 2s: not a mere restart), it says what to start and exits 4. When the worker \
dies with the task in hand, it says so at once and waits on for recovery's result (the \
worker started again, `conductor recover N`, or any other live worker of the root \
recovers the task); with nobody left to do that, it says who must and exits 4.

--any [TASK_ID…] wakes at the first of: one of the tasks finishing (with no ids: any task \
of the root whose result comes out after the wait began), one of them needing approval \
(with no ids: any task; a question already waiting wakes it at once), a daily budget \
spent (the root's or a group's, after the wait began). A finished task is printed as \
`wait` prints one, under a `── task ID · how it ended` line (--json: its result), and \
the exit code says how it ended: 0 ok, 1 failed. Anything else prints `── what happened` \
(--json: the event, as the approvalCallback/budgetCallback hooks get it on stdin) and \
exits 5. --wait-timeout first: exit 1; nobody serving the root (or the given tasks): exit 4. \
A question still waiting wakes every --any at once: to poll without spinning, pass \
--since with the time of the last event you were told (its `askedAt`, `at` or `finishedAt`): \
only news after it wakes the wait.";

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let t = &args.targets;
    if args.any && t.args.is_empty() && t.task.is_empty() && t.slot.is_none() {
        return super::wait_any::run(&client, &[], args.timeout, args.since, args.json);
    }
    let (slot, task_id) = match args.targets.resolve(client.root(), "wait")? {
        Target::Tasks(ids) if args.any => {
            return super::wait_any::run(&client, &ids, args.timeout, args.since, args.json)
        }
        Target::Tasks(ids) => return wait_tasks(&client, &ids, args.timeout, args.json),
        Target::Slot { slot, ids } => (slot, at_most_one(ids, "wait")?),
    };
    if args.any {
        return Err(crate::cli::usage::CliError::Usage(
            "--any waits for task ids (`conductor wait --any ID ID…`), not a slot".into(),
        )
        .into());
    }
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
    let carries_on = format!("the task carries on (wait again, or `conductor cancel {slot}`)");
    super::waiting::finish(args.timeout, args.json, &carries_on, |on_death, left| {
        client.wait_for_result_with(slot, &id, left, on_death)
    })
}

/// Wait for each task by id in turn (one deadline for all), printing each result.
pub(super) fn wait_tasks(
    client: &crate::Client,
    ids: &[crate::TaskId],
    timeout: Option<Duration>,
    json: bool,
) -> anyhow::Result<i32> {
    let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
    let mut code = exit::OK;
    for id in ids {
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let carries_on = format!("task {id} carries on (wait again, or `conductor cancel {id}`)");
        let several = ids.len() > 1;
        // Held back by a pause or its group's cap: said before the wait, which ends
        // only once that lets it run.
        if let Ok(Some(why)) = crate::queue::Queue::new(client.root().clone()).held_reason(id) {
            eprintln!("task {id} is queued and waits: {why}");
        }
        let print = |r: &crate::TaskResult| -> anyhow::Result<i32> {
            if !several {
                return super::output::print_result(r, json);
            }
            if json {
                super::output::emit(&format!("{}\n", serde_json::to_string(r)?))?;
                return Ok(if r.success { exit::OK } else { exit::FAILURE });
            }
            super::output::emit(&format!("{}\n", super::wait_any::heading(r)))?;
            super::output::print_result(r, false)
        };
        let got = super::waiting::finish_with(
            left,
            &carries_on,
            |on_death, left| client.wait_for_task_with(id, left, on_death),
            print,
        )?;
        if got != exit::OK && got != exit::FAILURE {
            return Ok(got);
        }
        code = code.max(got);
    }
    Ok(code)
}
