//! `conductor pause` / `conductor resume`: stop and restart new pickups of a slot, a
//! key, a group or everything.

use serde_json::json;

use crate::queue::pause::{self, Paused, Target};
use crate::tasks::{ListOptions, TaskState};
use crate::Slot;

use super::usage::CliError;
use super::{args::parse_slot, args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

const PAUSE_HELP: &str = "\
A pause is a file under paused/ (`all`, `slot-N`, `key-K`, `group-G`): while it is there no \
worker starts a task it names — a paused slot takes nothing from its inbox or the queue, a \
paused key's or group's tasks wait (`conductor queue` says `paused`). It survives restarts; \
`conductor resume` with the same selector removes it (`resume --all`: every pause). Running tasks go on, unless --now: \
then their workers stop them (interrupted) and put them back where they came from — the \
queue, or the slot's inbox — to run again, once, after the resume.";

/// What to pause or resume: exactly one.
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Selector {
    /// One worker slot: it takes no new task (a task sent to it waits in its inbox).
    #[arg(long, value_name = "N", value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// Every task with this key.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Every task of this group.
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Everything: no worker of the root starts a task (`resume --all` lifts every
    /// pause, whatever it names).
    #[arg(long)]
    pub all: bool,
}

impl Selector {
    fn target(&self, root: &crate::Root) -> anyhow::Result<Target> {
        Ok(if let Some(s) = self.slot {
            root.existing_slot(s)?;
            Target::Slot(s.0)
        } else if let Some(k) = &self.key {
            Target::Key(k.clone())
        } else if let Some(g) = &self.group {
            crate::queue::groups::require(root, g)?;
            Target::Group(g.clone())
        } else if self.all {
            Target::All
        } else {
            return Err(CliError::Usage(
                "say what to pause or resume: --slot N, --key K, --group NAME or --all".into(),
            )
            .into());
        })
    }
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = PAUSE_HELP)]
pub struct Args {
    #[command(flatten)]
    pub what: Selector,
    /// Also stop the running tasks it names (as `interrupted`) and put them back, to
    /// run again once resumed.
    #[arg(long)]
    pub now: bool,
    /// JSON: {"paused", "already", "now", "stopping": [ids]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = PAUSE_HELP)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub what: Selector,
    /// JSON: {"resumed", "wasPaused"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// The running tasks a pause of `target` made now stops.
fn stopping(client: &crate::Client, target: &Target) -> anyhow::Result<Vec<String>> {
    let running = client.list_tasks(&ListOptions {
        states: vec![TaskState::Running],
        limit: None,
        ..Default::default()
    })?;
    Ok(running
        .into_iter()
        .filter(|t| target.matches(t.slot, t.key.as_deref(), t.group.as_deref()))
        .map(|t| t.id.to_string())
        .collect())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    let target = args.what.target(client.root())?;
    let fresh = pause::pause(client.root(), &target, args.now)?;
    let stopped = if args.now {
        stopping(&client, &target)?
    } else {
        Vec::new()
    };
    if args.json {
        emit_json(&json!({
            "paused": target,
            "already": !fresh,
            "now": args.now,
            "stopping": stopped,
            "file": client.root().paused_dir().join(target.file_name()),
        }))?;
        return Ok(exit::OK);
    }
    let mut out = format!(
        "paused {target}{}: no new task of it starts until `conductor resume {}`\n",
        if fresh {
            ""
        } else {
            " (it was paused already)"
        },
        selector_text(&target)
    );
    if args.now {
        for id in &stopped {
            out.push_str(&format!(
                "task {id} is being stopped and put back; it runs again after the resume\n"
            ));
        }
    } else {
        out.push_str("running tasks go on (--now stops them and puts them back)\n");
    }
    emit(&out)?;
    Ok(exit::OK)
}

pub fn run_resume(args: ResumeArgs) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    let target = args.what.target(client.root())?;
    if target == Target::All {
        let lifted = pause::resume_all(client.root())?;
        if args.json {
            emit_json(&json!({ "resumed": lifted, "wasPaused": !lifted.is_empty() }))?;
        } else if lifted.is_empty() {
            emit("nothing was paused; nothing to resume\n")?;
        } else {
            let names: Vec<String> = lifted.iter().map(Target::to_string).collect();
            emit(&format!(
                "resumed {}: their tasks start again\n",
                names.join(", ")
            ))?;
        }
        return Ok(exit::OK);
    }
    let was = pause::resume(client.root(), &target)?;
    if args.json {
        emit_json(&json!({ "resumed": target, "wasPaused": was }))?;
        return Ok(exit::OK);
    }
    let mut out = if was {
        format!("resumed {target}: its tasks start again\n")
    } else {
        format!("{target} was not paused; nothing to resume\n")
    };
    // Another pause may still hold what was named.
    let left = Paused::load(client.root());
    if left.all() && target != Target::All {
        out.push_str("everything is still paused (`conductor resume --all`)\n");
    }
    emit(&out)?;
    Ok(exit::OK)
}

/// The command that lifts the pauses `shown` as [`Target`] displays them (`slot 2`,
/// `key K`, `everything`): `conductor resume --slot 2` for one, `--all` for several
/// (a bare `conductor resume` is a usage error).
pub fn resume_hint(shown: &[String]) -> String {
    let selector = match shown {
        [one] => match one.split_once(' ') {
            Some((kind @ ("slot" | "key" | "group"), what)) => format!("--{kind} {what}"),
            _ => "--all".to_string(),
        },
        _ => "--all".to_string(),
    };
    format!("conductor resume {selector}")
}

/// `--slot 2`, `--key K`, `--group G`, `--all`.
pub fn selector_text(t: &Target) -> String {
    match t {
        Target::All => "--all".to_string(),
        Target::Slot(n) => format!("--slot {n}"),
        Target::Key(k) => format!("--key {k}"),
        Target::Group(g) => format!("--group {g}"),
    }
}
