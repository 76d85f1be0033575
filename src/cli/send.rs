//! `conductor send N PROMPT`: deliver one task to one worker's inbox.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::usage::CliError;
use crate::{Slot, Task};

use super::{parse_slot, RootArg};
use crate::cli::common::exit;

/// What a task is made of on the command line; shared by `send` and `submit`.
#[derive(Debug, clap::Args)]
pub struct TaskArgs {
    /// The prompt; use -f to read it from a file or stdin.
    #[arg(required_unless_present = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from FILE (`-` for stdin).
    #[arg(short, long, value_name = "FILE", conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// Task id (default: generated). Digits are sent as a number, like the original clients.
    #[arg(long)]
    pub id: Option<String>,
    /// JSON handed to the agent as CONDUCTOR_CONTEXT.
    #[arg(long, value_name = "JSON")]
    pub context: Option<String>,
    /// The task's own time limit (its agent is stopped after it): seconds (`300`) or a
    /// duration (`90s`, `5m`, `1h`).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// The model the agent uses for this task: the claude, codex and gemini presets pass
    /// it on (`--model` / `-m`); the command preset ignores it (the worker warns).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

impl TaskArgs {
    /// The task these arguments describe (prompt read from its file if need be).
    pub fn task(&self) -> anyhow::Result<Task> {
        let mut task = Task::new(read_prompt(self.prompt.clone(), self.file.as_ref())?);
        if let Some(id) = &self.id {
            task.id = Some(super::task_id_arg(id)?);
        }
        if let Some(c) = &self.context {
            task.context = Some(
                serde_json::from_str(c)
                    .map_err(|e| CliError::Usage(format!("--context is not valid JSON: {e}")))?,
            );
        }
        task.timeout_secs = self.timeout.map(super::whole_secs);
        task.model = self.model.clone();
        Ok(task)
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Worker slot to deliver to.
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    #[command(flatten)]
    pub task: TaskArgs,
    /// Wait for the result and print its output (exit 1 if the task failed, 4 if no
    /// live worker serves the slot or its worker dies and nobody recovers the task).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up waiting after this long (exit 1; the task carries on):
    /// seconds or a duration (`90s`, `5m`, `1h`). Default: until the task ends.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = super::parse_duration_arg)]
    pub wait_timeout: Option<Duration>,
    /// Print the result as JSON (with --wait).
    #[arg(long, requires = "wait")]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// The prompt from the argument, a file, or stdin (`-`).
pub fn read_prompt(prompt: Option<String>, file: Option<&PathBuf>) -> anyhow::Result<String> {
    match (prompt, file) {
        (Some(p), _) => Ok(p),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| CliError::Usage(format!("cannot read the prompt from stdin: {e}")))?;
            Ok(s)
        }
        // Bad input (exit 2), naming the file and what is wrong with it.
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| {
            CliError::Usage(format!("cannot read the prompt from {}: {e}", f.display())).into()
        }),
        (None, None) => anyhow::bail!(CliError::Usage("give a prompt or -f FILE".into())),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let mut task = args.task.task()?;
    crate::env::stamp_depth(&mut task)?;
    let slot = args.slot;
    let id = client.write_task(slot, &task)?;
    if !args.wait {
        super::waiting::warn_if_unserved_slot(client.root(), slot);
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let carries_on = format!(
        "task {id} carries on (`conductor wait {slot} {id}`, or `conductor cancel {slot}`)"
    );
    super::waiting::finish(
        args.wait_timeout,
        args.json,
        &carries_on,
        |on_death, left| client.wait_for_result_with(slot, &id, left, on_death),
    )
}
