//! Clock skew across hosts (issue 27 item 5): leases are judged by what a host sees
//! change by its own clock, so a host whose clock is behind keeps its live leases.

use std::time::{Duration, SystemTime};

use crate::harness::{agent, bin, wait_until};
use crate::multihost::{assert_all_running, json, status, BOUND};
use crate::multihost_env::{self, Cache, Cluster};
use crate::prereq::require;

/// Host B's clock is this far behind host A's (0.8 × the lease).
const SKEW_SECS: u64 = 12;

#[test]
fn a_live_gate_lease_is_not_taken_at_twelve_seconds_of_skew_with_a_fifteen_second_lease() {
    require!(multihost_env::available());
    let c = Cluster::start(&["hostA", "hostB"], Cache::Off, "{\"leaseSecs\": 15}\n");
    let (a, b) = (&c.hosts[0], &c.hosts[1]);
    let runs_on_b = b.mount.join("runs");
    std::fs::create_dir(c.backing.join("runs")).expect("runs dir");
    let log = c.scratch.join("worker-hostB-1.log");
    let behind = format!("-{SKEW_SECS}");
    let mut b1 = b.worker(
        1,
        &agent("multihost.sh"),
        &log,
        &[
            ("AGENT_LOG_DIR", runs_on_b.to_str().unwrap()),
            (conductor::dirlock::ENV_DEBUG_CLOCK_OFFSET, &behind),
        ],
    );
    wait_until(BOUND, "worker 1 on hostB to serve", || {
        status(&c, 1).is_some_and(|s| s["host"] == "hostB")
    });
    // B's gate lease is dated by B's clock, 12 s behind: at its renewals (every quarter
    // lease, 3.75 s) it is 12 s old by A's clock, and past the lease in between.
    let lease = c.root.join("workers/1/.worker.lock.lease/owner.json");
    let dated = |v: &serde_json::Value| {
        v["heartbeatAt"]
            .as_str()
            .or(v["acquiredAt"].as_str())
            .and_then(conductor::protocol::parse_rfc3339)
    };
    let age = dated(&json(&lease).expect("B's gate lease"))
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    assert!(
        age >= Duration::from_secs(SKEW_SECS - 1),
        "hostB's lease is not dated behind: {age:?} old"
    );
    // Host A tries to start a worker on B's slot again and again, each time just past
    // B's lease by A's clock (the lease record 15-15.4 s old: B renews every 3.75 s, so
    // such a window opens after each renewal). Judged by its date the lease would be
    // expired then; judged by what A has seen change, it is B's.
    let lease_age = || {
        json(&lease)
            .as_ref()
            .and_then(dated)
            .and_then(|t| SystemTime::now().duration_since(t).ok())
    };
    let (mut attempts, mut past_lease) = (0, 0);
    wait_until(
        3 * BOUND,
        "three attempts past B's lease by A's clock",
        || {
            let Some(age) = lease_age() else {
                return false;
            };
            if age < Duration::from_millis(15_050) || age > Duration::from_millis(15_400) {
                return false;
            }
            attempts += 1;
            let mut cmd = a.command(&bin("conductor-worker"));
            cmd.arg("1")
                .arg(&c.scratch)
                .arg("--agent")
                .arg(agent("multihost.sh"));
            let out = assert_cmd::Command::from_std(cmd)
                .timeout(Duration::from_secs(30))
                .output()
                .expect("run conductor-worker 1 on hostA");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(3),
                "attempt {attempts}: hostA took live slot 1 of hostB ({age:?} by A's clock): {err}"
            );
            if err.contains("clocks may differ") {
                past_lease += 1;
            }
            past_lease >= 3
        },
    );
    assert!(
        !b1.stderr().contains("was taken while we were away"),
        "hostB's gate lease was taken:\n{}",
        b1.stderr()
    );
    assert_all_running(&mut [("B1", &mut b1)]);
    eprintln!("skew: {attempts} attempts, {past_lease} judged past the lease by date");
}
