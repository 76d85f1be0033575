//! Who and where we are: host name, boot id, host id, and process liveness and start times.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::procfs;

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

/// This process's id, asked of the kernel once (`getpid` was ~9 calls a task on a
/// worker's path: temp names, records, status). A forked child asks again: the cache is
/// cleared in it by an `atfork` handler registered with the first ask.
pub fn pid() -> u32 {
    use std::sync::atomic::Ordering;
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    static AT_FORK: std::sync::Once = std::sync::Once::new();
    AT_FORK.call_once(|| {
        extern "C" fn forget() {
            PID.store(0, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { nix::libc::pthread_atfork(None, None, Some(forget)) };
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The calling thread's id, asked of the kernel once per thread.
pub fn tid() -> i32 {
    thread_local! {
        static TID: i32 = nix::unistd::gettid().as_raw();
    }
    TID.with(|t| *t)
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

/// The pid namespace this process sees pids in (`/proc/self/ns/pid`'s inode); empty
/// where there is no procfs.
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
        .unwrap_or_default()
}

/// Who we are on a shared root: 16 hex digits naming this host name, boot and pid
/// namespace together — exactly the things that must all match before a pid written by
/// another process means the same process here. Two containers (or UTS + PID
/// namespaces) on one machine get different ids, and so does a machine after a
/// reboot. Derived, not stored: every process of a host computes the same id, with no
/// file in the root to keep in sync (FNV-1a, stable across builds and versions).
pub fn host_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| derive_host_id(hostname(), boot_id(), &pid_namespace()))
}

/// The id of a host with these facts (see [`host_id`]).
pub fn derive_host_id(hostname: &str, boot_id: &str, pid_ns: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [hostname, boot_id, pid_ns].join("\0").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Whether a record written by a process of host `id` (and `hostname`, for records of
/// versions that wrote no id) names pids of this host — the only case in which
/// `kill(pid, 0)`, `/proc` or a signal may be applied to them. A record with neither
/// is not provably ours.
pub fn is_this_host(id: Option<&str>, hostname_written: Option<&str>) -> bool {
    match (id, hostname_written) {
        (Some(id), _) => id == host_id(),
        (None, Some(h)) => h == hostname(),
        (None, None) => false,
    }
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
    procfs::stat(pid).is_some_and(|s| s.is_zombie())
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
/// `None` when the process is gone or the platform has no procfs.
pub fn process_start_time(pid: u32) -> Option<u64> {
    procfs::stat(pid).map(|s| s.start_time)
}

/// When `pid` started, as wall-clock time. Accurate to a few clock ticks, and off by
/// however far the wall clock has been stepped since then: compare with a margin.
pub fn process_started_at(pid: u32) -> Option<SystemTime> {
    let ticks = process_start_time(pid)?;
    let hz = clock_ticks_per_second()?;
    let since_boot =
        Duration::from_secs(ticks / hz) + Duration::from_nanos(ticks % hz * 1_000_000_000 / hz);
    boot_time()?.checked_add(since_boot)
}

/// `USER_HZ`, the unit of `/proc/<pid>/stat` times.
fn clock_ticks_per_second() -> Option<u64> {
    static HZ: OnceLock<Option<u64>> = OnceLock::new();
    *HZ.get_or_init(|| {
        // SAFETY: sysconf only reads a constant; it has no memory effects.
        let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) };
        u64::try_from(hz).ok().filter(|hz| *hz > 0)
    })
}

/// Wall-clock time of the boot, from `/proc/uptime` (which, like process start
/// times, counts time spent suspended). Read afresh: the wall clock may be stepped.
fn boot_time() -> Option<SystemTime> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    SystemTime::now().checked_sub(Duration::try_from_secs_f64(secs).ok()?)
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

/// This machine's time since boot, counting time spent suspended (`CLOCK_BOOTTIME`;
/// `CLOCK_MONOTONIC` where that is refused): a clock no one can set, that a suspend
/// does not stop, so a deadline kept on it is never late after one. What a lock
/// holder fences itself by (`DirLock::renewed_at`).
pub fn boot_clock() -> Duration {
    let mut ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    for clock in [nix::libc::CLOCK_BOOTTIME, nix::libc::CLOCK_MONOTONIC] {
        // SAFETY: clock_gettime writes one timespec through a valid pointer to ours.
        if unsafe { nix::libc::clock_gettime(clock, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    Duration::ZERO
}

/// This process's effective uid, asked once: the trust checks compare ~25 directories'
/// owners with it a delivery and a claim, the agent's log and a task's `dir` too, and it
/// does not change.
pub fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| nix::unistd::geteuid().as_raw())
}

/// A descriptor that becomes readable when process `pid` (a child of ours, not yet
/// reaped) exits: its `pidfd` (Linux 5.3 on).
pub fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us and owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_process_started_between_two_clock_readings() {
        let before = SystemTime::now();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let after = SystemTime::now();
        let started = process_started_at(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        let started = started.expect("procfs");
        // Start times are in clock ticks (10ms) and boot time from /proc/uptime (10ms).
        let slack = Duration::from_millis(50);
        assert!(started + slack >= before, "{started:?} < {before:?}");
        assert!(started <= after + slack, "{started:?} > {after:?}");
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
    fn the_host_id_names_host_boot_and_pid_namespace_together() {
        let id = derive_host_id("a", "b", "pid:[1]");
        assert_eq!(id.len(), 16);
        assert_eq!(id, derive_host_id("a", "b", "pid:[1]"));
        assert_ne!(id, derive_host_id("a", "b", "pid:[2]"));
        assert_ne!(id, derive_host_id("a", "c", "pid:[1]"));
        assert_ne!(id, derive_host_id("ab", "", "pid:[1]"));
        assert!(is_this_host(Some(host_id()), Some("elsewhere")));
        assert!(!is_this_host(Some("0123456789abcdef"), Some(hostname())));
        assert!(is_this_host(None, Some(hostname())));
        assert!(!is_this_host(None, None));
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
