//! `conductor submit PROMPT`: put a task into the shared queue; any idle worker runs it.

use std::time::Duration;

use crate::queue::Queue;
use crate::verbs::spec::{QueueSpec, TaskSpec};
use crate::verbs::submit;

use super::{args::RootArg, help};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
The task is staged in queue/tmp/ and linked into queue/pending/; an idle worker picks it up \
after its own inbox: highest priority first, then the key served least recently, then the \
oldest. Tasks with the same --key never run at the same time. A task with --after waits in \
the queue (holding no worker) until those tasks have succeeded; if one fails, is cancelled \
or is interrupted for good, it ends `cancelled` (and so do its own dependents). Prints the task id (with \
--wait: the task's output; exit 1 if it failed). `conductor queue` lists what waits and why.

Many tasks from one process: `--batch -f FILE` (`-f -` for stdin) submits one task a line. \
A line is a prompt, or a task as JSON (`{\"prompt\": \"…\", \"key\": \"k\", \"after\": [\"t1\"]}`, \
the fields of task.json); blank lines and lines starting with `#` are skipped. The other \
options apply to every line (a JSON line's own fields win). Every line is checked before \
any is submitted (an error names FILE:LINE); then they are submitted in order, so a line's \
`after` may name an id given on an earlier line. Prints one id a line (--json: JSON Lines); \
with --wait, then waits for them all as `conductor wait ID…` does.")]
pub struct Args {
    #[command(flatten)]
    pub task: TaskSpec,
    #[command(flatten)]
    pub queue: QueueSpec,
    /// Wait for the result and print its output.
    ///
    /// Exit 1 if the task failed, 4 if no live worker serves the root or the worker
    /// running it dies and nobody recovers it.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: stop waiting after this long.
    ///
    /// Exit 1; the task carries on. Seconds or a duration (`90s`, `5m`, `1h`). Default:
    /// until the task ends.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = super::args::parse_duration_arg,
          help_heading = help::WAITING, hide_short_help = true)]
    pub wait_timeout: Option<Duration>,
    /// JSON: {"id": …}, or with --wait the whole result.
    #[arg(long, hide_short_help = true)]
    pub json: bool,
    /// Best of N: N tasks of this prompt, each in its own worktree (with --until, each
    /// checked); those that pass are left for review.
    ///
    /// Labelled `attempts:<first id>`: `conductor tasks --review --label attempts:…` shows
    /// them, each marked `check passed` or `check failed`. With --wait: exit 0 when one passed.
    #[arg(long, value_name = "N", conflicts_with = "batch", help_heading = help::WORKTREE,
          hide_short_help = true)]
    pub attempts: Option<u32>,
    /// -f FILE holds many tasks, one a line (see --help).
    ///
    /// A line is a prompt, or a task as JSON (see below).
    #[arg(long, requires = "file", conflicts_with = "id", help_heading = help::QUEUE,
          hide_short_help = true)]
    pub batch: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// The submit request the arguments describe (the prompt read, not yet checked).
pub fn request(args: &Args) -> anyhow::Result<submit::Submit> {
    Ok(submit::Submit {
        task: super::send::with_prompt(&args.task)?,
        queue: args.queue.clone(),
        continue_from: None,
    })
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let done = submit::submit(&client, &request(&args)?)?;
    let id = done.id;
    let queue = Queue::new(client.root().clone());
    if !args.wait {
        // The submit looked at the workers already: not a second time.
        if done.unserved {
            super::waiting::warn_unserved_queue(client.root());
        }
        if args.json {
            super::output::emit_json(&serde_json::json!({ "id": id }))?;
        } else {
            super::output::emit(&format!("{id}\n"))?;
        }
        return Ok(exit::OK);
    }
    // Said at once: a wait cut short (Ctrl-C) leaves the handle of the task that runs on.
    eprintln!("submitted task {id}; waiting for its result (Ctrl-C stops waiting, not the task)");
    let carries_on = format!("task {id} carries on (`conductor queue cancel {id}`)");
    super::waiting::finish(
        args.wait_timeout,
        args.json,
        &carries_on,
        |on_death, left| queue.wait_for_result_with(&id, left, on_death),
    )
}
