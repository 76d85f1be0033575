//! Directory locks: the staleness matrix, nonce-checked release, and takeover races.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime};

use conductor::dirlock::{
    break_if_stale, break_if_stale_under_gate, inspect, Acquire, DirLock, Holder, LockOptions,
    LockOwner,
};
use conductor::protocol::{now_rfc3339, rfc3339};
use conductor::{host, Error};

use crate::harness::{
    bin, child_arg, child_block_on_stdin, child_command, child_role, child_say, spin_until_exists,
    ChildProc, TestRoot, WorkerProc, CHILD_ARG,
};

const BOUND: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// A lock path the way the worker uses it: `workers/0/.lock`.
fn lock_path(t: &TestRoot) -> PathBuf {
    t.client
        .create_worker(conductor::Slot(0))
        .unwrap()
        .lock_dir()
}

/// A process that is alive for the whole test (killed and reaped on drop).
fn live_process() -> ChildProc {
    let p = ChildProc::spawn({
        let mut c = Command::new("sleep");
        c.arg("30");
        c
    });
    assert!(host::pid_alive(p.id()));
    p
}

/// The pid (and start time) of a process that has exited and been reaped.
fn dead_pid() -> (u32, Option<u64>) {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    // Readable until reaped (as a zombie at worst).
    let start = host::process_start_time(pid);
    child.wait().expect("reap true");
    assert!(!host::pid_alive(pid), "pid {pid} was reused at once");
    (pid, start)
}

/// An owner record as a holder on this host and boot would write it.
fn local_owner(pid: u32, start_time: Option<u64>) -> LockOwner {
    LockOwner {
        pid,
        host: host::hostname().to_string(),
        boot_id: host::boot_id().to_string(),
        start_time,
        nonce: "planted-nonce".to_string(),
        acquired_at: now_rfc3339(),
        heartbeat_at: None,
        host_id: Some(host::host_id().to_string()),
        epoch: 1,
        task: None,
    }
}

fn ago(d: Duration) -> String {
    rfc3339(SystemTime::now() - d)
}

/// Create the lock directory as some other holder would have left it.
fn plant(lock: &Path, owner_json: Option<&[u8]>, pid_file: Option<&str>) {
    fs::create_dir_all(lock).unwrap();
    if let Some(bytes) = owner_json {
        fs::write(lock.join("owner.json"), bytes).unwrap();
    }
    if let Some(pid) = pid_file {
        fs::write(lock.join("pid"), pid).unwrap();
    }
}

fn plant_owner(lock: &Path, owner: &LockOwner) {
    plant(
        lock,
        Some(&serde_json::to_vec_pretty(owner).unwrap()),
        Some(&format!("{}\n", owner.pid)),
    );
}

/// Pretend the lock directory was last changed `age` ago.
fn age_dir(lock: &Path, age: Duration) {
    let dir = fs::File::open(lock).unwrap();
    dir.set_modified(SystemTime::now() - age).unwrap();
}

