//! `conductor -h` on one 80x24 screen: the everyday commands first with what they do, the others by name under their group; `--help` lists every command, grouped, with its description.

use clap::Command;

/// The everyday commands, in the order a newcomer meets them, each with a line short
/// enough for 80 columns (`--help` has the whole description).
const EVERYDAY: &[(&str, &str)] = &[
    ("run", "Run prompts on fresh workers and print the results"),
    (
        "submit",
        "Put a task into the shared queue (--wait: print its output)",
    ),
    ("wait", "Wait until tasks finish and print their output"),
    (
        "tasks",
        "List tasks, newest first: state, age, prompt, id, cost",
    ),
    ("status", "Show every worker slot: state, task, ages, agent"),
    ("logs", "Print a task's output; -f follows it"),
    (
        "dashboard",
        "Full-screen live view of workers, output and queue (top)",
    ),
];

/// Every other command, by group.
const GROUPS: &[(&str, &[&str])] = &[
    (
        "Tasks",
        &[
            "send", "result", "cancel", "retry", "edit", "approve", "deny",
        ],
    ),
    ("Queue", &["queue", "pause", "resume", "group", "parallel"]),
    ("Worktrees", &["diff", "merge", "discard"]),
    (
        "Workers",
        &["worker", "launch", "init", "create-worker", "recover"],
    ),
    ("Upkeep", &["doctor", "locks", "gc", "completions", "mcp"]),
];

const TEMPLATE: &str =
    "{about-with-newline}\n{usage-heading} {usage}\n\n{before-help}Options:\n{options}{after-help}";

/// The width `--help`'s list is wrapped to (clap wraps only what is wider).
const WIDTH: usize = 80;

/// `cmd` (the top-level `conductor`) with its commands grouped in `-h` and `--help`.
pub fn grouped(cmd: Command) -> Command {
    let long = long_list(&cmd);
    cmd.help_template(TEMPLATE)
        .before_help(short_list())
        .before_long_help(long)
        .after_help("")
}

/// The screenful `-h` prints.
fn short_list() -> String {
    let mut out = String::from("Everyday commands:\n");
    for (name, what) in EVERYDAY {
        out.push_str(&format!("  {name:<10} {what}\n"));
    }
    out.push_str("\nMore commands (`conductor COMMAND -h` tells of one):\n");
    for (group, names) in GROUPS {
        out.push_str(&format!("  {group:<10} {}\n", names.join("  ")));
    }
    out.push('\n');
    out
}

/// Every command under its group with its whole description, for `--help`.
fn long_list(cmd: &Command) -> String {
    let everyday: Vec<&str> = EVERYDAY.iter().map(|(n, _)| *n).collect();
    let groups = std::iter::once(("Everyday commands", everyday.as_slice()))
        .chain(GROUPS.iter().map(|(g, n)| (*g, *n)));
    let mut out = String::new();
    for (group, names) in groups {
        out.push_str(&format!("{group}:\n"));
        for name in names {
            let about = cmd
                .find_subcommand(name)
                .and_then(|c| c.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default();
            out.push_str(&hanging(&format!("  {name:<14}"), &about));
        }
        out.push('\n');
    }
    out
}

/// `prefix` then `text` wrapped at [`WIDTH`] on spaces, its continuation lines indented
/// as far as `prefix` reaches.
fn hanging(prefix: &str, text: &str) -> String {
    let indent = " ".repeat(prefix.chars().count());
    let mut out = String::new();
    let mut current = prefix.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && current.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&current);
            out.push('\n');
            current = indent.clone();
        }
        current.push(' ');
        current.push_str(word);
        empty = false;
    }
    out.push_str(&current);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_visible_command_is_listed_once() {
        let cmd = crate::cli::Cli::command();
        let mut listed: Vec<&str> = EVERYDAY.iter().map(|(n, _)| *n).collect();
        for (_, names) in GROUPS {
            listed.extend(names.iter());
        }
        let mut visible: Vec<&str> = cmd
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name())
            .collect();
        visible.sort();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(
            sorted, visible,
            "the groups of `conductor -h` and the commands"
        );
    }

    #[test]
    fn the_short_list_fits_80_columns() {
        for line in short_list().lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
    }
}
