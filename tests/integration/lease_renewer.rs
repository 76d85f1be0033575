//! Gate leases cost nothing per idle slot: one renewing thread per process, and a
//! renewal wakes no watcher.

use std::collections::HashSet;
use std::fs;
use std::time::Duration;

use conductor::{Outcome, Slot, Task};

use crate::harness::{wait_until, TestRoot, WorkerProc};
use crate::prereq::require;
use crate::scale::{sentinel, slots, Many};

const BOUND: Duration = Duration::from_secs(60);

/// Threads of an idle many-slot worker, whatever its number of slots: main, watcher,
/// signal handler and the one gate-lease renewer (4), and one spare.
pub(crate) const IDLE_THREADS: usize = 5;

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

/// Whether `dir`'s filesystem swaps two names in one step (`RENAME_EXCHANGE`); if not,
/// why not (see `require!`).
fn can_swap_names(dir: &std::path::Path) -> Result<(), String> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    let (a, b) = (dir.join("swap-a"), dir.join("swap-b"));
    fs::write(&a, "a").unwrap();
    fs::write(&b, "b").unwrap();
    let swapped = renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE).is_ok();
    let _ = (fs::remove_file(&a), fs::remove_file(&b));
    if swapped {
        Ok(())
    } else {
        Err("this filesystem cannot swap names (RENAME_EXCHANGE)".into())
    }
}

/// A renewal rewrites the owner record by swapping it with its second name: the two
/// inodes alternate, none is created (creating a file was most of a renewal's cost).
#[test]
fn a_heartbeat_swaps_the_owner_record_and_creates_no_file() {
    use conductor::dirlock::{Acquire, DirLock, LockOptions};
    use std::os::unix::fs::MetadataExt;
    let t = TestRoot::new();
    require!(can_swap_names(t.dir.path()));
    let path = t.path().join("keys/beat.lock");
    let mut lock = match DirLock::try_acquire(&path, &LockOptions::default()).unwrap() {
        Acquire::Acquired(l) => l,
        Acquire::Held(h) => panic!("a fresh lock is held: {h}"),
    };
    let (owner, next) = (path.join("owner.json"), path.join(".owner.json.next"));
    let ino = |p: &std::path::Path| fs::metadata(p).map(|m| m.ino()).ok();
    let beat = |p: &std::path::Path| -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(p).ok()?).ok()?;
        v["heartbeatAt"].as_str().map(str::to_string)
    };
    lock.heartbeat().unwrap();
    let (a, b) = (ino(&owner), ino(&next));
    assert!(b.is_some(), "no second name beside the owner record");
    let first = beat(&owner).expect("a renewed record");
    lock.heartbeat().unwrap();
    assert_eq!(
        (ino(&owner), ino(&next)),
        (b, a),
        "the two names were not swapped"
    );
    let second = beat(&owner).expect("a renewed record");
    assert!(second >= first, "{second} before {first}");
    let mut names: Vec<String> = fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".owner.json.next", "owner.json", "pid"]);
    lock.release().unwrap();
    assert!(!path.exists());
}

/// A gate's lease is ready for its renewals when taken: the owner record's second name
/// exists before the first renewal, so no renewal of an idle worker creates a file (a
/// thousand creations in the first idle minute, on a disk where each was dear).
#[test]
fn a_gate_lease_is_ready_for_renewals_before_the_first_one() {
    let t = TestRoot::new();
    require!(can_swap_names(t.dir.path()));
    // The default lease (120 s) is first renewed well after the look below.
    let _w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    let lease = t.path().join("workers/0/.worker.lock.lease");
    let owner: serde_json::Value =
        serde_json::from_slice(&fs::read(lease.join("owner.json")).unwrap()).unwrap();
    let beat = &owner["heartbeatAt"];
    assert!(
        beat.is_null() || *beat == owner["acquiredAt"],
        "renewed already ({beat}): the look below proves nothing"
    );
    assert!(
        lease.join(".owner.json.next").exists(),
        "no second name for the first renewal to write into: it would create one"
    );
}

/// Put another host's live lease where slot `s`'s is (as that host's worker would after
/// judging us gone while we were paused), renewed now.
fn plant_foreign_lease(t: &TestRoot, s: Slot) {
    let lease = t.path().join(format!("workers/{}/.worker.lock.lease", s.0));
    let now = conductor::protocol::now_rfc3339();
    let owner = serde_json::json!({
        "pid": 4242, "host": "host-b", "bootId": "b-boot", "nonce": "b-nonce",
        "acquiredAt": now, "heartbeatAt": now, "hostId": "host-b-id", "epoch": 1000,
    });
    fs::create_dir_all(&lease).unwrap();
    let tmp = lease.join(".owner.json.test.tmp");
    fs::write(&tmp, owner.to_string()).unwrap();
    fs::rename(&tmp, lease.join("owner.json")).unwrap();
}

/// A many-slot worker gives up a slot whose lease another host took while it was away
/// (a single-slot worker exits then) and goes on serving its other slots.
#[test]
fn a_many_slot_worker_gives_up_a_slot_another_host_took_and_serves_the_rest() {
    let t = TestRoot::new();
    set_lease_secs(&t, 2);
    let m = Many::start(&t, &slots(0..2), "cat", &[]);
    // Host B judged us gone and took slot 1's lease; it keeps renewing it.
    let lease = t.path().join("workers/1/.worker.lock.lease");
    fs::rename(&lease, t.dir.path().join("taken-by-host-b")).unwrap();
    wait_until(BOUND, "the worker to give up slot 1", || {
        plant_foreign_lease(&t, Slot(1));
        m.stderr()
            .contains("worker 1: another host took its lease while this worker was paused")
    });
    let on_1 = t
        .client
        .write_task(Slot(1), &Task::new("for host b").with_id("for-b"))
        .unwrap();
    let on_0 = t
        .client
        .write_task(Slot(0), &Task::new("still ours").with_id("still-0"))
        .unwrap();
    let r = t.client.wait_for_result(Slot(0), &on_0, BOUND).unwrap();
    assert_eq!(r.outcome, Some(Outcome::Success));
    // Slot 1's task was delivered first and the same watcher saw it first: had slot 1
    // still been served, its task would have been taken while slot 0's ran. It waits
    // in its inbox for host B's worker.
    assert!(
        t.client.root().worker(Slot(1)).task().exists(),
        "task {on_1} was taken from a slot whose lease another host holds"
    );
    assert!(!t.client.root().worker(Slot(1)).running().exists());
}