/// Every file in the lock directory with its bytes (to prove it untouched).
fn snapshot(lock: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(lock)
        .unwrap_or_else(|e| panic!("{} should exist: {e}", lock.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn try_acquire(lock: &Path, opts: &LockOptions) -> Acquire {
    DirLock::try_acquire(lock, opts).expect("try_acquire must not fail with an error")
}

#[track_caller]
fn expect_acquired(res: Acquire, why: &str) -> DirLock {
    match res {
        Acquire::Acquired(l) => l,
        Acquire::Held(h) => {
            panic!("expected to take the lock ({why}), but it is held: {h} / {h:?}")
        }
    }
}

#[track_caller]
fn expect_held(res: Acquire, why: &str) -> Holder {
    match res {
        Acquire::Held(h) => h,
        Acquire::Acquired(l) => {
            let owner = l.owner().clone();
            panic!("the lock must stay held ({why}), but we acquired it: {owner:?}")
        }
    }
}

/// The lock directory now records `lock` (this process, its nonce) as the holder.
#[track_caller]
fn assert_recorded_as_ours(path: &Path, lock: &DirLock) {
    let pid = fs::read_to_string(path.join("pid")).expect(".lock/pid");
    assert_eq!(
        pid.trim(),
        std::process::id().to_string(),
        ".lock/pid holds our pid"
    );
    let owner: LockOwner =
        serde_json::from_slice(&fs::read(path.join("owner.json")).expect("owner.json")).unwrap();
    assert_eq!(&owner, lock.owner());
    assert_eq!(owner.pid, std::process::id());
    assert_ne!(owner.nonce, "planted-nonce");
}

/// Take over a lock planted as `why`, checking we are recorded afterwards.
#[track_caller]
fn assert_taken_over(lock: &Path, opts: &LockOptions, why: &str) {
    let l = expect_acquired(try_acquire(lock, opts), why);
    assert_recorded_as_ours(lock, &l);
    l.release().expect("release the taken-over lock");
    assert!(!lock.exists(), "released lock directory must be gone");
}

/// The lock stays held and its directory is exactly as it was.
#[track_caller]
fn assert_stays_held(lock: &Path, opts: &LockOptions, why: &str) -> Holder {
    let before = snapshot(lock);
    let holder = expect_held(try_acquire(lock, opts), why);
    assert!(!holder.liveness.is_stale(), "{why}: {holder:?}");
    assert_eq!(
        snapshot(lock),
        before,
        "{why}: a held lock must not be touched"
    );
    // The other entry points agree.
    let seen = inspect(lock, opts)
        .unwrap()
        .expect("inspect sees the holder");
    assert!(!seen.liveness.is_stale(), "{why}: inspect says {seen:?}");
    assert_eq!(
        break_if_stale(lock, opts).unwrap(),
        None,
        "{why}: break_if_stale"
    );
    assert_eq!(
        snapshot(lock),
        before,
        "{why}: break_if_stale must not touch it"
    );
    holder
}

#[test]
fn free_lock_is_acquired_and_records_the_holder() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    assert_eq!(inspect(&path, &opts).unwrap(), None, "free lock");

    let lock = expect_acquired(try_acquire(&path, &opts), "free");
    assert!(path.is_dir());
    assert_eq!(lock.path(), path);
    assert_recorded_as_ours(&path, &lock);
    let owner = lock.owner();
    assert_eq!(owner.host, host::hostname());
    assert_eq!(owner.boot_id, host::boot_id());
    assert_eq!(
        owner.start_time,
        host::process_start_time(std::process::id())
    );
    assert!(conductor::protocol::parse_rfc3339(&owner.acquired_at).is_some());

    let holder = inspect(&path, &opts).unwrap().expect("held now");
    assert_eq!(holder.pid, Some(std::process::id()));
    assert!(!holder.liveness.is_stale());

    // A second try from this process (another thread or task) sees it held.
    let h = expect_held(try_acquire(&path, &opts), "we hold it");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(
        h.to_string().contains(&std::process::id().to_string()),
        "{h}"
    );

    lock.release().expect("release");
    assert!(!path.exists(), "release removes the lock directory");
    assert_eq!(inspect(&path, &opts).unwrap(), None);

    // Dropping a lock releases it too.
    let lock = expect_acquired(try_acquire(&path, &opts), "free again");
    drop(lock);
    assert!(!path.exists(), "drop releases the lock");
}

#[test]
fn lock_in_a_missing_directory_is_created() {
    let t = TestRoot::new();
    let path = t.client.root().key_lock("user-ada");
    let lock = expect_acquired(try_acquire(&path, &LockOptions::default()), "free key lock");
    assert_recorded_as_ours(&path, &lock);
}

#[test]
fn live_holder_keeps_the_lock() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let holder_proc = live_process();
    let pid = holder_proc.id();
    let start = host::process_start_time(pid);
    assert!(start.is_some(), "start time of a live process");
    plant_owner(&path, &local_owner(pid, start));

    let h = assert_stays_held(&path, &LockOptions::default(), "holder pid is alive");
    assert_eq!(h.pid, Some(pid));
    assert!(
        h.to_string().contains(&pid.to_string()),
        "the holder is named: {h}"
    );
    drop(holder_proc);
}

#[test]
fn dead_holder_is_taken_over() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let (pid, start) = dead_pid();
    plant_owner(&path, &local_owner(pid, start));
    let seen = inspect(&path, &LockOptions::default()).unwrap().unwrap();
    assert!(seen.liveness.is_stale(), "{seen:?}");
    assert!(seen.to_string().contains(&pid.to_string()), "{seen}");
    assert_taken_over(&path, &LockOptions::default(), "holder pid is dead");

    // break_if_stale removes it too, and says whose it was.
    plant_owner(&path, &local_owner(pid, start));
    let broken = break_if_stale(&path, &LockOptions::default())
        .unwrap()
        .expect("a dead holder's lock is broken");
    assert_eq!(broken.pid, Some(pid));
    assert!(!path.exists());
}

