//! `conductor-launch`: an orchestrator pane and N worker panes in tmux (same as
//! `conductor launch`).

// Shared with the other binaries; this one uses only part of it.
#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "cli/launch.rs"]
mod launch;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "conductor-launch",
    version,
    about = "Lay out an orchestrator pane and N worker panes in tmux"
)]
struct Cli {
    #[command(flatten)]
    launch: launch::Args,
    #[command(flatten)]
    verbosity: common::Verbosity,
}

fn main() {
    let cli = Cli::parse();
    cli.verbosity.init_logging();
    let code = match launch::run(cli.launch) {
        Ok(code) => code,
        Err(e) => common::report(&e),
    };
    std::process::exit(code);
}
