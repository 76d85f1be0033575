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
            Ok(r) => super::output::emit(&format!("worker {s}: {r}\n"))?,
            Err(Error::GateHeld { .. }) if args.slot.is_none() => super::output::emit(&format!(
                "worker {s}: served by a live worker, left alone\n"
            ))?,
            Err(e) => code = common::report(&e.into()),
        }
    }
    Ok(code)
}
