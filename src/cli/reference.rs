//! docs/CLI.md, generated from the clap definitions, and the config.json keys docs/ must name.
//!
//! `conductor help-reference > docs/CLI.md` writes the reference; a test fails when the
//! file differs from what the code says, so a flag cannot be added undocumented.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

/// The one command that regenerates docs/CLI.md (said by the test that finds it stale).
#[cfg(any(test, feature = "internals"))]
pub const REGENERATE: &str = "cargo run --locked --bin conductor -- help-reference > docs/CLI.md";

/// The whole of docs/CLI.md: every command of the three binaries, every visible option;
/// `conductor` is the `conductor` command line (handed down by `cli/mod.rs`).
pub fn markdown(mut conductor: clap::Command) -> String {
    conductor.build();
    let mut worker = super::common::WorkerCli::command();
    worker.build();
    let mut launch = super::launch::LaunchCli::command();
    launch.build();

    let mut out = String::new();
    out.push_str(HEADER);
    let commands = walk(&conductor);
    out.push_str("\n## Commands\n\n");
    for cmd in commands.iter().skip(1) {
        let path = path_of(cmd);
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        let _ = writeln!(out, "- [`{path}`](#{}): {}", anchor(&path), escape(&about));
    }
    // `conductor worker` took the anchor `conductor-worker` first.
    out.push_str("- [`conductor-worker`](#conductor-worker-1): the same as `conductor worker`\n");
    out.push_str("- [`conductor-launch`](#conductor-launch-1): the same as `conductor launch`\n");
    let globals: Vec<&Arg> = conductor.get_arguments().filter(|a| shown(a)).collect();
    out.push_str("\n## Options of every command\n\n");
    for arg in &globals {
        out.push_str(&item(arg));
    }
    out.push_str("- `-h, --help`: help; `-h` a summary, `--help` every option in detail\n");
    let _ = writeln!(
        out,
        "\n## Exit codes\n\n{}.",
        escape(super::common::EXIT_CODES_HELP.trim_start_matches("Exit codes: "))
    );
    let global_ids: Vec<&str> = globals.iter().map(|a| a.get_id().as_str()).collect();
    for cmd in commands.iter().skip(1).copied().chain([&worker, &launch]) {
        section(&mut out, cmd, &global_ids);
    }
    out
}

const HEADER: &str = "\
# Command-line reference

<!-- Generated from the code by `conductor help-reference > docs/CLI.md`; do not edit by
     hand: change the clap definitions in src/cli/ and regenerate. -->

Every command and option of `conductor`, `conductor-worker` and `conductor-launch`, as
their `--help` gives them (`-h` gives the everyday ones). Durations read `30` (seconds),
`1.5`, `90s`, `5m`, `1h30m`, `7d`. The guide is the [README](../README.md); config.json is
[CONFIG.md](CONFIG.md), the files of a root [FILES.md](FILES.md).

`--json`, one shape convention: a command that shows one thing or one listing (`tasks`,
`queue`, `status`, `result`, `logs`, `diff`, `merge`, `discard`, `parallel`, `submit`,
`init`) prints one JSON document; a command that acts on or waits for tasks (or slots) one
by one (`wait`, `cancel`, `retry`, `recover`, `submit --batch`) prints one JSON object a
task, a line each (JSON Lines), as each is done; a stream (`logs --follow`) prints one JSON
object an event, a line each, as it happens. Field names are camelCase, as in the files on
disk. Every command takes `--json` but `dashboard` (a live view for a person), `worker`
(it serves a slot; its doings are JSON files), `completions` (a shell script) and `mcp`
(JSON-RPC already).
";

/// The command and all its visible subcommands, depth first.
fn walk(cmd: &Command) -> Vec<&Command> {
    let mut all = vec![cmd];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() != "help" {
            all.extend(walk(sub));
        }
    }
    all
}

/// `conductor queue cancel`: the name a reader types.
fn path_of(cmd: &Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()
}

