//! `conductor`: the command-line front end. Parses, calls the library, reports.

#[path = "common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use conductor::worker::recover_abandoned;
use conductor::{Client, Slot, Task, TaskId};

#[derive(Debug, Parser)]
#[command(name = "conductor", version, about = "Run AI coding-agent sessions as workers fed through plain files", after_help = common::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More logging (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve one worker slot (same as `conductor-worker`).
    Worker(common::WorkerArgs),
    /// Deliver a task to one worker's inbox; fails (exit 3) if the inbox is busy.
    Send {
        #[arg(value_parser = parse_slot)]
        slot: Slot,
        /// The prompt; use -f to read it from a file or stdin.
        #[arg(required_unless_present = "file")]
        prompt: Option<String>,
        /// Read the prompt from FILE (`-` for stdin).
        #[arg(short, long, value_name = "FILE", conflicts_with = "prompt")]
        file: Option<PathBuf>,
        /// Task id (default: generated).
        #[arg(long)]
        id: Option<String>,
        /// JSON handed to the agent as CONDUCTOR_CONTEXT.
        #[arg(long, value_name = "JSON")]
        context: Option<String>,
        /// Task timeout in seconds.
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Wait for the result and print its output (exit 1 if the task failed).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        root: RootArg,
    },
    /// Print a task's result (the newest, or TASK_ID's) as JSON.
    Result {
        #[arg(value_parser = parse_slot)]
        slot: Slot,
        task_id: Option<String>,
        #[command(flatten)]
        root: RootArg,
    },
    /// Finish what dead workers left behind (stale locks, interrupted tasks).
    Recover {
        /// Only this slot (default: every slot without a live worker).
        #[arg(value_parser = parse_slot)]
        slot: Option<Slot>,
        #[command(flatten)]
        root: RootArg,
    },
}

#[derive(Debug, clap::Args)]
struct RootArg {
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

fn parse_slot(s: &str) -> Result<Slot, String> {
    s.parse::<Slot>().map_err(|e| e.to_string())
}

fn main() {
    let cli = Cli::parse();
    common::init_logging(cli.verbose, cli.quiet);
    let code = match run(cli.command) {
        Ok(code) => code,
        Err(e) => common::report(&e),
    };
    std::process::exit(code);
}

fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Worker(args) => common::run_worker(args).map(|()| common::exit::OK),
        Command::Send {
            slot,
            prompt,
            file,
            id,
            context,
            timeout,
            wait,
            root,
        } => {
            let client = Client::from_env(root.root.as_deref())?;
            let prompt = match (prompt, file) {
                (Some(p), _) => p,
                (None, Some(f)) if f.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin())
                        .context("reading the prompt from stdin")?
                }
                (None, Some(f)) => std::fs::read_to_string(&f)
                    .with_context(|| format!("reading the prompt from {}", f.display()))?,
                (None, None) => unreachable!("clap requires a prompt or -f"),
            };
            let mut task = Task::new(prompt);
            if let Some(id) = id {
                task.id = Some(
                    TaskId::parse(&id)
                        .map_err(|reason| conductor::Error::InvalidTask { reason })?,
                );
            }
            if let Some(c) = context {
                task.context = Some(serde_json::from_str(&c).map_err(|e| {
                    conductor::Error::Usage(format!("--context is not valid JSON: {e}"))
                })?);
            }
            task.timeout_secs = timeout;
            let id = client.write_task(slot, &task)?;
            if !wait {
                println!("{id}");
                return Ok(common::exit::OK);
            }
            let result = client.wait_for_result(slot, &id, Duration::MAX)?;
            print!("{}", result.output);
            if result.success {
                Ok(common::exit::OK)
            } else {
                eprintln!("task {id} failed: {}", result.error.unwrap_or_default());
                Ok(common::exit::FAILURE)
            }
        }
        Command::Result {
            slot,
            task_id,
            root,
        } => {
            let client = Client::from_env(root.root.as_deref())?;
            let result = match task_id {
                Some(id) => {
                    let id = TaskId::parse(&id)
                        .map_err(|reason| conductor::Error::InvalidTask { reason })?;
                    client
                        .read_result_for(slot, &id)?
                        .with_context(|| format!("worker {slot} has no result for task {id}"))?
                }
                None => client
                    .read_result(slot)?
                    .with_context(|| format!("worker {slot} has no result yet"))?,
            };
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(common::exit::OK)
        }
        Command::Recover { slot, root } => {
            let client = Client::from_env(root.root.as_deref())?;
            let slots = match slot {
                Some(s) => vec![s],
                None => client.list_workers()?,
            };
            let mut code = common::exit::OK;
            for s in slots {
                match recover_abandoned(client.root(), s) {
                    Ok(r) if r.is_empty() => println!("worker {s}: nothing to recover"),
                    Ok(r) => println!("worker {s}: {r:?}"),
                    Err(conductor::Error::GateHeld { .. }) if slot.is_none() => {
                        println!("worker {s}: served by a live worker, left alone")
                    }
                    Err(e) => {
                        code = common::report(&e.into());
                    }
                }
            }
            Ok(code)
        }
    }
}