#[test]
fn reused_pid_is_taken_over() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let other = live_process();
    let real_start = host::process_start_time(other.id()).expect("start time");
    // The pid is alive, but it is not the process that took the lock.
    plant_owner(&path, &local_owner(other.id(), Some(real_start + 1)));
    assert_taken_over(
        &path,
        &LockOptions::default(),
        "pid reused by another process",
    );
}

#[test]
fn holder_from_before_a_reboot_is_taken_over() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    assert!(!host::boot_id().is_empty(), "this platform has a boot id");
    let live = live_process();
    let mut owner = local_owner(live.id(), host::process_start_time(live.id()));
    owner.boot_id = "00000000-0000-4000-8000-000000000000".to_string();
    plant_owner(&path, &owner);
    assert_taken_over(&path, &LockOptions::default(), "other boot id");
}

#[test]
fn other_host_is_alive_within_the_lease() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    // A pid that is dead *here* says nothing about a process on another host.
    let (pid, _) = dead_pid();
    let mut owner = local_owner(pid, Some(12345));
    owner.host = "some-other-host.example".to_string();
    owner.boot_id = "another-boot".to_string();
    owner.host_id = Some("0123456789abcdef".to_string());
    plant_owner(&path, &owner);
    let h = assert_stays_held(&path, &LockOptions::default(), "other host, fresh");
    assert!(h.to_string().contains("some-other-host.example"), "{h}");

    // An old lock whose heartbeat is recent is alive.
    fs::remove_dir_all(&path).unwrap();
    owner.acquired_at = ago(HOUR);
    owner.heartbeat_at = Some(now_rfc3339());
    plant_owner(&path, &owner);
    let opts = LockOptions {
        lease: Duration::from_secs(600),
        ..LockOptions::default()
    };
    assert_stays_held(&path, &opts, "other host, heartbeat within the lease");
}

#[test]
fn other_host_past_the_lease_is_taken_over() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let mut owner = local_owner(4711, Some(12345));
    owner.host = "some-other-host.example".to_string();
    owner.host_id = Some("0123456789abcdef".to_string());
    owner.acquired_at = ago(HOUR);
    owner.heartbeat_at = Some(ago(HOUR));
    plant_owner(&path, &owner);
    let opts = LockOptions {
        lease: Duration::from_secs(1),
        ..LockOptions::default()
    };
    assert_taken_over(&path, &opts, "other host, heartbeat an hour old, lease 1s");

    // No heartbeat at all: judged by acquiredAt.
    owner.heartbeat_at = None;
    plant_owner(&path, &owner);
    let opts = LockOptions {
        lease: Duration::from_secs(600),
        ..LockOptions::default()
    };
    assert_taken_over(
        &path,
        &opts,
        "other host, acquired an hour ago, never renewed",
    );
}

#[test]
fn lock_without_owner_is_judged_by_grace() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    assert_eq!(opts.grace, Duration::from_secs(10));

    // Young: its holder may be between mkdir and its first write.
    plant(&path, None, None);
    let h = assert_stays_held(&path, &opts, "no owner yet, young");
    assert_eq!(h.pid, None);

    // Old: nobody is coming back to it.
    age_dir(&path, HOUR);
    assert_taken_over(&path, &opts, "no owner for an hour");

    // A zero grace takes over at once.
    plant(&path, None, None);
    age_dir(&path, Duration::from_millis(50));
    let zero = LockOptions {
        grace: Duration::ZERO,
        ..LockOptions::default()
    };
    assert_taken_over(&path, &zero, "no owner, grace 0");
}

