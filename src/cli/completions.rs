//! `conductor completions SHELL`: shell completion scripts.

use clap_complete::aot::{generate, Shell};

use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples: `conductor completions bash > ~/.local/share/bash-completion/completions/conductor`, \
`conductor completions zsh > \"${fpath[1]}/_conductor\"`, \
`conductor completions fish > ~/.config/fish/completions/conductor.fish`.")]
pub struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print `args.shell`'s completions for `cmd`, the `conductor` command line (handed
/// down by `cli/mod.rs`, which defines it: this module does not reach back up).
pub fn run(args: Args, mut cmd: clap::Command) -> anyhow::Result<i32> {
    let mut buf = Vec::new();
    generate(args.shell, &mut cmd, "conductor", &mut buf);
    super::output::emit(&String::from_utf8_lossy(&buf))?;
    Ok(exit::OK)
}
