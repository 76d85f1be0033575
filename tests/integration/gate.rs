//! Singleton gates: one holder at a time across processes, never stale.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use conductor::gate::{probe, Gate};
use conductor::Error;

use crate::harness::{
    child_arg, child_block_on_stdin, child_command, child_role, child_say, wait_until, ChildProc,
    TestRoot, CHILD_ARG,
};

const BOUND: Duration = Duration::from_secs(30);
const ROLE: &str = "worker 3";

/// `Gate::acquire` on another thread, so a blocking acquire fails the test instead of
/// hanging it.
fn acquire_bounded(path: PathBuf, role: &'static str) -> (conductor::Result<Gate>, Duration) {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let started = Instant::now();
        let res = Gate::acquire(&path, role);
        let _ = tx.send((res, started.elapsed()));
    });
    rx.recv_timeout(BOUND)
        .expect("Gate::acquire must fail at once, not wait for the holder")
}

/// Start this test binary as a child that takes the gate at `path`, says "ready" and
/// holds the gate until it is killed.
fn spawn_holder(test_name: &str, path: &PathBuf) -> ChildProc {
    let mut cmd = child_command(test_name, "hold-gate");
    cmd.env(CHILD_ARG, path);
    let mut holder = ChildProc::spawn(cmd);
    holder.expect_word("ready", BOUND);
    holder
}

/// The child side: acquire, report, block on stdin forever (the parent kills us).
fn gate_child() -> bool {
    match child_role().as_deref() {
        Some("hold-gate") => {
            let path = PathBuf::from(child_arg());
            match Gate::acquire(&path, ROLE) {
                Ok(gate) => {
                    child_say("ready");
                    child_block_on_stdin();
                    drop(gate);
                }
                Err(e) => child_say(&format!("error {e}")),
            }
            true
        }
        Some(_) => true,
        None => false,
    }
}