#[test]
fn corrupt_owner_without_pid_is_judged_by_grace() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    for corrupt in [&b"{\"pid\": 12, \"ho"[..], b"", b"\xff\xfe", b"[1, 2, 3]"] {
        plant(&path, Some(corrupt), None);
        assert_stays_held(&path, &opts, "corrupt owner.json, young");
        age_dir(&path, HOUR);
        assert_taken_over(&path, &opts, "corrupt owner.json, old");
    }
}

#[test]
fn corrupt_owner_with_pid_file_is_judged_by_the_pid() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();

    let live = live_process();
    plant(
        &path,
        Some(b"{ not json"),
        Some(&format!("{}\n", live.id())),
    );
    // Made after its holder started, as a real holder's lock is; no grace is due to it.
    let opts = LockOptions {
        grace: Duration::ZERO,
        ..opts
    };
    let h = assert_stays_held(&path, &opts, "corrupt owner.json, live pid file");
    assert_eq!(h.pid, Some(live.id()));
    fs::remove_dir_all(&path).unwrap();

    let (dead, _) = dead_pid();
    plant(&path, Some(b"{ not json"), Some(&format!("{dead}\n")));
    assert_taken_over(&path, &opts, "corrupt owner.json, dead pid file");

    drop(live);
    // An original-conductor lock: just a pid file, naming a live conductor program
    // (one that runs none is not its holder: locks_pid_only.rs).
    let client = ChildProc::spawn({
        let mut c = Command::new("bash");
        c.args(["-c", "exec -a conductor-worker sleep 30"]);
        c
    });
    let pid = client.id();
    crate::harness::wait_until(Duration::from_secs(30), "the client to exec", || {
        fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"conductor"))
    });
    plant(&path, None, Some(&format!("{pid}\n")));
    assert_stays_held(&path, &opts, "pid file only, live conductor program");
    drop(client);
}

#[test]
fn release_only_removes_a_lock_that_is_still_ours() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    let mut lock = expect_acquired(try_acquire(&path, &opts), "free");

    lock.heartbeat().expect("heartbeat while ours");
    let owner: LockOwner =
        serde_json::from_slice(&fs::read(path.join("owner.json")).unwrap()).unwrap();
    assert!(
        owner.heartbeat_at.is_some(),
        "heartbeat recorded in owner.json"
    );
    assert_eq!(owner.nonce, lock.owner().nonce);

    // Somebody judged us gone and took the lock over: owner.json has their nonce.
    let mut theirs = owner.clone();
    theirs.nonce = "someone-else".to_string();
    fs::write(
        path.join("owner.json"),
        serde_json::to_vec(&theirs).unwrap(),
    )
    .unwrap();
    let before = snapshot(&path);

    let err = lock.heartbeat().expect_err("heartbeat on a lost lock");
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    let err = lock.release().expect_err("release of a lost lock");
    match &err {
        Error::LockLost { path: p } => assert_eq!(p, &path),
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(snapshot(&path), before, "the new holder's lock must remain");
}

#[test]
fn dropping_a_lost_lock_leaves_the_new_holders_lock() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let lock = expect_acquired(try_acquire(&path, &LockOptions::default()), "free");
    let mut theirs = lock.owner().clone();
    theirs.nonce = "someone-else".to_string();
    fs::write(
        path.join("owner.json"),
        serde_json::to_vec(&theirs).unwrap(),
    )
    .unwrap();
    let before = snapshot(&path);
    drop(lock);
    assert_eq!(
        snapshot(&path),
        before,
        "drop must not remove somebody else's lock"
    );
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RaceArg {
    lock: PathBuf,
    start: PathBuf,
}

