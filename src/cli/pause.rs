//! `conductor pause` / `conductor resume`: stop and restart new pickups of a slot, a
//! key, a group or everything.

use crate::queue::pause::Target;
use crate::verbs::pause::{self as verb, Resumed};
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
    /// The verb's selector: exactly one of the four (clap sees to it).
    fn what(&self) -> anyhow::Result<verb::Selector> {
        Ok(if let Some(s) = self.slot {
            verb::Selector::Slot(s)
        } else if let Some(k) = &self.key {
            verb::Selector::Key(k.clone())
        } else if let Some(g) = &self.group {
            verb::Selector::Group(g.clone())
        } else if self.all {
            verb::Selector::All
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

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let request = verb::PauseRequest {
        what: args.what.what()?,
        now: args.now,
    };
    let answer = verb::pause(&client, &request)?;
    if args.json {
        emit_json(&serde_json::to_value(&answer)?)?;
        return Ok(exit::OK);
    }
    let target = &answer.paused;
    let mut out = format!(
        "paused {target}{}: no new task of it starts until `conductor resume {}`\n",
        if answer.already {
            " (it was paused already)"
        } else {
            ""
        },
        selector_text(target)
    );
    if answer.now {
        for id in &answer.stopping {
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
    let request = verb::ResumeRequest {
        what: args.what.what()?,
    };
    let answer = verb::resume(&client, &request)?;
    if args.json {
        emit_json(&serde_json::to_value(&answer)?)?;
        return Ok(exit::OK);
    }
    let out = match &answer.resumed {
        Resumed::All(lifted) if lifted.is_empty() => {
            "nothing was paused; nothing to resume\n".to_string()
        }
        Resumed::All(lifted) => {
            let names: Vec<String> = lifted.iter().map(Target::to_string).collect();
            format!("resumed {}: their tasks start again\n", names.join(", "))
        }
        Resumed::One(target) => {
            let mut out = if answer.was_paused {
                format!("resumed {target}: its tasks start again\n")
            } else {
                format!("{target} was not paused; nothing to resume\n")
            };
            // Another pause may still hold what was named.
            if answer.all_still_paused {
                out.push_str("everything is still paused (`conductor resume --all`)\n");
            }
            out
        }
    };
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