#[test]
fn second_acquirer_fails_fast_naming_the_holder() {
    if gate_child() {
        return;
    }
    let t = TestRoot::new();
    let path = t.client.worker(conductor::Slot(3)).worker_gate();
    let mut holder = spawn_holder("gate::second_acquirer_fails_fast_naming_the_holder", &path);
    let pid = holder.id();

    let (res, took) = acquire_bounded(path.clone(), ROLE);
    let err = res.expect_err("the gate is held by the child");
    match &err {
        Error::GateHeld {
            role,
            holder: who,
            path: p,
        } => {
            assert_eq!(role, ROLE);
            assert_eq!(p, &path);
            assert!(who.contains(&format!("pid {pid}")), "holder named: {who}");
        }
        other => panic!("expected GateHeld, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("pid {pid}")),
        "message names the holder's pid: {msg}"
    );
    assert!(msg.contains(ROLE), "message names the role: {msg}");
    assert!(
        took < Duration::from_secs(5),
        "failing took {took:?}: not fast"
    );

    // The holder is still there and still holds it.
    assert!(holder.is_running(), "the holder must be unaffected");
    let again = acquire_bounded(path.clone(), ROLE).0;
    assert!(matches!(again, Err(Error::GateHeld { .. })), "{again:?}");
    holder.kill();
}

#[test]
fn probe_reports_the_holder() {
    if gate_child() {
        return;
    }
    let t = TestRoot::new();
    let path = t.client.worker(conductor::Slot(3)).worker_gate();
    assert_eq!(probe(&path).unwrap(), None, "no gate file: free");

    let mut holder = spawn_holder("gate::probe_reports_the_holder", &path);
    let seen = probe(&path).unwrap().expect("probe sees the holder");
    assert_eq!(seen.pid, holder.id());
    assert_eq!(seen.role, ROLE);
    assert_eq!(seen.host, conductor::host::hostname());
    assert!(
        conductor::protocol::parse_rfc3339(&seen.since).is_some(),
        "{seen:?}"
    );
    // Probing does not take the gate away from its holder.
    assert!(matches!(
        acquire_bounded(path.clone(), ROLE).0,
        Err(Error::GateHeld { .. })
    ));

    holder.kill();
    wait_until(BOUND, "the gate to be free after its holder died", || {
        probe(&path).unwrap().is_none()
    });
}

#[test]
fn gate_is_free_again_after_the_holder_is_killed() {
    if gate_child() {
        return;
    }
    let t = TestRoot::new();
    let path = t.client.root().gates_dir().join("launcher-main.lock");
    let mut holder = spawn_holder("gate::gate_is_free_again_after_the_holder_is_killed", &path);
    let dead_pid = holder.id();
    assert!(
        acquire_bounded(path.clone(), ROLE).0.is_err(),
        "held while the child lives"
    );

    holder.kill(); // SIGKILL: no chance to clean up; the kernel drops the flock.
    let mut gate = None;
    wait_until(
        BOUND,
        "the gate to be acquirable after SIGKILL",
        || match acquire_bounded(path.clone(), ROLE).0 {
            Ok(g) => {
                gate = Some(g);
                true
            }
            Err(Error::GateHeld { .. }) => false,
            Err(e) => panic!("unexpected error re-acquiring the gate: {e}"),
        },
    );
    let gate = gate.unwrap();
    assert_eq!(gate.holder().pid, std::process::id());
    assert_eq!(gate.path(), path);

    // The gate file now names us, not the dead holder.
    let seen = probe(&path).unwrap().expect("we hold it");
    assert_eq!(seen.pid, std::process::id());
    assert_ne!(seen.pid, dead_pid);

    // And while we hold it, another acquirer (even in this process) is refused.
    let err = acquire_bounded(path.clone(), "worker 3 again")
        .0
        .expect_err("held by us");
    assert!(
        err.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{err}"
    );

    drop(gate);
    assert_eq!(probe(&path).unwrap(), None, "dropping the gate frees it");
    let g = acquire_bounded(path.clone(), ROLE)
        .0
        .expect("free after drop");
    drop(g);
}

#[test]
fn probing_never_makes_an_acquire_fail() {
    if child_role().is_some() {
        return;
    }
    let t = TestRoot::new();
    let path = t.client.worker(conductor::Slot(1)).worker_gate();
    drop(Gate::acquire(&path, ROLE).expect("free gate"));

    // Somebody runs `conductor status` (which probes) while the worker starts.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (path, stop) = (path.clone(), stop.clone());
        thread::spawn(move || {
            let mut probes = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let _ = probe(&path).expect("probe");
                probes += 1;
            }
            probes
        })
    };
    let mut failures = Vec::new();
    for _ in 0..2000 {
        match Gate::acquire(&path, ROLE) {
            Ok(g) => drop(g),
            Err(e) => failures.push(e.to_string()),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let probes = prober.join().expect("prober");
    assert!(probes > 0);
    assert!(
        failures.is_empty(),
        "a free gate was refused {} times out of 2000 while being probed ({probes} probes), e.g. {:?}",
        failures.len(),
        failures.first()
    );
}

/// Issue 10 item 9: the gate file names a dead holder, but the flock lives on in a
/// process that inherited the gate's descriptor (as an agent child does between fork
/// and exec). Acquire waits a bounded time for it, and if it stays, says so.
#[test]
fn a_dead_holders_lingering_descriptor_is_waited_for_then_named() {
    if child_role().is_some() {
        return;
    }
    use std::os::fd::AsRawFd;
    let t = TestRoot::new();
    let path = t.client.worker(conductor::Slot(2)).worker_gate();
    drop(Gate::acquire(&path, ROLE).expect("free gate"));
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let record = serde_json::json!({
        "pid": dead_pid, "role": ROLE, "host": conductor::host::hostname(),
        "since": "2026-01-01T00:00:00Z",
    });
    std::fs::write(&path, record.to_string()).unwrap();
    let file = std::fs::OpenOptions::new().read(true).open(&path).unwrap();
    // SAFETY: flock on a descriptor we own. (Not nix's Flock, whose drop would unlock
    // the open file for the child too.)
    let rc = unsafe { nix::libc::flock(file.as_raw_fd(), nix::libc::LOCK_EX | nix::libc::LOCK_NB) };
    assert_eq!(rc, 0);
    /// Killed and reaped on drop, even when an assertion fails first.
    struct Lingering(std::process::Child);
    impl Drop for Lingering {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let lingering = Lingering(
        std::process::Command::new("sleep")
            .arg("60")
            .stdout(std::process::Stdio::from(file))
            .spawn()
            .unwrap(),
    );
    assert_eq!(probe(&path).unwrap().map(|h| h.pid), Some(dead_pid));

    let (res, took) = acquire_bounded(path.clone(), ROLE);
    let err = res.expect_err("the flock never went away");
    let msg = err.to_string();
    assert!(msg.contains(&format!("pid {dead_pid} (dead)")), "{msg}");
    assert!(msg.contains("still holds the gate's descriptor"), "{msg}");
    assert!(
        took >= conductor::gate::DEAD_HOLDER_RETRY,
        "gave up after {took:?}"
    );
    drop(lingering);
    wait_until(BOUND, "the gate to be free once the child is gone", || {
        probe(&path).unwrap().is_none()
    });
    assert!(Gate::acquire(&path, ROLE).is_ok());
}