/// 8 threads and 3 child processes call `try_acquire` on `lock` at once; returns
/// how many acquired it (threads' locks are released before returning).
fn race_for(test_name: &str, t: &TestRoot, lock: &Path) -> (usize, Vec<u32>) {
    let start = t.dir.path().join("start");
    let mut children: Vec<ChildProc> = (0..3)
        .map(|_| {
            let arg = RaceArg {
                lock: lock.to_path_buf(),
                start: start.clone(),
            };
            let mut cmd = child_command(test_name, "take-lock");
            cmd.env(CHILD_ARG, serde_json::to_string(&arg).unwrap());
            ChildProc::spawn(cmd)
        })
        .collect();
    for c in &mut children {
        c.expect_word("ready", BOUND);
    }

    let barrier = Arc::new(Barrier::new(9));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let barrier = barrier.clone();
            let lock = lock.to_path_buf();
            let start = start.clone();
            thread::spawn(move || {
                barrier.wait();
                spin_until_exists(&start, BOUND * 2);
                DirLock::try_acquire(&lock, &LockOptions::default())
            })
        })
        .collect();
    // Everybody is at the line: threads past the barrier, children said "ready".
    barrier.wait();
    fs::write(&start, b"go").unwrap();

    // Keep every winner's lock held until everybody has tried.
    let mut held_locks = Vec::new();
    let mut winner_pids = Vec::new();
    for h in threads {
        match h.join().expect("racing thread").expect("try_acquire error") {
            Acquire::Acquired(l) => {
                winner_pids.push(std::process::id());
                held_locks.push(l);
            }
            Acquire::Held(_) => {}
        }
    }
    for c in &mut children {
        match c.next_word(BOUND * 2).as_str() {
            "acquired" => winner_pids.push(c.id()),
            "held" => {}
            other => panic!("child {} failed: {other}", c.id()),
        }
    }
    if winner_pids.len() == 1 {
        let pid = fs::read_to_string(lock.join("pid")).expect("winner's pid file");
        assert_eq!(
            pid.trim(),
            winner_pids[0].to_string(),
            "the pid file names the winner"
        );
    }
    drop(held_locks);
    for c in &mut children {
        c.close_stdin();
        assert!(
            c.wait_exit(BOUND).success(),
            "child {} exited badly",
            c.id()
        );
    }
    (winner_pids.len(), winner_pids)
}

fn race_child() -> bool {
    match child_role().as_deref() {
        Some("take-lock") => {
            let arg: RaceArg = serde_json::from_str(&child_arg()).unwrap();
            child_say("ready");
            spin_until_exists(&arg.start, BOUND * 2);
            match DirLock::try_acquire(&arg.lock, &LockOptions::default()) {
                Ok(Acquire::Acquired(lock)) => {
                    child_say("acquired");
                    // Hold it until the parent has collected every contender's answer.
                    child_block_on_stdin();
                    drop(lock);
                }
                Ok(Acquire::Held(_)) => child_say("held"),
                Err(e) => child_say(&format!("error {e}")),
            }
            true
        }
        Some(_) => true,
        None => false,
    }
}

#[test]
fn takeover_race_on_a_stale_lock_has_exactly_one_winner() {
    if race_child() {
        return;
    }
    let t = TestRoot::new();
    let path = lock_path(&t);
    let (pid, start) = dead_pid();
    plant_owner(&path, &local_owner(pid, start));
    let (winners, pids) = race_for(
        "locks::takeover_race_on_a_stale_lock_has_exactly_one_winner",
        &t,
        &path,
    );
    assert_eq!(
        winners, 1,
        "exactly one contender may take over a stale lock: {pids:?}"
    );
}

#[test]
fn takeover_race_on_a_live_lock_has_no_winner() {
    if race_child() {
        return;
    }
    let t = TestRoot::new();
    let path = lock_path(&t);
    let live = live_process();
    plant_owner(
        &path,
        &local_owner(live.id(), host::process_start_time(live.id())),
    );
    let before = snapshot(&path);
    let (winners, pids) = race_for(
        "locks::takeover_race_on_a_live_lock_has_no_winner",
        &t,
        &path,
    );
    assert_eq!(winners, 0, "nobody may take a live holder's lock: {pids:?}");
    assert_eq!(
        snapshot(&path),
        before,
        "the live holder's lock is untouched"
    );
    drop(live);
}

