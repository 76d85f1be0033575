//! `conductor init N [--root DIR]` and `conductor create-worker N`.

use std::path::PathBuf;

use crate::cli::usage::CliError;
use crate::{Client, Slot};

use super::{args::parse_slot, args::RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Creates the root (workers/, queue/, keys/, slots/, .locks/, all 0700) and worker slots \
0..N-1, each with results/, tasks/, rejected/ and an idle status.json. Idempotent: what \
exists is left as it is. Then start a worker per slot: `conductor-worker <N> PROJECT_DIR`.")]
pub struct Args {
    /// How many worker slots: creates 0..N-1.
    #[arg(value_name = "N")]
    pub count: u32,
    /// The old spelling of --root. `--dir` names a project directory everywhere else,
    /// so it is refused here with the right flag rather than taken for the root.
    #[arg(long, value_name = "DIR", hide = true)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The slot number to create (0, 1, 2 …).
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    #[command(flatten)]
    pub root: RootArg,
}

/// Create the root's shared directories, saying whether it existed.
fn init_root(client: &Client) -> anyhow::Result<()> {
    let existed = client.root().workers_dir().is_dir();
    client.init_queue()?;
    println!(
        "{} root {}",
        if existed { "using existing" } else { "created" },
        client.root().path().display()
    );
    Ok(())
}

fn create_slot(client: &Client, slot: Slot) -> anyhow::Result<()> {
    let existed = client.worker(slot).dir.is_dir();
    let w = client.create_worker(slot)?;
    println!(
        "{} worker slot {slot}: {}",
        if existed { "kept existing" } else { "created" },
        w.dir.display()
    );
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(dir) = &args.dir {
        return Err(CliError::Usage(format!(
            "`init` sets up a root: name it with --root {} (--dir is a project directory, \
             for run, launch and the workers)",
            dir.display()
        ))
        .into());
    }
    let client = args.root.unchecked_client()?;
    if args.count > crate::layout::MAX_SLOTS {
        // Before anything is made: not 1,024 slots and then an error.
        return Err(crate::Error::SlotTooLarge {
            name: (args.count - 1).to_string(),
            max: crate::layout::MAX_SLOTS,
        }
        .into());
    }
    init_root(&client)?;
    for n in 0..args.count {
        create_slot(&client, Slot(n))?;
    }
    if args.count > 0 {
        // Named explicitly and not what the environment says: the worker needs telling.
        let explicit = args.root.root.is_some();
        let env_matches = std::env::var_os(crate::layout::ENV_HOME)
            .is_some_and(|h| std::path::Path::new(&h) == client.root().path());
        let env_hint = if explicit && !env_matches {
            format!("CONDUCTOR_HOME={} ", client.root().path().display())
        } else {
            String::new()
        };
        println!(
            "next: start a worker per slot, e.g. `{env_hint}conductor-worker 0 PROJECT_DIR --agent \"claude -p\"`"
        );
    }
    Ok(exit::OK)
}

pub fn run_create(args: CreateArgs) -> anyhow::Result<i32> {
    let client = args.root.unchecked_client()?;
    init_root(&client)?;
    create_slot(&client, args.slot)?;
    Ok(exit::OK)
}