/// GitHub's anchor for a heading of `path` in backticks.
fn anchor(path: &str) -> String {
    path.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// One command's section: what it does, its usage, its options by heading, its notes.
fn section(out: &mut String, cmd: &Command, global_ids: &[&str]) {
    let path = path_of(cmd);
    let _ = writeln!(out, "\n## `{path}`\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", escape(&about.to_string()));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage:").trim();
    let _ = writeln!(out, "```text\n{usage}\n```");
    let mut headings: Vec<String> = Vec::new();
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| shown(a) && !global_ids.contains(&a.get_id().as_str()))
        .collect();
    for arg in &args {
        let heading = heading_of(arg);
        if !headings.contains(&heading) {
            headings.push(heading);
        }
    }
    headings.sort_by_key(|h| match h.as_str() {
        "Arguments" => 0,
        "Options" => 1,
        super::help::GLOBAL => 3,
        _ => 2,
    });
    for heading in headings {
        let _ = writeln!(out, "\n**{heading}**\n");
        for arg in args.iter().filter(|a| heading_of(a) == heading) {
            out.push_str(&item(arg));
        }
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = writeln!(out, "\n{}", escape(&after.to_string()));
    }
}

/// Whether the reference lists the argument: not hidden, not clap's own help/version.
fn shown(arg: &Arg) -> bool {
    !arg.is_hide_set() && !matches!(arg.get_id().as_str(), "help" | "version")
}

fn heading_of(arg: &Arg) -> String {
    match arg.get_help_heading() {
        Some(h) => h.to_string(),
        None if arg.is_positional() => "Arguments".to_string(),
        None => "Options".to_string(),
    }
}

/// `- `-n, --workers <N>`: help [default: 3]` with later paragraphs indented under it.
fn item(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut text = help.trim().to_string();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && !arg.is_hide_default_value_set() && takes_value(arg) {
        let _ = write!(text, " [default: {}]", defaults.join(","));
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !possible.is_empty() && takes_value(arg) {
        let _ = write!(text, " [possible values: {}]", possible.join(", "));
    }
    let body = escape(&text)
        .replace('\n', "\n  ")
        .replace("\n  \n", "\n\n");
    format!("- `{}`: {}\n", signature(arg), body)
}

fn takes_value(arg: &Arg) -> bool {
    // A flag read into an `Option<bool>` (`--worktree`: absent, the root's default) takes
    // no value either.
    let no_values = arg.get_num_args().is_some_and(|n| n.max_values() == 0);
    !no_values
        && !matches!(
            arg.get_action(),
            ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
        )
}

/// How the argument is written: `<SLOT>`, `[PROMPT]...`, `-f, --file <FILE>`,
/// `--poll[=<INTERVAL>]`.
fn signature(arg: &Arg) -> String {
    let names: Vec<String> = arg
        .get_value_names()
        .map(|v| v.iter().map(|n| n.to_string()).collect())
        .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
    let many = matches!(arg.get_action(), ArgAction::Append)
        && arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    if arg.is_positional() {
        let name = names.join(" ");
        let name = if arg.is_required_set() {
            format!("<{name}>")
        } else {
            format!("[{name}]")
        };
        return if many { format!("{name}...") } else { name };
    }
    let mut sig = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, Some(l)) => format!("--{l}"),
        (None, None) => arg.get_id().to_string(),
    };
    if takes_value(arg) {
        let value = names
            .iter()
            .map(|n| format!("<{n}>"))
            .collect::<Vec<_>>()
            .join(" ");
        if arg.get_num_args().is_some_and(|n| n.min_values() == 0) {
            let _ = write!(sig, "[={value}]");
        } else {
            let _ = write!(sig, " {value}");
        }
    }
    sig
}

/// Markdown-safe text: `<`, `>` and `*` outside code spans would be read as HTML or
/// emphasis, and vanish.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            '*' if !in_code => out.push_str("\\*"),
            c => out.push(c),
        }
    }
    out
}

/// Every key config.json takes, as written there (`maxRunning`, `worktreeSetup.copy`),
/// read off the types that parse it, so a new key is seen without a list to keep.
#[cfg(any(test, feature = "internals"))]
pub fn config_keys() -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for top in field_names::<crate::Config>() {
        keys.push(top.to_string());
    }
    for nested in field_names::<crate::worktree::setup::WorktreeSetup>() {
        keys.push(format!("worktreeSetup.{nested}"));
    }
    keys
}

/// The field names serde's derive gives a struct's deserializer (after renaming).
#[cfg(any(test, feature = "internals"))]
fn field_names<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    let mut names = FieldNames(&[]);
    let _ = T::deserialize(&mut names);
    names.0
}

/// A deserializer that only records the fields a struct asks for, then stops.
#[cfg(any(test, feature = "internals"))]
struct FieldNames(&'static [&'static str]);

#[cfg(any(test, feature = "internals"))]
impl<'de> serde::Deserializer<'de> for &mut FieldNames {
    type Error = serde::de::value::Error;

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(serde::de::Error::custom(
            "only the field names were asked for",
        ))
    }

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
