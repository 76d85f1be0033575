//! Issue 38.3: a dead host's slot comes back within one lease (plus the poll interval)
//! of the host's death — taken by a neighbour worker on the surviving host, or by a
//! worker for the slot that a supervisor restarts each time it is refused.

use std::time::{Duration, Instant};

use crate::harness::{agent, wait_until};
use crate::multihost::{outcome, queue_result, status, submit_all, worker, BOUND};
use crate::multihost_env::{self, Cache, Cluster, Fs, HostProc};
use crate::prereq::require;

/// The lease of these scenarios.
const LEASE: Duration = Duration::from_secs(12);

/// Past the lease, what the slot's return may take: sweeps and looks (a few seconds
/// apart), the status's silence, a slow loaded machine. One lease more — each lock of
/// the slot watched only once the one before it was taken — is more than this.
const SLACK: Duration = Duration::from_secs(8);

/// Host B's worker 1 with task t1 (key k) running, held until the host dies.
fn running_on_b(c: &Cluster) -> HostProc {
    let b = &c.hosts[1];
    let w = worker(c, b, 1);
    let hold = b.mount.join("never");
    submit_all(
        b,
        &[("t1".into(), "k".into(), format!("k 0 {}", hold.display()))],
    );
    wait_until(BOUND, "t1 to run on hostB", || {
        status(c, 1).is_some_and(|s| s["status"] == "working" && s["taskId"] == "t1")
    });
    w
}

fn cluster() -> Cluster {
    let c = Cluster::start(
        &["hostA", "hostB"],
        Cache::Off,
        &format!("{{\"leaseSecs\": {}}}\n", LEASE.as_secs()),
    );
    std::fs::create_dir(c.backing.join("runs")).expect("runs dir");
    c
}

#[test]
fn a_dead_hosts_slot_is_recovered_by_a_neighbour_within_one_lease() {
    require!(multihost_env::available_on(Fs::Sshfs(Cache::Off)));
    let mut c = cluster();
    let b1 = running_on_b(&c);
    let a0 = worker(&c, &c.hosts[0], 0);
    c.hosts[1].kill();
    let died = Instant::now();
    drop(b1);
    wait_until(LEASE + SLACK, "hostA's worker 0 to end t1", || {
        queue_result(&c, "t1").is_some()
    });
    let took = died.elapsed();
    let r = queue_result(&c, "t1").unwrap();
    assert_eq!(outcome(&r), "interrupted", "{r}");
    eprintln!("t1 ended {took:?} after hostB died (lease {LEASE:?})");
    // Its key came free with it: a task on it runs at once.
    submit_all(&c.hosts[0], &[("t2".into(), "k".into(), "k 0".into())]);
    wait_until(SLACK, "t2 on the freed key", || {
        queue_result(&c, "t2").is_some()
    });
    assert_eq!(outcome(&queue_result(&c, "t2").unwrap()), "success");
    drop(a0);
}

#[test]
fn a_supervisor_restarting_a_refused_worker_takes_the_dead_hosts_slot_within_one_lease() {
    require!(multihost_env::available_on(Fs::Sshfs(Cache::Off)));
    let mut c = cluster();
    let b1 = running_on_b(&c);
    c.hosts[1].kill();
    let died = Instant::now();
    drop(b1);
    let a = &c.hosts[0];
    let log = c.scratch.join("worker-hostA-1.log");
    let runs = a.mount.join("runs");
    let start = || {
        a.worker(
            1,
            &agent("multihost.sh"),
            &log,
            &[("AGENT_LOG_DIR", runs.to_str().unwrap())],
        )
    };
    // What systemd's `Restart=always` does (RestartSec=100ms): start it again whenever
    // it exits, until the dead host's task has ended.
    let mut w = start();
    let mut starts = 1;
    let mut refusals = String::new();
    wait_until(LEASE + SLACK, "a restarted worker 1 to end t1", || {
        if queue_result(&c, "t1").is_some() {
            return true;
        }
        if w.exited().is_some() {
            refusals = w.stderr_tail(3);
            std::thread::sleep(Duration::from_millis(100));
            w = start();
            starts += 1;
        }
        false
    });
    let took = died.elapsed();
    let r = queue_result(&c, "t1").unwrap();
    assert_eq!(outcome(&r), "interrupted", "{r}");
    eprintln!(
        "t1 ended {took:?} after hostB died, after {starts} starts (lease {LEASE:?}); \
         the last refusal: {refusals}"
    );
    // The worker that took the slot serves it.
    submit_all(a, &[("t2".into(), "k".into(), "k 0".into())]);
    wait_until(SLACK, "t2 on the freed key", || {
        queue_result(&c, "t2").is_some()
    });
    assert_eq!(outcome(&queue_result(&c, "t2").unwrap()), "success");
    assert!(
        w.exited().is_none(),
        "worker 1 exited: {}",
        w.stderr_tail(20)
    );
}