/// A reusable lock looks exactly like a plain one while held and is simply absent
/// while released; only its parked spare (private to the process) remains.
#[test]
fn reusable_lock_is_parked_between_uses_and_looks_the_same_while_held() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    let spare = PathBuf::from(format!(
        "{}.spare.{}@{}",
        path.display(),
        std::process::id(),
        host::host_id()
    ));
    let mut nonces = Vec::new();
    for round in 0..3 {
        let lock = match DirLock::try_acquire_reusable(&path, &opts).unwrap() {
            Acquire::Acquired(l) => l,
            Acquire::Held(h) => panic!("round {round}: held by {h}"),
        };
        assert!(
            !spare.exists(),
            "round {round}: spare still parked while held"
        );
        assert_eq!(
            fs::read_to_string(path.join("pid")).unwrap().trim(),
            std::process::id().to_string()
        );
        let owner: LockOwner =
            serde_json::from_slice(&fs::read(path.join("owner.json")).unwrap()).unwrap();
        assert_eq!(&owner, lock.owner(), "round {round}");
        nonces.push(owner.nonce.clone());
        // Others see a held lock.
        assert!(matches!(
            DirLock::try_acquire(&path, &opts).unwrap(),
            Acquire::Held(_)
        ));
        lock.release().unwrap();
        assert!(
            !path.exists(),
            "round {round}: released lock still in place"
        );
        assert!(spare.is_dir(), "round {round}: not parked");
    }
    nonces.dedup();
    assert_eq!(nonces.len(), 3, "each acquisition has its own nonce");
    // A plain acquirer takes the released lock normally; our spare stays out of the way.
    match DirLock::try_acquire(&path, &opts).unwrap() {
        Acquire::Acquired(l) => l.release().unwrap(),
        Acquire::Held(h) => panic!("held by {h}"),
    }
    conductor::dirlock::clear_spares(&path).unwrap();
    assert!(!spare.exists());
}

#[test]
fn clear_spares_keeps_a_live_processs_spare() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let mut live = Command::new("sleep").arg("30").spawn().unwrap();
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let live_spare = PathBuf::from(format!("{}.spare.{}", path.display(), live.id()));
    let dead_spare = PathBuf::from(format!("{}.spare.{}", path.display(), dead.id()));
    fs::create_dir(&live_spare).unwrap();
    fs::create_dir(&dead_spare).unwrap();
    conductor::dirlock::clear_spares(&path).unwrap();
    let live_kept = live_spare.is_dir();
    let _ = live.kill();
    let _ = live.wait();
    assert!(live_kept, "a live process's spare was removed");
    assert!(!dead_spare.exists(), "a dead process's spare was kept");
}

// ------------------------------------------------- crash-storm faults (issue 10)

/// Leftovers of a holder that died before recording its pid: nothing at all, or a
/// torn `owner.json` and no `pid`.
const PIDLESS_LEFTOVERS: [Option<&[u8]>; 2] = [None, Some(b"{\"pid\": 12, \"ho")];

#[test]
fn a_pidless_leftover_is_stale_at_once_for_a_gate_holder_only() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    for leftover in PIDLESS_LEFTOVERS {
        plant(&path, leftover, None);
        // Young: somebody may be between mkdir and writing, unless we hold the gate
        // that every taker holds.
        assert_eq!(break_if_stale(&path, &opts).unwrap(), None);
        let h = break_if_stale_under_gate(&path, &opts)
            .unwrap()
            .expect("removed under the gate");
        assert!(h.to_string().contains("gate"), "{h}");
        assert!(!path.exists());
    }
    // A live holder's lock stays, gate or not.
    let live = live_process();
    plant_owner(
        &path,
        &local_owner(live.id(), host::process_start_time(live.id())),
    );
    let before = snapshot(&path);
    assert_eq!(break_if_stale_under_gate(&path, &opts).unwrap(), None);
    assert_eq!(snapshot(&path), before);
}

