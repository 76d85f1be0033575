//! `conductor parallel [N | --off]`: how many agents may run at once on the whole root (config.json's `maxRunning`), shown or set.

use serde_json::json;

use super::usage::CliError;
use super::{args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;
use crate::config::{edit, Config};

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Sets config.json's maxRunning, the root-wide cap on running agents (direct deliveries \
included), as pueue's `parallel` does: every worker of the root honours it from its next \
pickup; running tasks go on. Groups have their own cap (`conductor group set NAME \
--parallel N`). Without N or --off: prints the cap and how many agents run now.")]
pub struct Args {
    /// The most agents that may run at once on the root (1 or more).
    #[arg(value_name = "N", conflicts_with = "off")]
    pub max: Option<u32>,
    /// No root-wide cap (each worker's slots are the only limit).
    #[arg(long)]
    pub off: bool,
    /// JSON: {"maxRunning": N or null, "running": N}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    let path = client.root().config_file();
    let config = match (args.max, args.off) {
        (Some(0), _) => {
            return Err(CliError::Usage(
                "parallel takes 1 or more (--off for no cap; `conductor pause --all` stops \
                 every pickup)"
                    .into(),
            )
            .into())
        }
        (Some(n), _) => edit::set_key(&path, "maxRunning", Some(n.into()))?,
        (None, true) => edit::set_key(&path, "maxRunning", None)?,
        (None, false) => Config::load(&path)?,
    };
    let running = crate::queue::Queue::new(client.root().clone())
        .capacity()?
        .slots
        .used;
    if args.json {
        emit_json(&json!({"maxRunning": config.max_running, "running": running}))?;
        return Ok(exit::OK);
    }
    let cap = match config.max_running {
        Some(n) => format!("at most {n} agents run at once on the root"),
        None => "no root-wide cap on running agents".to_string(),
    };
    emit(&format!("{cap} ({running} running now)\n"))?;
    Ok(exit::OK)
}
