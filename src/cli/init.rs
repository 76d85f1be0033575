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
    /// One JSON document: {"root", "rootCreated", "slots": [{"slot", "dir", "created"}]}
    /// (no hint of what to start next).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The slot number to create (0, 1, 2 …).
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    /// One JSON document, as `init --json`'s: {"root", "rootCreated", "slots": [{"slot",
    /// "dir", "created"}]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// What `init` and `create-worker` made, told as they go (text) or at the end (--json).
struct Made {
    json: bool,
    doc: serde_json::Value,
}

impl Made {
    fn new(json: bool) -> Made {
        Made {
            json,
            doc: serde_json::json!({ "slots": [] }),
        }
    }

    /// Create the root's shared directories, saying whether it existed.
    fn root(&mut self, client: &Client) -> anyhow::Result<()> {
        let existed = client.root().workers_dir().is_dir();
        client.init_queue()?;
        self.doc["root"] = serde_json::json!(client.root().path());
        self.doc["rootCreated"] = serde_json::json!(!existed);
        if !self.json {
            println!(
                "{} root {}",
                if existed { "using existing" } else { "created" },
                client.root().path().display()
            );
        }
        Ok(())
    }

    fn slot(&mut self, client: &Client, slot: Slot) -> anyhow::Result<()> {
        let existed = client.worker(slot).dir.is_dir();
        let w = client.create_worker(slot)?;
        if let Some(slots) = self.doc["slots"].as_array_mut() {
            slots.push(serde_json::json!({"slot": slot.0, "dir": w.dir, "created": !existed}));
        }
        if !self.json {
            println!(
                "{} worker slot {slot}: {}",
                if existed { "kept existing" } else { "created" },
                w.dir.display()
            );
        }
        Ok(())
    }

    /// With --json, the document (else everything was said already).
    fn finish(self) -> anyhow::Result<()> {
        if self.json {
            super::output::emit_json(&self.doc)?;
        }
        Ok(())
    }
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
    let mut made = Made::new(args.json);
    made.root(&client)?;
    for n in 0..args.count {
        made.slot(&client, Slot(n))?;
    }
    made.finish()?;
    if args.count > 0 && !args.json {
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
    let mut made = Made::new(args.json);
    made.root(&client)?;
    made.slot(&client, args.slot)?;
    made.finish()?;
    Ok(exit::OK)
}
