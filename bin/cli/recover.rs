//! `conductor recover [N]`: finish what dead workers left behind.

use conductor::worker::recover_abandoned;
use conductor::{Error, Slot};

use super::{parse_slot, RootArg};
use crate::common::{self, exit};

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
    let slots = match args.slot {
        Some(s) => vec![s],
        None => client.list_workers()?,
    };
    let mut code = exit::OK;
    for s in slots {
        match recover_abandoned(client.root(), s) {
            Ok(r) if r.is_empty() => println!("worker {s}: nothing to recover"),
            Ok(r) => {
                let mut did = Vec::new();
                if let Some(h) = &r.stale_lock {
                    did.push(format!("removed stale lock ({h})"));
                }
                if let Some(pid) = r.killed_agent {
                    did.push(format!("killed leftover agent group {pid}"));
                }
                if let Some(id) = &r.interrupted {
                    did.push(format!("task {id} finished as interrupted"));
                }
                if let Some(id) = &r.redelivered {
                    did.push(format!("task {id} re-delivered for another attempt"));
                }
                if let Some(id) = &r.already_finished {
                    did.push(format!("task {id} already had its result; cleaned up"));
                }
                println!("worker {s}: {}", did.join("; "));
            }
            Err(Error::GateHeld { .. }) if args.slot.is_none() => {
                println!("worker {s}: served by a live worker, left alone")
            }
            Err(e) => code = common::report(&e.into()),
        }
    }
    Ok(code)
}