/// Issue 10 item 7: a worker SIGKILLed between creating `.lock` and writing its pid
/// left it ownerless; its restart refused for the whole grace period.
#[test]
fn a_worker_restarts_at_once_over_a_pidless_lock() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    for leftover in PIDLESS_LEFTOVERS {
        plant(&path, leftover, None);
        let mut w = WorkerProc::start(&t, conductor::Slot(0), "cat", &[], &[]);
        assert!(
            !path.exists(),
            "recovery removed the leftover; stderr:\n{}",
            w.stderr()
        );
        w.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(w.wait_exit(BOUND).success(), "{}", w.stderr());
    }
}

/// Issue 10 item 8: a pid-only (or torn-owner) lock whose pid now belongs to a process
/// that started after the lock was made blocked the slot forever.
#[test]
fn a_pid_that_started_after_its_lock_is_not_the_holder() {
    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    let live = live_process();
    for owner in [None, Some(&b"{\"pid\": 12, \"ho"[..])] {
        plant(&path, owner, Some(&format!("{}\n", live.id())));
        // The lock was made an hour before `live` started.
        age_dir(&path, HOUR);
        let h = inspect(&path, &opts).unwrap().expect("a lock");
        assert!(h.liveness.is_stale(), "{h:?}");
        assert!(
            h.to_string().contains("started after the lock was made"),
            "{h}"
        );

        let out = Command::new(bin("conductor"))
            .args(["locks", "clean", "--apply"])
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("removed"), "{stdout}");
        assert!(!path.exists(), "locks clean --apply removed it: {stdout}");
    }
    // The same pid file in a lock made after the process started: its holder.
    plant(&path, None, Some(&format!("{}\n", live.id())));
    assert_stays_held(&path, &opts, "pid-only lock of a process older than it");
}

/// Issue 10 item 8: a lock never shows up (nor could a crash leave it) in place
/// without its pid: it is renamed into place built, and away before it is emptied.
#[test]
fn a_lock_is_never_in_place_without_its_pid() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let t = TestRoot::new();
    let path = t.client.root().key_lock("k");
    let opts = LockOptions::default();
    let stop = Arc::new(AtomicBool::new(false));
    let looks = Arc::new(AtomicUsize::new(0));
    let observer = {
        let (stop, looks, path) = (stop.clone(), looks.clone(), path.clone());
        thread::spawn(move || {
            let mut pidless = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Ok(dir) = fs::File::open(&path) else {
                    continue;
                };
                // Through the open directory: the very one we opened, wherever it went.
                let pid = fs::read(format!("/proc/self/fd/{}/pid", dir.as_raw_fd()));
                let (Ok(ours), Ok(now)) = (dir.metadata(), fs::symlink_metadata(&path)) else {
                    continue;
                };
                // We hold its inode, so the same (dev, ino) at `path` now is the same
                // directory, which was in place the whole time (none comes back).
                let in_place = (ours.dev(), ours.ino()) == (now.dev(), now.ino());
                if in_place {
                    looks.fetch_add(1, Ordering::Relaxed);
                    if pid.is_err() {
                        pidless.push(format!("{:?}", pid));
                    }
                }
            }
            pidless
        })
    };
    let deadline = std::time::Instant::now() + BOUND;
    let mut rounds = 0;
    while rounds < 200 || looks.load(Ordering::Relaxed) < 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "observer saw too little"
        );
        let l = expect_acquired(try_acquire(&path, &opts), "nobody else takes it");
        l.release().unwrap();
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let pidless = observer.join().unwrap();
    assert!(
        pidless.is_empty(),
        "{} of {} looks found the lock in place without its pid: {:?}",
        pidless.len(),
        looks.load(Ordering::Relaxed),
        &pidless[..pidless.len().min(3)]
    );
}

