//! `conductor retry TASK_ID | N TASK_ID`: run a finished task again under a new id.

use crate::cli::usage::CliError;
use crate::verbs::retry::{again_from, locate, Again, Ran};
use crate::TaskId;

use super::args::RootArg;
use super::target::{single, Target, Targets, TARGET_HELP};
use crate::cli::common::exit;
use crate::queue::Queue;

#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{TARGET_HELP}\n\n\
The task's record (workers/N/tasks/TASK_ID.json, kept by the slot that ran it) is sent \
again: to that slot's inbox, or back to the shared queue for a task that came through it."))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Continue the agent's session instead of starting afresh (claude preset:
    /// `claude -p --resume SESSION`; codex: `codex exec resume SESSION`; the session id
    /// taken from the task's result).
    #[arg(long)]
    pub resume: bool,
    /// Id for the new task (default: TASK_ID-r1, -r2 …).
    #[arg(long)]
    pub id: Option<String>,
    /// Replace the prompt (e.g. with --resume: "continue, and fix the failing test").
    #[arg(long)]
    pub prompt: Option<String>,
    /// Wait for the result and print its output (exit 1 if it failed).
    #[arg(long, conflicts_with = "with_dependents")]
    pub wait: bool,
    /// Also re-queue the queued tasks this one's end cancelled down its chains
    /// (`--after`), each waiting for the new run of what it waited for; prints every
    /// new id, this task's first.
    #[arg(long, conflicts_with = "id")]
    pub with_dependents: bool,
    /// Redo an unmerged or conflicting worktree task on top of the current branch: a
    /// new task in a new worktree from HEAD whose prompt carries the original prompt,
    /// the conflict, and the old diff (its old branch is kept).
    #[arg(long, conflicts_with_all = ["resume", "prompt", "with_dependents"])]
    pub rebase: bool,
    /// JSON Lines: {"retried": OLD, "id": NEW} for each task run again (and "warning"
    /// when the new one cannot run either).
    #[arg(long, conflicts_with = "wait")]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// Where a task to retry ran.
fn ran_where(client: &crate::Client, args: &Args) -> anyhow::Result<Ran> {
    match args.targets.resolve(client.root(), "retry")? {
        Target::Slot { slot, ids } => Ok(Ran::Slot(slot, single(ids, "retry N")?, false)),
        Target::Tasks(ids) => Ok(locate(client, single(ids, "retry")?)?),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let ran = ran_where(&client, &args)?;
    let queue = Queue::new(client.root().clone());
    if args.with_dependents {
        let (old, queued) = match &ran {
            Ran::Slot(_, id, queued) => (id.clone(), *queued),
            Ran::NeverRan(id) => (id.clone(), true),
        };
        if !queued || args.resume {
            return Err(CliError::Usage(format!(
                "--with-dependents re-queues a task of the shared queue and the tasks \
                 waiting for it{}",
                if args.resume {
                    "; it does not take --resume".to_string()
                } else {
                    format!("; task {old} was sent to a slot, so nothing waits for it")
                }
            ))
            .into());
        }
        let prompt = args.prompt.clone();
        let renamed = queue.retry_with_dependents(&old, |t| {
            if let Some(p) = prompt {
                t.prompt = p;
            }
        })?;
        let mut out = String::new();
        for (old, new) in &renamed {
            if args.json {
                out.push_str(&format!(
                    "{}\n",
                    serde_json::json!({"retried": old, "id": new})
                ));
            } else {
                out.push_str(&format!("{new}\n"));
                eprintln!("{old} → {new}");
            }
        }
        super::output::emit(&out)?;
        return Ok(exit::OK);
    }
    let how = Again {
        resume: args.resume,
        id: args
            .id
            .as_deref()
            .map(super::args::task_id_arg)
            .transpose()?,
        prompt: args.prompt,
    };
    let old = match &ran {
        Ran::Slot(_, id, _) | Ran::NeverRan(id) => id.clone(),
    };
    let retried = if args.rebase {
        crate::verbs::redo::again_on_top_from(&client, ran, how)?
    } else {
        again_from(&client, ran, how)?
    };
    if args.json {
        let mut v = serde_json::json!({"retried": old, "id": retried.id});
        if let Some(w) = &retried.warning {
            v["warning"] = w.as_str().into();
        }
        super::output::emit(&format!("{v}\n"))?;
        return Ok(exit::OK);
    }
    if let Some(warning) = &retried.warning {
        eprintln!("{warning}");
    }
    finish(&client, retried.id, args.wait, false)
}

/// `retry ID [--wait]` with no other option (`queue retry ID` too): run finished task
/// `id` again, print the new id or wait for it.
pub fn retry_id(client: &crate::Client, id: TaskId, wait: bool, json: bool) -> anyhow::Result<i32> {
    let old = id.clone();
    let retried = crate::verbs::retry::again(client, id, Again::default())?;
    if json && !wait {
        let mut v = serde_json::json!({"retried": old, "id": retried.id});
        if let Some(w) = &retried.warning {
            v["warning"] = w.as_str().into();
        }
        super::output::emit(&format!("{v}\n"))?;
        return Ok(exit::OK);
    }
    if let Some(warning) = &retried.warning {
        eprintln!("{warning}");
    }
    finish(client, retried.id, wait, json)
}

/// Print the new task's id, or with `--wait` wait for it and print its result (the
/// whole result with `json`).
fn finish(client: &crate::Client, id: TaskId, wait: bool, json: bool) -> anyhow::Result<i32> {
    if !wait {
        super::output::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let carries_on = format!("task {id} carries on (`conductor wait {id}`)");
    super::waiting::finish(None, json, &carries_on, |on_death, left| {
        client.wait_for_task_with(&id, left, on_death)
    })
}
