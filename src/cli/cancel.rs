//! `conductor cancel TASK_ID… | N [--task ID]`: withdraw waiting tasks, stop running ones.

use serde_json::json;

use crate::maintenance::{request_cancel, CancelOutcome};
use crate::tasks::{CancelTask, TaskState};
use crate::TaskId;

use super::args::RootArg;
use super::target::{at_most_one, Target, Targets, TARGET_HELP};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{TARGET_HELP}\n\n{SLOT_HELP}"))]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Cancel every unfinished task (waiting, queued or running) of the root.
    #[arg(long, conflicts_with_all = ["args", "slot", "task"])]
    pub all: bool,
    /// Cancel the unfinished tasks in these states (`waiting`, `queued`, `running`;
    /// comma-separated).
    #[arg(long, value_name = "STATE", value_delimiter = ',', value_parser = parse_state,
          conflicts_with_all = ["args", "slot", "task"])]
    pub state: Vec<TaskState>,
    /// Cancel the unfinished tasks with this key.
    #[arg(long, value_name = "KEY", conflicts_with_all = ["args", "slot", "task"])]
    pub key: Option<String>,
    /// Cancel the unfinished tasks of this group.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["args", "slot", "task"])]
    pub group: Option<String>,
    /// JSON Lines, one a task: {"id", "outcome": withdrawn | requested | noLiveWorker |
    /// finished, "slot", "state"} (the exit code as without it).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

fn parse_state(s: &str) -> Result<TaskState, String> {
    let state: TaskState = s.trim().parse()?;
    if state.is_finished() {
        return Err(format!(
            "a {state} task has finished: only waiting, queued and working tasks can be cancelled"
        ));
    }
    Ok(state)
}

/// The states a task can be cancelled in.
const UNFINISHED: [TaskState; 3] = [TaskState::Waiting, TaskState::Queued, TaskState::Running];

/// `--all`, `--state`, `--key`, `--group`: the unfinished tasks they select, oldest first.
fn selected(client: &crate::Client, args: &Args) -> anyhow::Result<Vec<TaskId>> {
    let opts = crate::tasks::ListOptions {
        states: if args.state.is_empty() {
            UNFINISHED.to_vec()
        } else {
            args.state.clone()
        },
        key: args.key.clone(),
        group: args.group.clone(),
        labels: Vec::new(),
        slot: None,
        since: None,
        limit: None,
        after: None,
    };
    let mut tasks = client.list_tasks(&opts)?;
    tasks.reverse();
    Ok(tasks.into_iter().map(|t| t.id).collect())
}

