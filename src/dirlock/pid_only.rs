//! A pid-only lock (no `owner.json`: an original conductor client's or an older
//! version's) whose pid is alive here and older than the lock: whether that process
//! can be its holder at all, by what it runs.
//!
//! A start time older than the lock does not alone prove the pid was reused: a worker
//! takes a task lock long after it started. But every client that writes such a lock
//! is a conductor program — `conductor`, `conductor-worker`, `conductor-launch` — or an
//! original Claude Conductor client, a Node or Python program that need not say
//! "conductor" anywhere (`node index.js`). So a process may hold the lock when its
//! whole command line names a conductor or it runs under an interpreter such a client
//! runs under; any other (init, a shell's `sleep`, a kernel thread, which has none)
//! holds no lock of this protocol: the pid was reused.

use std::fs;

/// How much of a command line is kept to judge and to show.
const SHOWN: usize = 160;

/// Interpreters an original client's worker may run under (the program's first word,
/// without its directory and version: `python3.12` is `python`).
const CLIENT_RUNTIMES: &[&str] = &[
    "node", "nodejs", "bun", "deno", "npx", "npm", "python", "pypy", "uv", "uvx", "pipx",
];

/// The whole command line of `pid` as one line (arguments joined by spaces);
/// `Some("")` for a kernel thread, which has none; `None` when it cannot be read (gone,
/// no procfs).
pub(super) fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        String::from_utf8_lossy(&raw)
            .split('\0')
            .filter(|a| !a.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// `command` cut to a readable length for a message.
pub(super) fn shown(command: &str) -> String {
    let mut s: String = command.chars().take(SHOWN).collect();
    if s.len() < command.len() {
        s.push('…');
    }
    s
}

/// Why the process running `command` (as [`command_line`] read it, whole) cannot hold
/// a lock of this protocol, or `None` when it may: it names a conductor program, or
/// runs under an interpreter an original client runs under.
pub(super) fn not_a_holder(command: &str) -> Option<String> {
    if command.is_empty() {
        return Some("a kernel thread".to_string());
    }
    if command.to_ascii_lowercase().contains("conductor") {
        return None;
    }
    let program = command.split(' ').next().unwrap_or_default();
    let name = program.rsplit('/').next().unwrap_or(program);
    let name = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if CLIENT_RUNTIMES.contains(&name) {
        return None;
    }
    Some(format!(
        "`{}`, neither a conductor program nor a client's runtime",
        shown(command)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_command_naming_a_conductor_may_hold_a_pid_only_lock() {
        assert_eq!(not_a_holder("").as_deref(), Some("a kernel thread"));
        assert!(not_a_holder("/sbin/init splash").is_some());
        assert!(not_a_holder("sleep 60").is_some_and(|w| w.contains("`sleep 60`")));
        assert!(not_a_holder("/bin/bash -l").is_some());
        for holder in [
            "/usr/local/bin/conductor-worker 0",
            "conductor-launch --session x",
            "node /opt/claude-conductor/worker.js",
            "python3 Conductor.py",
            // An original client need not say "conductor": its runtime may hold it.
            "node index.js",
            "/usr/bin/python3.12 worker.py",
            "uv run worker",
        ] {
            assert_eq!(not_a_holder(holder), None, "{holder}");
        }
    }

    #[test]
    fn this_process_has_a_command_line() {
        let me = command_line(std::process::id()).expect("readable");
        assert!(!me.is_empty());
        // Judged whole (a conductor named past the shown length still counts), cut
        // only to show.
        let long = format!("{} /opt/conductor/worker.js", "x".repeat(300));
        assert_eq!(not_a_holder(&format!("sleep {long}")), None);
        assert!(shown(&long).chars().count() <= SHOWN + 1);
        assert_eq!(command_line(u32::MAX), None);
    }
}
