//! `conductor-worker N DIR`: serve one worker slot (same as `conductor worker`).

#[path = "common/mod.rs"]
mod common;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "conductor-worker", version, about = "Serve one conductor worker slot: run each task.json through the agent", after_help = common::EXIT_CODES_HELP)]
struct Cli {
    #[command(flatten)]
    worker: common::WorkerArgs,
    /// More logging (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    quiet: bool,
}

fn main() {
    let cli = Cli::parse();
    common::init_logging(cli.verbose, cli.quiet);
    let code = match common::run_worker(cli.worker) {
        Ok(()) => common::exit::OK,
        Err(e) => common::report(&e),
    };
    std::process::exit(code);
}
