//! Who and where we are: host name, boot id, and process liveness and start times.

use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// This machine's host name (cached; empty if it cannot be read).
pub fn hostname() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default()
    })
}

/// The kernel's boot id (Linux); empty where the platform has none.
pub fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// Whether a process exists. EPERM means it exists but is not ours: alive.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match kill(Pid::from_raw(raw), None) {
        // A zombie has exited; only its parent has yet to reap it.
        Ok(()) => !is_zombie(pid),
        Err(Errno::ESRCH) => false,
        Err(_) => !is_zombie(pid),
    }
}

/// Whether `/proc/<pid>/stat` shows state `Z` (false where there is no procfs).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(false)
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
/// `None` when the process is gone or the platform has no procfs.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_start_time(&stat)
}

/// Field 22 counted after the command name, which may itself hold spaces and ')'.
fn parse_stat_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After ")" come field 3 (state) onwards; starttime is field 22.
    after_comm.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// This process's start time, read once.
pub fn own_start_time() -> Option<u64> {
    static START: OnceLock<Option<u64>> = OnceLock::new();
    *START.get_or_init(|| process_start_time(std::process::id()))
}

/// Whether `pid` is alive and, when `start_time` is known, still the same process.
pub fn same_process_alive(pid: u32, start_time: Option<u64>) -> bool {
    if !pid_alive(pid) {
        return false;
    }
    match (start_time, process_start_time(pid)) {
        (Some(expected), Some(actual)) => expected == actual,
        // Cannot tell (no procfs or the process vanished just now): trust kill().
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat =
            "4711 (a) b (c)) S 1 4711 4711 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(parse_stat_start_time(stat), Some(123456));
    }

    #[test]
    fn an_unreaped_child_counts_as_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !is_zombie(pid) {
            assert!(std::time::Instant::now() < deadline, "child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_alive(pid));
        child.wait().unwrap();
    }

    #[test]
    fn own_process_is_alive_with_matching_start_time() {
        let me = std::process::id();
        let st = process_start_time(me);
        assert!(st.is_some());
        assert!(same_process_alive(me, st));
        assert!(!same_process_alive(me, st.map(|s| s + 1)));
    }
}
