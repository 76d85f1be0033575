//! `conductor recover [N]`: finish what dead workers left behind.

use crate::worker::recover_abandoned;
use crate::{Error, Slot};

use super::{args::parse_slot, args::RootArg};
use crate::cli::common::{self, exit};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this slot (default: every slot without a live worker).
    #[arg(value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// JSON Lines, one a slot: {"slot", "staleLock", "killedAgent", "interrupted",
    /// "redelivered", "alreadyFinished", "endedCallbacks"}, or {"slot", "leftAlone": true}
    /// for a slot a live worker serves.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    crate::trust::verify_root(client.root())?;
    let slots = match args.slot {
        Some(s) => vec![s],
        None => client.list_workers()?,
    };
    let mut code = exit::OK;
    for s in slots {
        match recover_abandoned(client.root(), s) {
            Ok(r) if args.json => super::output::emit(&format!("{}\n", report_json(s, &r)))?,
            Ok(r) => super::output::emit(&format!("worker {s}: {r}\n"))?,
            Err(Error::GateHeld { .. }) if args.slot.is_none() && args.json => {
                let v = serde_json::json!({"slot": s.0, "leftAlone": true});
                super::output::emit(&format!("{v}\n"))?
            }
            Err(Error::GateHeld { .. }) if args.slot.is_none() => super::output::emit(&format!(
                "worker {s}: served by a live worker, left alone\n"
            ))?,
            Err(e) => code = common::report(&e.into()),
        }
    }
    Ok(code)
}

/// One slot's recovery as a JSON line.
fn report_json(slot: Slot, r: &crate::recovery::RecoveryReport) -> serde_json::Value {
    serde_json::json!({
        "slot": slot.0,
        "staleLock": r.stale_lock,
        "killedAgent": r.killed_agent,
        "interrupted": r.interrupted,
        "redelivered": r.redelivered,
        "alreadyFinished": r.already_finished,
        "endedCallbacks": r.ended_callbacks,
    })
}
