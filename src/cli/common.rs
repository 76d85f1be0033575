//! Pieces every binary shares: logging, exit codes, error reports, the worker command.

use std::path::PathBuf;
use std::time::Duration;

use super::{parse_preset, parse_slot};
use crate::agent::AgentCommand;
use crate::preset::Preset;
use crate::watch::{WatchMode, DEFAULT_POLL_INTERVAL};
use crate::worker::{Worker, WorkerOptions};
use crate::{Error, Root, Slot};
use clap::Args;

/// Exit codes, documented in `--help` and the README.
pub mod exit {
    /// Everything went well.
    pub const OK: i32 = 0;
    /// An error (or a task failed).
    pub const FAILURE: i32 = 1;
    /// Bad usage: arguments, slot names, input files.
    pub const USAGE: i32 = 2;
    /// Refused: busy inbox, slot served by another worker, nested start.
    pub const REFUSED: i32 = 3;
}

pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok, 1 error or failed task, 2 usage, 3 refused (busy inbox, slot already served, nested start)";

/// `-v` / `-q`, shared by every binary.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Verbosity {
    /// More logging (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

impl Verbosity {
    pub fn init_logging(self) {
        init_logging(self.verbose, self.quiet);
    }
}

/// Set up `tracing` on stderr: `-v` for debug, `-vv` for trace, `-q` for warnings only;
/// `RUST_LOG` overrides.
pub fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("conductor={level},warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Map an error to its documented exit code.
pub fn exit_code_for(err: &anyhow::Error) -> i32 {
    match err.downcast_ref::<Error>() {
        Some(Error::GateHeld { .. } | Error::InboxBusy { .. } | Error::Refused(_)) => exit::REFUSED,
        Some(
            Error::Usage(_)
            | Error::InvalidSlot { .. }
            | Error::NoSuchSlot { .. }
            | Error::SlotTooLarge { .. }
            | Error::InvalidTask { .. }
            | Error::IdTaken { .. }
            | Error::UnknownDependency { .. }
            | Error::AfterNeedsQueue { .. }
            | Error::BadTaskDir { .. },
        ) => exit::USAGE,
        _ => exit::FAILURE,
    }
}

/// Print an error with its causes and return its exit code.
pub fn report(err: &anyhow::Error) -> i32 {
    let top = err.to_string();
    eprintln!("error: {top}");
    // Library errors already spell out their cause; print only what is new.
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !top.contains(&text) {
            eprintln!("  caused by: {text}");
        }
    }
    if let Some(Error::NoSuchSlot { slot, .. }) = err.downcast_ref::<Error>() {
        eprintln!("  create it with `conductor create-worker {slot}`");
    }
    exit_code_for(err)
}

/// The library's nested-start refusal ([`crate::env::refuse_nested`]), naming the flag
/// that overrides it.
pub fn refuse_nested(action: &str, allow_nested: bool) -> Result<(), Error> {
    crate::env::refuse_nested(action, allow_nested)
        .map_err(|e| Error::Refused(format!("{e}; pass --allow-nested if you really mean it")))
}

/// `--poll` without a value: the library's default interval, in milliseconds.
const DEFAULT_POLL_MS: &str = "100";
const _: () = assert!(DEFAULT_POLL_INTERVAL.as_millis() == 100);

fn parse_poll(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("--poll takes milliseconds, e.g. --poll=250, not {s:?}"))
}

/// `conductor worker N DIR` / `conductor-worker N DIR`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Worker slot number (0, 1, 2 …): serves <root>/workers/<N>/.
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// Project directory the agent runs in (its cwd).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Agent command line; the prompt arrives on its stdin. No shell is involved unless
    /// you write one (`sh -c '…'`). [default: the preset's, else `claude -p`]
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
    /// Agent kind: `claude` (runs `claude -p --output-format json` and lifts its answer,
    /// session id, cost and turns into the result), `codex` (`codex exec -`) or `command`.
    #[arg(long, value_name = "PRESET", value_parser = parse_preset)]
    pub preset: Option<Preset>,
    /// Default task timeout in seconds (a task's own timeoutSecs wins).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL when stopping an agent.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub kill_grace: u64,
    /// Most bytes a task's log file (`tasks/<id>.log`) keeps; beyond it the middle of
    /// the output is cut and a marker line says so.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    pub log_cap: u64,
    /// Poll the directory instead of using native file events (for NFS, SMB, FUSE);
    /// optional interval in milliseconds.
    #[arg(long, value_name = "MS", num_args = 0..=1, require_equals = true,
          default_missing_value = DEFAULT_POLL_MS, value_parser = parse_poll)]
    pub poll: Option<Duration>,
    /// Start even when running inside a conductor agent (CONDUCTOR_WORKER is set).
    #[arg(long)]
    pub allow_nested: bool,
}

/// Start a worker and serve until Ctrl-C / SIGTERM / SIGHUP.
pub fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    refuse_nested(&format!("start worker {}", args.slot), args.allow_nested)?;
    let root = Root::resolve(args.root.as_deref())?;
    let preset = args.preset.unwrap_or_default();
    let agent = AgentCommand::parse(args.agent.as_deref().unwrap_or(preset.default_command()))?;
    let dir = args
        .dir
        .canonicalize()
        .map_err(|e| Error::Usage(format!("project directory {}: {e}", args.dir.display())))?;
    let mut opts = WorkerOptions::new(root, args.slot, dir, agent);
    opts.preset = preset;
    opts.timeout = args.timeout.map(Duration::from_secs);
    opts.kill_grace = Duration::from_secs(args.kill_grace);
    opts.log_cap = args.log_cap;
    opts.allow_nested = args.allow_nested;
    if let Some(interval) = args.poll {
        opts.watch = WatchMode::Poll(interval.max(Duration::from_millis(1)));
    }

    let (tx, shutdown) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = tx.try_send(());
    })
    .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;

    let mut worker = Worker::start(opts)?;
    println!("{}", worker.describe());
    let rec = worker.recovery();
    if !rec.is_empty() {
        println!("recovered: {rec}");
    }
    worker.run(&shutdown)?;
    tracing::info!("worker stopped");
    Ok(())
}

/// `conductor-worker N DIR`: parse the command line, serve the slot, return the exit code.
pub fn worker_main() -> i32 {
    #[derive(Debug, clap::Parser)]
    #[command(name = "conductor-worker", version, about = "Serve one conductor worker slot: run each task.json through the agent", after_help = EXIT_CODES_HELP)]
    struct Cli {
        #[command(flatten)]
        worker: WorkerArgs,
        #[command(flatten)]
        verbosity: Verbosity,
    }
    let cli = <Cli as clap::Parser>::parse();
    cli.verbosity.init_logging();
    match run_worker(cli.worker) {
        Ok(()) => exit::OK,
        Err(e) => report(&e),
    }
}
