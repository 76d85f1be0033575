//! `conductor send N PROMPT`: deliver one task to one worker's inbox.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::usage::CliError;
use crate::verbs::send;
use crate::verbs::spec::TaskSpec;
use crate::Slot;

use super::{args::parse_slot, args::RootArg, help};
use crate::cli::common::exit;

/// `spec` with its prompt read (from `-f FILE` or stdin) and not empty: a usage error
/// naming the file otherwise.
pub fn with_prompt(spec: &TaskSpec) -> anyhow::Result<TaskSpec> {
    let mut spec = spec.clone();
    let prompt = read_prompt(spec.prompt.take(), spec.file.as_ref())?;
    if prompt.trim().is_empty() {
        anyhow::bail!(CliError::Usage(match &spec.file {
            Some(f) => format!("the prompt is empty ({} holds no text)", f.display()),
            None => "the prompt is empty: give the task's text (or -f FILE)".to_string(),
        }));
    }
    spec.prompt = Some(prompt);
    spec.file = None;
    Ok(spec)
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Worker slot to deliver to.
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    #[command(flatten)]
    pub task: TaskSpec,
    /// Wait for the result and print its output.
    ///
    /// Exit 1 if the task failed, 4 if no live worker serves the slot or its worker dies
    /// and nobody recovers the task.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: stop waiting after this long.
    ///
    /// Exit 1; the task carries on. Seconds or a duration (`90s`, `5m`, `1h`). Default:
    /// until the task ends.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = super::args::parse_duration_arg,
          help_heading = help::WAITING, hide_short_help = true)]
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
    let slot = args.slot;
    let request = send::Send {
        slot,
        task: with_prompt(&args.task)?,
    };
    let sent = send::send(&client, &request)?;
    let id = sent.id;
    if let Some((why, target)) = sent.held {
        let hint = super::pause::resume_hint(&[target.to_string()]);
        eprintln!("{why}: task {id} waits in its inbox and runs once resumed (`{hint}`)");
    }
    if !args.wait {
        super::waiting::warn_if_unserved_slot(client.root(), slot);
        super::output::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    eprintln!(
        "sent task {id} to worker {slot}; waiting for its result (Ctrl-C stops waiting, not the task)"
    );
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