/// Issue 15: a lock removed by someone else between our failing to create it and
/// reading it is free, not an error ("cannot stat lock ...").
#[test]
fn a_lock_vanishing_while_being_judged_is_free_not_an_error() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let t = TestRoot::new();
    let path = lock_path(&t);
    let opts = LockOptions::default();
    let stop = Arc::new(AtomicBool::new(false));
    let churns = Arc::new(AtomicUsize::new(0));
    // A holder outside the guard protocol taking and dropping the lock as fast as it can.
    let churner = {
        let (stop, churns, path) = (stop.clone(), churns.clone(), path.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if fs::create_dir(&path).is_ok() {
                    let _ = fs::remove_dir(&path);
                    churns.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let deadline = std::time::Instant::now() + BOUND;
    let (mut rounds, mut errors) = (0, Vec::new());
    // Under load the churner may get few turns: run until both did enough or the bound
    // passes, then require enough overlap for the race to have been exercised.
    while (rounds < 3000 || churns.load(Ordering::Relaxed) < 3000)
        && std::time::Instant::now() < deadline
    {
        if let Err(e) = inspect(&path, &opts) {
            errors.push(format!("inspect: {e}"));
        }
        match DirLock::try_acquire(&path, &opts) {
            Ok(Acquire::Acquired(l)) => l.release().unwrap(),
            Ok(Acquire::Held(_)) => {}
            Err(e) => errors.push(format!("try_acquire: {e}")),
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    let churned = churns.load(Ordering::Relaxed);
    assert!(
        rounds >= 200 && churned >= 200,
        "too little overlap to exercise the race: {rounds} rounds, {churned} churns"
    );
    assert!(
        errors.is_empty(),
        "{} errors in {rounds} rounds, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
}

#[test]
fn a_starting_worker_frees_key_and_run_slot_locks_of_dead_processes() {
    // A worker SIGKILLed after taking a key lock (or a run slot) but before claiming
    // its task leaves no task behind for recovery to find.
    let t = TestRoot::new();
    let (pid, start) = dead_pid();
    let key_lock = t.client.root().key_lock("k1");
    let run_slot = t.client.root().slot_lock(0);
    plant_owner(&key_lock, &local_owner(pid, start));
    plant_owner(&run_slot, &local_owner(pid, start));
    let _w = crate::harness::WorkerProc::start(&t, conductor::Slot(0), "cat", &[], &[]);
    assert!(!key_lock.exists(), "the dead process's key lock is freed");
    assert!(!run_slot.exists(), "the dead process's run slot is freed");
}

/// Issue 22, item 7: a fresh lock with only a pid, naming a pid dead here, does not keep
/// a worker from starting on its slot for the grace: the worker holds the slot's gate,
/// which every taker on this host holds, so the dead pid was the holder.
#[test]
fn a_dead_pid_only_lock_does_not_hold_up_a_restart() {
    let t = crate::harness::TestRoot::new();
    let paths = t.client.create_worker(conductor::Slot(0)).unwrap();
    let (pid, _) = dead_pid();
    plant(&paths.lock_dir(), None, Some(&format!("{pid}\n")));
    // Starting fails (exit 3) while the lock is judged held; it must start at once.
    let _w = crate::harness::WorkerProc::start(&t, conductor::Slot(0), "cat", &[], &[]);
    let id = t
        .client
        .write_task(
            conductor::Slot(0),
            &conductor::Task::new("go").with_id("g1"),
        )
        .unwrap();
    let r = t
        .client
        .wait_for_result(conductor::Slot(0), &id, Duration::from_secs(30))
        .unwrap();
    assert_eq!(r.output, "go");
}

/// Issue 22, item 7: a lock with only a pid naming a live process older than the lock is
/// never judged stale; the refusal says how to remove it rather than "wait".
#[test]
fn a_pid_only_lock_of_a_live_process_is_refused_with_a_way_out() {
    let t = crate::harness::TestRoot::new();
    let paths = t.client.create_worker(conductor::Slot(0)).unwrap();
    // Our own test process: alive, and older than the lock.
    plant(
        &paths.lock_dir(),
        None,
        Some(&format!("{}\n", std::process::id())),
    );
    let mut w = crate::harness::WorkerProc::spawn(&t, conductor::Slot(0), "cat", &[], &[]);
    let status = w.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(3), "{}", w.stderr());
    let said = w.stderr();
    assert!(
        said.contains(&format!("rm -r {}", paths.lock_dir().display())),
        "{said}"
    );
}
