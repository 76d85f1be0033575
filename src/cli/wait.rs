//! `conductor wait TASK_ID… | N [TASK_ID] [--wait-timeout D] [--json]`: wait for tasks' results.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use super::output::{emit, emit_json, print_result};
use super::target::{at_most_one, Target, Targets, TARGET_HELP};
use super::{args::parse_duration_arg, args::RootArg};
use crate::cli::common::exit;
use crate::verbs::wait::{wait, WaitEnd, WaitEvent, WaitRequest, WaitTargets};

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
    #[arg(long, value_name = "TIME", requires = "any", value_parser = parse_since)]
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
    let targets = if args.any && t.args.is_empty() && t.task.is_empty() && t.slot.is_none() {
        WaitTargets::Tasks(Vec::new())
    } else {
        match args.targets.resolve(client.root(), "wait")? {
            Target::Tasks(ids) => WaitTargets::Tasks(ids),
            Target::Slot { .. } if args.any => {
                return Err(crate::cli::usage::CliError::Usage(
                    "--any waits for task ids (`conductor wait --any ID ID…`), not a slot".into(),
                )
                .into())
            }
            Target::Slot { slot, ids } => WaitTargets::Slot {
                slot,
                id: at_most_one(ids, "wait")?,
            },
        }
    };
    let request = WaitRequest {
        targets,
        timeout: args.timeout,
        any: args.any,
        since: args.since,
    };
    render(&client, &request, args.json)
}

/// Wait for each task by id in turn (one deadline for all), printing each result.
pub(super) fn wait_tasks(
    client: &crate::Client,
    ids: &[crate::TaskId],
    timeout: Option<Duration>,
    json: bool,
) -> anyhow::Result<i32> {
    let request = WaitRequest {
        targets: WaitTargets::Tasks(ids.to_vec()),
        timeout,
        any: false,
        since: None,
    };
    render(client, &request, json)
}

/// Run the `wait` verb, printing its events as they come; returns the exit code (see
/// `WAIT_HELP`).
fn render(client: &crate::Client, request: &WaitRequest, json: bool) -> anyhow::Result<i32> {
    let several = matches!(&request.targets, WaitTargets::Tasks(ids) if ids.len() > 1);
    let mut code = exit::OK;
    let mut failed: Option<anyhow::Error> = None;
    let mut on_event = |e: WaitEvent<'_>| -> crate::Result<bool> {
        match told(e, request, several, json) {
            Ok(got) => code = code.max(got),
            Err(e) => {
                failed.get_or_insert(e);
                return Ok(false);
            }
        }
        Ok(true)
    };
    let end = wait(client, request, &mut on_event)?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(match end {
        WaitEnd::Done => code,
        WaitEnd::NothingOnSlot { slot, newest } => {
            eprintln!(
                "nothing to wait for: worker {slot} has no task running or waiting{}",
                match newest {
                    Some(id) =>
                        format!(" (its newest result is task {id}: `conductor result {slot}`)"),
                    None => String::new(),
                }
            );
            exit::FAILURE
        }
        WaitEnd::Nobody(e) if request.any => {
            eprintln!("error: {e}");
            exit::NOBODY
        }
        WaitEnd::Nobody(e) => super::waiting::say_nobody(&e),
    })
}

/// Print one event; returns the exit code it makes.
fn told(e: WaitEvent<'_>, request: &WaitRequest, several: bool, json: bool) -> anyhow::Result<i32> {
    match e {
        WaitEvent::Current { slot, id, source } => {
            if std::io::stderr().is_terminal() {
                eprintln!("waiting for task {id} ({source}) on worker {slot}");
            }
        }
        // Held back by a pause or its group's cap: said before the wait, which ends
        // only once that lets it run.
        WaitEvent::Held { id, why } => eprintln!("task {id} is queued and waits: {why}"),
        WaitEvent::Died(e) => super::waiting::say_died(e),
        WaitEvent::Finished(r) if request.any => {
            if !json {
                emit(&format!("{}\n", heading(r)))?;
            }
            return print_result(r, json);
        }
        WaitEvent::Finished(r) if several && json => {
            emit(&format!("{}\n", serde_json::to_string(r)?))?;
            return Ok(if r.success { exit::OK } else { exit::FAILURE });
        }
        WaitEvent::Finished(r) if several => {
            emit(&format!("{}\n", heading(r)))?;
            return print_result(r, false);
        }
        WaitEvent::Finished(r) => return print_result(r, json),
        WaitEvent::TimedOut { id, error } => {
            let carries_on = match (id, &request.targets) {
                (Some(id), _) => {
                    format!("task {id} carries on (wait again, or `conductor cancel {id}`)")
                }
                (None, WaitTargets::Slot { slot, .. }) => {
                    format!("the task carries on (wait again, or `conductor cancel {slot}`)")
                }
                (None, WaitTargets::Tasks(_)) => "the tasks carry on".to_string(),
            };
            eprintln!("error: {error}; {carries_on}");
            return Ok(exit::FAILURE);
        }
        WaitEvent::Told(e) => {
            if json {
                emit_json(e)?;
            } else {
                emit(&format!("── {}\n", e.describe()))?;
            }
            return Ok(exit::NEEDS_PERSON);
        }
    }
    Ok(exit::OK)
}

/// `--since`: an RFC 3339 time, or a duration ago (`10m`, `90s`).
fn parse_since(s: &str) -> Result<SystemTime, String> {
    if let Some(t) = crate::protocol::parse_rfc3339(s) {
        return Ok(t);
    }
    humantime::parse_duration(s.trim())
        .ok()
        .and_then(|ago| SystemTime::now().checked_sub(ago))
        .ok_or_else(|| {
            format!(
                "`{s}` is neither an RFC 3339 time (2026-11-29T06:00:00.123Z) nor a duration \
                 ago (10m)"
            )
        })
}

/// `── task ID · ok in 1.5s · $0.0123`: what heads a task's output among several.
fn heading(r: &crate::TaskResult) -> String {
    let mut how = r.outcome_label().to_string();
    if let Some(ms) = r.duration_ms {
        how.push_str(&format!(" in {}", crate::text::format_took(ms)));
    }
    let mut line = format!("── task {} · {how}", r.task_id);
    if let Some(c) = r.cost_usd {
        line.push_str(&format!(" · ${c:.4}"));
    }
    line
}
