//! `conductor logs TASK_ID [-f] | N [-f]`: a task's output by id (live or finished), or a slot's live output.

use crate::cli::usage::CliError;
use crate::verbs::logs::{logs, LogsAnswer, LogsRequest, NoLog};

use super::args::RootArg;
use super::output::{copy_out, emit_json};
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
tasks, like `tail -F`, until Ctrl-C or until nobody reads the output.\n\n\
--json: without -f one JSON document, {{\"id\", \"state\", \"slot\", \"path\", \"logBytes\", \
\"shownFromByte\", \"text\"}} (by id, where the task is as `result --json` and the MCP tools say \
it; for a slot, {{\"slot\", \"id\", \"lastTask\"}}); with -f JSON Lines, one stream event a line as it \
happens: {{\"event\": \"output\", \"text\"}} for what the agent wrote, {{\"event\": \"unserved\", \
\"note\"}} when nobody serves the followed slot, and by id a last {{\"event\": \"end\", \"id\", \
\"state\"}} once the task has ended."))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Follow: print what the agent writes as it writes it, until the task ends (by id)
    /// or, for a slot, across tasks until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    /// One JSON document with the log's text; with -f JSON Lines of stream events
    /// (see below).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let request = match args.targets.resolve(client.root(), "logs")? {
        Target::Tasks(ids) => LogsRequest::Task(single(ids, "logs")?),
        Target::Slot { slot, ids } => LogsRequest::Slot {
            slot,
            id: at_most_one(ids, "logs")?,
        },
    };
    if args.follow {
        match super::logs_follow::run(&client, &request, args.json)? {
            Ok(code) => return Ok(code),
            // It ended before it was seen running: its whole log.
            Err(id) => return once(&client, &LogsRequest::Task(id), false),
        }
    }
    once(&client, &request, args.json)
}

/// The log as it is now: copied out whole, or one JSON document.
fn once(client: &crate::Client, request: &LogsRequest, json: bool) -> anyhow::Result<i32> {
    let answer = logs(client, request)?;
    if let Err(no) = &answer.log {
        anyhow::bail!(CliError::Usage(no_log(&answer, no)));
    }
    if json {
        emit_json(&answer.to_json(u64::MAX)?)?;
        return Ok(exit::OK);
    }
    if let (true, Some(slot), Some(id)) = (answer.last_task, answer.slot, &answer.task_id) {
        eprintln!("(worker {slot} runs nothing now; the log of its last task, {id}:)");
    }
    match answer.log {
        Ok(Some((_, mut f))) => copy_out(&mut f),
        _ => Ok(exit::OK),
    }
}

/// Why there is no log, as the command line says it.
fn no_log(answer: &LogsAnswer, no: &NoLog) -> String {
    let id = answer
        .task_id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    match (&answer.task, no) {
        (Some(loc), NoLog::NotStarted) => format!(
            "task {id} has not run (it is {}), so it has no output yet",
            loc.state
        ),
        (_, NoLog::InInbox(slot)) => format!(
            "task {id} waits in worker {slot}'s inbox and has no output yet (-f waits for it)"
        ),
        (Some(loc), NoLog::Missing(path)) => format!(
            "task {id} ({}) has no log: {} is missing (it never started, or gc collected it)",
            loc.state,
            path.display()
        ),
        (None, NoLog::Missing(path)) => format!(
            "worker {} has no log for task {id} ({} is missing: the task never ran there, is still running, or was collected by gc)",
            answer.slot.map(|s| s.to_string()).unwrap_or_default(),
            path.display()
        ),
        (None, NoLog::NotStarted) => format!("task {id} has no output yet"),
    }
}
