//! The arguments and parsers every subcommand shares: `--root`, slot, preset, duration and task-id parsing, the interrupt channel.

use std::path::PathBuf;

use crate::preset::Preset;
use crate::{Client, Slot};

use super::help;

/// `--root`, shared by every subcommand that reads or writes a root.
#[derive(Debug, Clone, clap::Args)]
pub struct RootArg {
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR", global = true, help_heading = help::GLOBAL,
          hide_short_help = true)]
    pub root: Option<PathBuf>,
}

impl RootArg {
    /// A client on the root, which must exist ([`crate::Error::NoRoot`] otherwise):
    /// only `init`, `create-worker` and the workers make a root.
    pub fn client(&self) -> anyhow::Result<Client> {
        let client = Client::from_env(self.root.as_deref())?;
        client.root().require_existing()?;
        Ok(client)
    }

    /// A client on the root whether it exists or not: for the commands that make it
    /// (`init`, `create-worker`) and `doctor`, which reports a missing root as a finding.
    pub fn unchecked_client(&self) -> anyhow::Result<Client> {
        Ok(Client::from_env(self.root.as_deref())?)
    }
}

/// Parse a slot number for clap, with the library's error text.
pub fn parse_slot(s: &str) -> Result<Slot, String> {
    s.parse::<Slot>().map_err(|e| e.to_string())
}

/// Parse `--preset` for clap, with the library's error text.
pub fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse::<Preset>().map_err(|e| e.to_string())
}

/// Install a Ctrl-C / SIGTERM / SIGHUP handler; the receiver gets `()` when one arrives.
pub fn interrupt_channel() -> anyhow::Result<crossbeam_channel::Receiver<()>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = tx.try_send(());
    })
    .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    Ok(rx)
}

/// Parse a duration given as seconds (`30`, `1.5`) or in words (`90s`, `5m`, `1h30m`).
pub use crate::text::parse_duration as parse_duration_arg;

/// A task id from the command line: digits become a number, as clients write them.
pub fn task_id_arg(s: &str) -> Result<crate::TaskId, crate::Error> {
    crate::TaskId::parse(s).map_err(|reason| crate::Error::InvalidTask { reason })
}
