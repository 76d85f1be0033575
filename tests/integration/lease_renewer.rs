//! Gate leases cost nothing per idle slot: one renewing thread per process, and a
//! renewal wakes no watcher.

use std::collections::HashSet;
use std::fs;
use std::time::Duration;

use conductor::Slot;

use crate::harness::{wait_until, TestRoot, WorkerProc};
use crate::scale::{sentinel, slots, Many};

const BOUND: Duration = Duration::from_secs(60);

/// Threads of an idle many-slot worker, whatever its number of slots: main, watcher,
/// status reaper, signal handler and the one gate-lease renewer (5), and one spare.
pub(crate) const IDLE_THREADS: usize = 6;

/// Set `leaseSecs` in the root's `config.json`, keeping what else it says.
fn set_lease_secs(t: &TestRoot, secs: u64) {
    let path = t.path().join("config.json");
    let mut config: serde_json::Value = fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    config["leaseSecs"] = secs.into();
    fs::write(&path, config.to_string()).unwrap();
}

/// `heartbeatAt` of the lease beside slot `s`'s gate, if it has one yet.
fn lease_heartbeat(t: &TestRoot, s: Slot) -> Option<String> {
    let owner = t
        .path()
        .join(format!("workers/{}/.worker.lock.lease/owner.json", s.0));
    let v: serde_json::Value = serde_json::from_str(&fs::read_to_string(owner).ok()?).ok()?;
    v["heartbeatAt"].as_str().map(str::to_string)
}

#[test]
fn an_idle_many_slot_worker_has_one_lease_thread_not_one_per_slot() {
    let t = TestRoot::new();
    let all = slots(0..50);
    let m = Many::start(&t, &all, "cat", &[]);
    let threads = m.threads();
    assert!(
        threads <= IDLE_THREADS,
        "{threads} threads in an idle worker of {} slots (at most {IDLE_THREADS})",
        all.len()
    );
}

#[test]
fn lease_renewals_of_an_idle_worker_wake_no_watcher() {
    for many in [false, true] {
        let t = TestRoot::new();
        // A lease of 2 s is renewed every 0.5 s: several renewals within a few seconds.
        set_lease_secs(&t, 2);
        let file = t.dir.path().join("events.json");
        let env = [("CONDUCTOR_DEBUG_WATCH_EVENTS", file.to_str().unwrap())];
        let (_single, _many);
        let served = if many {
            let served = slots(0..3);
            _many = Some(Many::start(&t, &served, "cat", &env));
            served
        } else {
            _single = Some(WorkerProc::start(&t, Slot(0), "cat", &[], &env));
            vec![Slot(0)]
        };
        let before = sentinel(&t, &file, "first");
        // Six renewals of every slot's lease, seen in its record (the test cannot pass
        // by renewing nothing), over 2.5 s or more: a rescan of every slot (every 2 s)
        // and the root's abandoned-slot sweep happen meanwhile too, and wake nothing.
        let mut seen: Vec<HashSet<String>> = vec![HashSet::new(); served.len()];
        wait_until(BOUND, "six renewals of every slot's lease", || {
            for (i, &s) in served.iter().enumerate() {
                if let Some(beat) = lease_heartbeat(&t, s) {
                    seen[i].insert(beat);
                }
            }
            seen.iter().all(|beats| beats.len() >= 6)
        });
        let after = sentinel(&t, &file, "second");
        assert_eq!(
            after,
            before + 1,
            "lease renewals woke the watcher ({} events besides the sentinel; many-slot: {many})",
            after.saturating_sub(before + 1)
        );
    }
}
