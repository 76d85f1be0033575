//! Issue 38 item 9, the freed-lock leg: a key lock freed through host A's GlusterFS
//! mount is free to host B as soon as B sees `keys/` change, though B's kernel still
//! has the lock's name cached (its entry timeout, 1 s from B's last lookup). B's worker
//! is woken by that change (its poller stats `keys/`), looks once, and otherwise waits
//! for its next rescan, 2 s later: a look answered from the cache cost the freed-lock
//! leg ~2.1 s p50 (BENCHMARKS.md). No timing is asserted: the order of events is.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use conductor::dirlock::{self, Acquire, DirLock, LockOptions};

use crate::harness::wait_until;
use crate::multihost::BOUND;
use crate::multihost_env::{self, Cluster, Fs};

/// `keys/`'s change time as B's poller reads it: `statx(AT_STATX_FORCE_SYNC)`, which
/// GlusterFS's md-cache still answers until the next whole second.
fn changed_at(dir: &Path) -> Option<(i64, u32)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("path");
    let mut st = std::mem::MaybeUninit::<nix::libc::statx>::zeroed();
    // SAFETY: a valid C string and a zeroed buffer the size of `statx`.
    let rc = unsafe {
        nix::libc::statx(
            nix::libc::AT_FDCWD,
            c.as_ptr(),
            nix::libc::AT_SYMLINK_NOFOLLOW | nix::libc::AT_STATX_FORCE_SYNC,
            nix::libc::STATX_BASIC_STATS,
            st.as_mut_ptr(),
        )
    };
    // SAFETY: zeroed, and filled by the kernel when rc == 0.
    let st = unsafe { st.assume_init() };
    (rc == 0).then_some((st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec))
}

/// The fraction of the current wall-clock second.
fn into_second() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        .fract()
}

#[test]
fn a_lock_freed_on_another_host_is_free_here_once_its_directory_shows_the_change_on_glusterfs() {
    multihost_env::require_fs!(Fs::Gluster);
    let c = Cluster::start_on(Fs::Gluster, &["hostA", "hostB"], "{}\n");
    let (a, b) = (&c.hosts[0].root, &c.hosts[1].root);
    std::fs::create_dir_all(a.join("keys")).expect("keys/");
    let opts = LockOptions::default();
    for round in 0..3 {
        let name = format!("keys/k{round}.lock");
        let (on_a, on_b) = (a.join(&name), b.join(&name));
        let held = match DirLock::try_acquire(&on_a, &opts).expect("take on A") {
            Acquire::Acquired(l) => l,
            Acquire::Held(h) => panic!("a fresh lock is held: {h}"),
        };
        // B looks the lock up early in a second (pacing, so that A frees it within the
        // same second and B's cached name outlives the next second's turn by ~0.5 s).
        wait_until(BOUND, "an early moment in a second", || {
            (0.2..0.5).contains(&into_second())
        });
        let seen = dirlock::inspect(&on_b, &opts).expect("inspect on B");
        assert!(seen.is_some(), "B sees the lock A holds");
        let before = changed_at(&b.join("keys"));
        held.release().expect("release on A");
        // What wakes B's worker: its forced stat of keys/ shows the change.
        wait_until(BOUND, "B to see keys/ change", || {
            changed_at(&b.join("keys")) != before
        });
        let now = dirlock::inspect(&on_b, &opts).expect("inspect on B");
        assert!(
            now.is_none(),
            "round {round}: B still finds the lock freed on A held once keys/ changed \
             (its cached name answered): {now:?}"
        );
        match DirLock::try_acquire(&on_b, &opts).expect("take on B") {
            Acquire::Acquired(l) => l.release().expect("release on B"),
            Acquire::Held(h) => panic!("round {round}: B cannot take the freed lock: {h}"),
        }
    }
}
