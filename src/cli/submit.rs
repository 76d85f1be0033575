//! `conductor submit PROMPT`: put a task into the shared queue; any idle worker runs it.

use std::path::PathBuf;
use std::time::Duration;

use crate::queue::Queue;
use crate::{Error, Task};

use super::send::TaskArgs;
use super::{help, RootArg};
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
    pub task: TaskArgs,
    /// One running task per key (a user or a project).
    ///
    /// The serialization key: tasks with the same key never run at the same time.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Priority 0-9; higher runs first [default: 5].
    #[arg(long, value_name = "0-9", value_parser = clap::value_parser!(u8).range(0..=9))]
    pub priority: Option<u8>,
    /// Run once these tasks have all succeeded.
    ///
    /// They must already be sent or submitted; if one does not succeed, this task ends
    /// `cancelled` ("dependency ID failed").
    #[arg(long, value_name = "ID,…", value_delimiter = ',')]
    pub after: Vec<String>,
    /// Run the agent in DIR (not the worker's project).
    ///
    /// An existing directory of yours, instead of the worker's project directory.
    #[arg(long, value_name = "DIR", help_heading = help::AGENT)]
    pub dir: Option<PathBuf>,
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
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = super::parse_duration_arg,
          help_heading = help::WAITING, hide_short_help = true)]
    pub wait_timeout: Option<Duration>,
    /// JSON: {"id": …}, or with --wait the whole result.
    #[arg(long, hide_short_help = true)]
    pub json: bool,
    /// Run in this group, at most its --parallel at once.
    ///
    /// At most the group's --parallel tasks of it run at once, root-wide (`conductor
    /// group add NAME --parallel N` first).
    #[arg(long, value_name = "NAME", help_heading = help::QUEUE, hide_short_help = true)]
    pub group: Option<String>,
    /// Up to N attempts in all after interruptions [default: 1].
    ///
    /// Run again after an interruption (a worker crash) up to N attempts in all.
    #[arg(long, value_name = "N", help_heading = help::QUEUE, hide_short_help = true)]
    pub max_attempts: Option<u32>,
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

/// The task the arguments describe (validated by the queue on submit).
pub fn task_from(args: &Args) -> anyhow::Result<Task> {
    with_options(args, args.task.task()?)
}

/// `task` with the queue's options of `args` (key, group, priority, …) set.
pub fn with_options(args: &Args, mut task: Task) -> anyhow::Result<Task> {
    task.key = args.key.clone();
    task.group = args.group.clone();
    task.priority = args.priority;
    task.max_attempts = args.max_attempts;
    for dep in &args.after {
        task.after.push(super::task_id_arg(dep)?);
    }
    if let Some(dir) = &args.dir {
        // Absolute and resolved (no `..`, no links) for the worker, which runs
        // elsewhere; missing → refused by the queue.
        let resolved = match dir.canonicalize() {
            Ok(d) => d,
            Err(_) => std::path::absolute(dir).map_err(|e| Error::BadTaskDir {
                path: dir.clone(),
                reason: e.to_string(),
            })?,
        };
        task.dir = Some(resolved);
    }
    task.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    Ok(task)
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let mut task = task_from(&args)?;
    for dep in &mut task.after {
        *dep = crate::ids::resolve(client.root(), dep)?;
    }
    crate::env::stamp_depth(&mut task)?;
    super::send::check_worktree_dir(&task, None)?;
    let queue = Queue::new(client.root().clone());
    let id = queue.submit(&task)?;
    if !args.wait {
        super::waiting::warn_if_unserved_queue(client.root());
        if args.json {
            super::emit_json(&serde_json::json!({ "id": id }))?;
        } else {
            super::emit(&format!("{id}\n"))?;
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