const SLOT_HELP: &str = "\
By id: a task waiting in an inbox or in the queue is withdrawn (its file moved to \
rejected/, so no worker can claim it any more) and answered with a `cancelled` result, \
which ends its waiters; a running task is stopped by its worker as below. Exits 1 when \
the task had already finished. With a slot (`cancel N`, `cancel N --task ID`): writes the running task's id into workers/<N>/cancel (atomically); the worker stops the \
agent's process group and records a `cancelled` result (`conductor wait N ID` shows it). \
Exits 1, writing nothing, when nothing is running, when --task names another task, or \
when no live worker serves the slot; with --task, only if that task is the one running.";

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    if args.all || !args.state.is_empty() || args.key.is_some() || args.group.is_some() {
        let ids = selected(&client, &args)?;
        if ids.is_empty() {
            eprintln!("no unfinished task matches; nothing cancelled");
            return Ok(exit::OK);
        }
        let code = cancel_tasks(&client, &ids, args.json)?;
        eprintln!("{} task(s) selected", ids.len());
        return Ok(code);
    }
    let (slot, only) = match args.targets.resolve(client.root(), "cancel")? {
        Target::Tasks(ids) => return cancel_tasks(&client, &ids, args.json),
        Target::Slot { slot, ids } => (slot, at_most_one(ids, "cancel")?),
    };
    match request_cancel(client.root(), slot, only.as_ref())? {
        CancelOutcome::Requested { id } if args.json => {
            let v = json!({"id": id, "outcome": "requested", "slot": slot.0});
            super::output::emit(&format!("{v}\n"))?;
            Ok(exit::OK)
        }
        CancelOutcome::Requested { id } => {
            println!("cancel requested for task {id} on worker {slot}");
            Ok(exit::OK)
        }
        CancelOutcome::NothingRunning { inbox } => {
            match inbox {
                Some(id) => eprintln!(
                    "nothing is running on worker {slot} (task {id} waits in the inbox: `conductor cancel {id}` withdraws it); nothing cancelled"
                ),
                None => eprintln!("nothing is running on worker {slot}; nothing cancelled"),
            }
            Ok(exit::FAILURE)
        }
        CancelOutcome::OtherTaskRunning { running } => {
            eprintln!(
                "task {} is not running on worker {slot} (task {running} is); nothing cancelled",
                only.map(|i| i.to_string()).unwrap_or_default()
            );
            Ok(exit::FAILURE)
        }
        CancelOutcome::IdNotReadable => {
            eprintln!(
                "error: worker {slot} has a task in hand whose id cannot be read yet; try again in a moment"
            );
            Ok(exit::USAGE)
        }
        CancelOutcome::NoLiveWorker { id } => {
            eprintln!(
                "no live worker serves slot {slot}, so nobody would act on a cancel{}; \
                 run `conductor recover {slot}` to finish it as interrupted",
                id.map(|i| format!(" (task {i} was left behind)"))
                    .unwrap_or_default()
            );
            Ok(exit::FAILURE)
        }
    }
}

/// Cancel each task by id; exit 1 if any could not be (finished already, no live worker).
fn cancel_tasks(client: &crate::Client, ids: &[TaskId], as_json: bool) -> anyhow::Result<i32> {
    let mut code = exit::OK;
    for id in ids {
        let done = client.cancel_task(id)?;
        if as_json {
            if matches!(
                done,
                CancelTask::NoLiveWorker { .. } | CancelTask::Finished { .. }
            ) {
                code = exit::FAILURE;
            }
            super::output::emit(&format!("{}\n", cancel_json(id, &done)))?;
            continue;
        }
        match done {
            CancelTask::Withdrawn { slot: Some(slot) } => {
                println!(
                    "cancelled task {id}: withdrawn from worker {slot}'s inbox before it started"
                )
            }
            CancelTask::Withdrawn { slot: None } => {
                println!("cancelled task {id}: withdrawn from the queue before it started")
            }
            CancelTask::Requested { slot } => {
                println!(
                    "cancel requested for task {id}, running on worker {slot}; its worker stops it"
                )
            }
            CancelTask::NoLiveWorker { slot } => {
                eprintln!(
                    "task {id} was left running on worker {slot}, which no live worker serves; \
                     run `conductor recover {slot}` to finish it as interrupted"
                );
                code = exit::FAILURE;
            }
            CancelTask::Finished { state } => {
                let how = if state == TaskState::Gone {
                    "finished (its files are gone)".to_string()
                } else {
                    format!("finished: {state}")
                };
                eprintln!("task {id} has already {how}; nothing cancelled");
                code = exit::FAILURE;
            }
        }
    }
    Ok(code)
}

/// One line of `cancel --json`.
fn cancel_json(id: &TaskId, done: &CancelTask) -> serde_json::Value {
    match done {
        CancelTask::Withdrawn { slot } => {
            json!({"id": id, "outcome": "withdrawn", "slot": slot.map(|s| s.0)})
        }
        CancelTask::Requested { slot } => {
            json!({"id": id, "outcome": "requested", "slot": slot.0})
        }
        CancelTask::NoLiveWorker { slot } => {
            json!({"id": id, "outcome": "noLiveWorker", "slot": slot.0})
        }
        CancelTask::Finished { state } => json!({"id": id, "outcome": "finished", "state": state}),
    }
}
