//! Help that scans (`-h` fits one 80x24 screen) and a reference in docs/ that matches the code.

use std::path::Path;
use std::time::Duration;

use super::harness::*;

/// The commands whose `-h` a newcomer reads first: each must fit an 80x24 terminal.
const SHORT_HELPS: &[(&str, &[&str])] = &[
    ("conductor", &["-h"]),
    ("conductor", &["submit", "-h"]),
    ("conductor", &["send", "-h"]),
    ("conductor", &["run", "-h"]),
    ("conductor", &["worker", "-h"]),
    ("conductor-worker", &["-h"]),
];

fn help_at_80_columns(bin_name: &str, args: &[&str]) -> String {
    let t = TestRoot::new();
    let out = assert_cmd::Command::new(bin(bin_name))
        .args(args)
        .env("CONDUCTOR_HOME", t.path())
        .env("COLUMNS", "80")
        .env("LINES", "24")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(60))
        .output()
        .expect("run the binary");
    assert_eq!(out.status.code(), Some(0), "{bin_name} {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

#[test]
fn short_help_fits_one_80x24_screen() {
    for (bin_name, args) in SHORT_HELPS {
        let help = help_at_80_columns(bin_name, args);
        let lines: Vec<&str> = help.lines().collect();
        assert!(
            lines.len() <= 24,
            "`{bin_name} {}` is {} lines, over 24:\n{help}",
            args.join(" "),
            lines.len()
        );
        for line in &lines {
            assert!(
                line.chars().count() <= 80,
                "`{bin_name} {}` has a line over 80 columns:\n{line}",
                args.join(" ")
            );
        }
        // The everyday options come first, under no heading; the rest under headings,
        // all of them in --help.
        assert!(help.contains("\nOptions:\n"), "{help}");
        assert!(help.contains("see more with '--help'"), "{help}");
    }
    // What -h leaves out is in --help, grouped: the worker's process options, the
    // task's agent options.
    // The top level: the everyday commands first, every command in --help, grouped.
    let short = help_at_80_columns("conductor", &["-h"]);
    let everyday = short.find("Everyday commands:").expect("everyday first");
    assert!(everyday < short.find("More commands").unwrap(), "{short}");
    let long = help_at_80_columns("conductor", &["--help"]);
    for needle in [
        "Everyday commands:",
        "Worktrees:",
        "create-worker",
        "Exit codes:",
    ] {
        assert!(
            long.contains(needle),
            "{needle} missing from --help:\n{long}"
        );
    }
    let long = help_at_80_columns("conductor-worker", &["--help"]);
    for needle in [
        "Worker process:",
        "--kill-grace",
        "--poll",
        "Presets:",
        "Exit codes:",
    ] {
        assert!(
            long.contains(needle),
            "{needle} missing from --help:\n{long}"
        );
    }
    let long = help_at_80_columns("conductor", &["submit", "--help"]);
    for needle in [
        "Agent:",
        "Worktree:",
        "Queue:",
        "--max-budget-usd",
        "--batch",
    ] {
        assert!(
            long.contains(needle),
            "{needle} missing from --help:\n{long}"
        );
    }
    let short = help_at_80_columns("conductor", &["submit", "-h"]);
    assert!(!short.contains("--max-budget-usd"), "{short}");
}

/// No command's `-h` is wider than an 80-column terminal (the long prose is in --help):
/// every command docs/CLI.md lists, nested ones too.
#[test]
fn every_short_help_fits_80_columns() {
    let t = TestRoot::new();
    let reference = run_conductor(&t, &["help-reference"], 0).stdout;
    let commands: Vec<Vec<&str>> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("## `")?.strip_suffix('`'))
        .map(|path| path.split(' ').collect())
        .collect();
    assert!(commands.len() > 30, "{commands:?}");
    for words in commands {
        let (bin_name, rest) = words.split_first().unwrap();
        let args: Vec<&str> = rest.iter().copied().chain(["-h"]).collect();
        let help = help_at_80_columns(bin_name, &args);
        for line in help.lines() {
            assert!(
                line.chars().count() <= 80,
                "`{}` has a line over 80 columns:\n{line}",
                words.join(" ")
            );
        }
    }
}

