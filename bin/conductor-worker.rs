//! `conductor-worker N DIR`: serve one worker slot (same as `conductor worker`).

#[path = "common/mod.rs"]
mod common;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "conductor-worker", version, about = "Serve one conductor worker slot: run each task.json through the agent", after_help = common::EXIT_CODES_HELP)]
struct Cli {
    #[command(flatten)]
    worker: common::WorkerArgs,
    #[command(flatten)]
    verbosity: common::Verbosity,
}

fn main() {
    let cli = Cli::parse();
    cli.verbosity.init_logging();
    let code = match common::run_worker(cli.worker) {
        Ok(()) => common::exit::OK,
        Err(e) => common::report(&e),
    };
    std::process::exit(code);
}
