//! `conductor submit …` parsed by a parser of that one subcommand: a script that submits task after task starts a process each time, and building every other subcommand's arguments was most of what a start did before its first system call on the root.

use std::ffi::OsString;

use clap::{Parser, Subcommand};

use super::{common, submit};

/// The top-level parser with `submit` as its only subcommand: the same definitions as
/// [`super::Cli`]'s, so what it accepts it reads alike.
#[derive(Debug, Parser)]
#[command(name = "conductor")]
struct SubmitOnly {
    #[command(subcommand)]
    command: Only,
    #[command(flatten)]
    verbosity: common::Verbosity,
}

#[derive(Debug, Subcommand)]
enum Only {
    Submit(submit::Args),
}

/// `args` (the program's, `--root` already after the subcommand) read as a `submit`,
/// when the subcommand is `submit` and they parse; `None` otherwise — help, a mistake
/// or another subcommand — for the whole parser to read, so every message and every
/// help text stays the whole command's.
pub(super) fn submit_args(args: &[OsString]) -> Option<(submit::Args, common::Verbosity)> {
    let subcommand = args.iter().skip(1).find(|a| {
        let a = a.as_encoded_bytes();
        !a.starts_with(b"-")
    })?;
    if subcommand != "submit" {
        return None;
    }
    let parsed = SubmitOnly::try_parse_from(args).ok()?;
    let Only::Submit(submit) = parsed.command;
    Some((submit, parsed.verbosity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        std::iter::once("conductor")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn a_submit_is_read_as_the_whole_parser_reads_it() {
        use clap::FromArgMatches;
        let words = [
            "-v",
            "submit",
            "fix it",
            "--key",
            "k",
            "--priority",
            "2",
            "--json",
            "--root",
            "/r",
        ];
        let (light, verbosity) = submit_args(&args(&words)).expect("a submit");
        let matches = <super::super::Cli as clap::CommandFactory>::command()
            .try_get_matches_from(args(&words))
            .unwrap();
        let whole = super::super::Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(
            format!("{whole:?}"),
            format!("Cli {{ command: Submit({light:?}), verbosity: {verbosity:?} }}")
        );
    }

    #[test]
    fn help_mistakes_and_other_commands_go_to_the_whole_parser() {
        for words in [
            &["submit", "--help"][..],
            &["submit", "-h"],
            &["submit", "x", "--no-such-flag"],
            &["submit"],
            &["status"],
            &["--version"],
            &[],
        ] {
            assert!(submit_args(&args(words)).is_none(), "{words:?}");
        }
    }
}