/// docs/CLI.md is what `conductor help-reference` prints: every command and flag is
/// documented because the file is made from them. A flag added or changed without
/// regenerating it fails here, saying the one command to run.
#[test]
fn cli_reference_matches_the_code() {
    let t = TestRoot::new();
    let generated = run_conductor(&t, &["help-reference"], 0).stdout;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CLI.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if generated != on_disk {
        let first = generated
            .lines()
            .zip(on_disk.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| generated.lines().count().min(on_disk.lines().count()));
        panic!(
            "docs/CLI.md is out of date (first difference at line {}); regenerate it with\n  \
             {}\n",
            first + 1,
            conductor::cli::reference::REGENERATE
        );
    }
    // It is the reference for every flag: spot-check that it holds the hidden-from -h
    // ones and each binary.
    for needle in [
        "## `conductor submit`",
        "`--max-budget-usd <USD>`",
        "## `conductor-worker`",
        "## `conductor-launch`",
        "`--poll[=<INTERVAL>]`",
    ] {
        assert!(
            generated.contains(needle),
            "{needle} missing from docs/CLI.md"
        );
    }
}

/// Every key config.json takes is named in docs/CONFIG.md, read off the types that parse
/// config.json (a new key fails here until it is documented).
#[test]
fn every_config_key_is_documented() {
    let keys = conductor::cli::reference::config_keys();
    assert!(keys.iter().any(|k| k == "maxRunning"), "{keys:?}");
    assert!(
        keys.iter().any(|k| k == "worktreeSetup.command"),
        "{keys:?}"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CONFIG.md");
    let doc = std::fs::read_to_string(&path).expect("docs/CONFIG.md");
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "config.json keys not documented in docs/CONFIG.md (as `key`): {missing:?}"
    );
}

/// The commands without `--json`, and why it could mean nothing there (issue 36.4: "`--json`
/// on every command"; the shape convention is docs/CLI.md's preamble).
const NO_JSON: &[(&str, &str)] = &[
    (
        "conductor dashboard",
        "a full-screen view for a person, redrawn live; its data is `status --json`, \
         `tasks --json` and `queue --json`",
    ),
    (
        "conductor worker",
        "serves a slot until stopped and prints only its log; what it does is written as \
         JSON files (status.json, results), read with `status --json` and `result --json`",
    ),
    ("conductor-worker", "the same as `conductor worker`"),
    (
        "conductor completions",
        "prints a shell's completion script, which is its whole point",
    ),
    (
        "conductor mcp",
        "speaks JSON-RPC (the Model Context Protocol) on stdio already",
    ),
];

/// Every visible command of the three binaries, nested ones too, takes `--json`, but for
/// the few in [`NO_JSON`], each with the reason it could mean nothing there. Read off the
/// clap definitions, so a new command without it fails here.
#[test]
fn every_command_takes_json() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: String, out: &mut Vec<(String, bool)>) {
        let json = cmd.get_arguments().any(|a| a.get_long() == Some("json"));
        out.push((path.clone(), json));
        // clap's own `help` subcommand is help, not a command.
        let shown = |s: &&clap::Command| !s.is_hide_set() && s.get_name() != "help";
        for sub in cmd.get_subcommands().filter(shown) {
            walk(sub, format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut all = Vec::new();
    let mut top = conductor::cli::Cli::command();
    top.build();
    for sub in top
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        walk(sub, format!("conductor {}", sub.get_name()), &mut all);
    }
    walk(
        &conductor::cli::common::WorkerCli::command(),
        "conductor-worker".into(),
        &mut all,
    );
    walk(
        &conductor::cli::launch::LaunchCli::command(),
        "conductor-launch".into(),
        &mut all,
    );
    assert!(all.len() > 40, "{all:?}");
    let missing: Vec<&str> = all
        .iter()
        .filter(|(path, json)| !json && !NO_JSON.iter().any(|(p, _)| p == path))
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(missing.is_empty(), "commands without --json: {missing:?}");
    // The exceptions are still commands, and still without it (else off the list).
    for (path, why) in NO_JSON {
        assert!(!why.is_empty());
        let found = all.iter().find(|(p, _)| p == path);
        assert_eq!(found.map(|(_, j)| *j), Some(false), "{path}: {found:?}");
    }
}
