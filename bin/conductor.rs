//! `conductor`: the command-line front end. Parses, calls the library, reports.

#[path = "cli/mod.rs"]
mod cli;
#[path = "common/mod.rs"]
mod common;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "conductor",
    version,
    about = "Run AI coding-agent sessions as workers fed through plain files",
    after_help = common::EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    verbosity: common::Verbosity,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run prompts on N fresh workers and print the results (the one-shot main job).
    Run(cli::run::Args),
    /// Deliver a task to one worker's inbox; fails (exit 3) if the inbox is busy.
    Send(cli::send::Args),
    /// Put a task into the shared queue; any idle worker runs it.
    Submit(cli::submit::Args),
    /// List the shared queue's pending tasks in run order (and why each waits);
    /// `queue cancel ID`, `queue retry ID`.
    Queue(cli::queue::Args),
    /// Show every slot: state, task, ages, agent pid, lock holder, stale flags.
    Status(cli::status::Args),
    /// Print a task's result (the newest, or TASK_ID's).
    Result(cli::result::Args),
    /// Print a worker's live output.log; -f follows it.
    Logs(cli::logs::Args),
    /// Wait until a task (or the running one) finishes.
    Wait(cli::wait::Args),
    /// Cancel the task a worker is running.
    Cancel(cli::cancel::Args),
    /// Run a finished task again under a new id.
    Retry(cli::retry::Args),
    /// List locks and their holders; `locks clean --apply` removes stale ones.
    Locks(cli::locks::Args),
    /// Remove old results, task records, rejected files and temp files.
    Gc(cli::gc::Args),
    /// Check the root, the filesystem, inotify limits, tmux and the agent command.
    Doctor(cli::doctor::Args),
    /// Set up the root and worker slots 0..N.
    Init(cli::init::Args),
    /// Create one worker slot.
    CreateWorker(cli::init::CreateArgs),
    /// Serve one worker slot (same as `conductor-worker`).
    Worker(common::WorkerArgs),
    /// Finish what dead workers left behind (stale locks, interrupted tasks).
    Recover(cli::recover::Args),
    /// Print shell completions.
    Completions(cli::completions::Args),
    /// Lay out an orchestrator pane and N worker panes in tmux (same as conductor-launch)
    Launch(cli::launch::Args),
}

fn main() {
    let cli = Cli::parse();
    cli.verbosity.init_logging();
    let code = match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => common::report(&e),
    };
    std::process::exit(code);
}

fn dispatch(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Run(a) => cli::run::run(a),
        Command::Send(a) => cli::send::run(a),
        Command::Submit(a) => cli::submit::run(a),
        Command::Queue(a) => cli::queue::run(a),
        Command::Status(a) => cli::status::run(a),
        Command::Result(a) => cli::result::run(a),
        Command::Logs(a) => cli::logs::run(a),
        Command::Wait(a) => cli::wait::run(a),
        Command::Cancel(a) => cli::cancel::run(a),
        Command::Retry(a) => cli::retry::run(a),
        Command::Locks(a) => cli::locks::run(a),
        Command::Gc(a) => cli::gc::run(a),
        Command::Doctor(a) => cli::doctor::run(a),
        Command::Init(a) => cli::init::run(a),
        Command::CreateWorker(a) => cli::init::run_create(a),
        Command::Worker(a) => common::run_worker(a).map(|()| common::exit::OK),
        Command::Recover(a) => cli::recover::run(a),
        Command::Completions(a) => cli::completions::run(a),
        Command::Launch(a) => cli::launch::run(a),
    }
}
