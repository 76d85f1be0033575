//! A pid-only lock (no `owner.json`: an original conductor client's or an older
//! version's) whose pid is alive here and older than the lock: whether that process
//! can be its holder at all, by what it runs.
//!
//! A start time older than the lock does not alone prove the pid was reused: a worker
//! takes a task lock long after it started. But every client that writes such a lock
//! is a conductor program — `conductor`, `conductor-worker`, `conductor-launch`, or an
//! original Claude Conductor client (a Node or Python program of that name) — so a
//! process whose command line names no conductor (init, a shell's `sleep`, a kernel
//! thread, which has none) holds no lock of this protocol: the pid was reused.

use std::fs;

/// How much of a command line is kept to judge and to show.
const SHOWN: usize = 160;

/// The command line of `pid` as one line (arguments joined by spaces, cut to a
/// readable length); `Some("")` for a kernel thread, which has none; `None` when it
/// cannot be read (gone, no procfs).
pub(super) fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let line: String = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Some(line.chars().take(SHOWN).collect())
}

/// Why the process running `command` (as [`command_line`] read it) cannot hold a lock
/// of this protocol, or `None` when it may (it names a conductor program).
pub(super) fn not_a_holder(command: &str) -> Option<String> {
    if command.is_empty() {
        return Some("a kernel thread".to_string());
    }
    if command.to_ascii_lowercase().contains("conductor") {
        return None;
    }
    Some(format!("`{command}`, not a conductor program"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_command_naming_a_conductor_may_hold_a_pid_only_lock() {
        assert_eq!(not_a_holder("").as_deref(), Some("a kernel thread"));
        assert!(not_a_holder("/sbin/init splash").is_some());
        assert!(not_a_holder("sleep 60").is_some_and(|w| w.contains("`sleep 60`")));
        for holder in [
            "/usr/local/bin/conductor-worker 0",
            "conductor-launch --session x",
            "node /opt/claude-conductor/worker.js",
            "python3 Conductor.py",
        ] {
            assert_eq!(not_a_holder(holder), None, "{holder}");
        }
    }

    #[test]
    fn this_process_has_a_command_line() {
        let me = command_line(std::process::id()).expect("readable");
        assert!(!me.is_empty());
        assert!(me.chars().count() <= SHOWN);
        assert_eq!(command_line(u32::MAX), None);
    }
}
