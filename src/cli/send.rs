//! `conductor send N PROMPT`: deliver one task to one worker's inbox.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Slot, Task};
use anyhow::Context as _;

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
    /// Task timeout in seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
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
                    .map_err(|e| Error::Usage(format!("--context is not valid JSON: {e}")))?,
            );
        }
        task.timeout_secs = self.timeout;
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
    /// Wait for the result and print its output (exit 1 if the task failed).
    #[arg(long)]
    pub wait: bool,
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
                .context("reading the prompt from stdin")?;
            Ok(s)
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading the prompt from {}", f.display())),
        (None, None) => anyhow::bail!(Error::Usage("give a prompt or -f FILE".into())),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let task = args.task.task()?;
    let id = client.write_task(args.slot, &task)?;
    if !args.wait {
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    let result = client.wait_for_result(args.slot, &id, Duration::MAX)?;
    super::print_result(&result, args.json)
}
