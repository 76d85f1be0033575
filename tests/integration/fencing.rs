//! A holder whose lock renewals hang fences itself (docs/ARCHITECTURE.md, "Fencing"), on
//! one host: the test holds the slot lock's guard flock, so the worker's heartbeat blocks
//! there as it would in a hung mount, while its agent runs on.

use std::fs::File;
use std::time::{Duration, Instant};

use conductor::protocol::{Outcome, WorkerState};
use conductor::{Slot, Task, TaskId};
use nix::fcntl::{Flock, FlockArg};

use crate::harness::{agent, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);
const LEASE: Duration = Duration::from_secs(4);

#[test]
fn a_task_whose_renewals_hang_has_its_agent_stopped_within_the_lease_and_ends_interrupted() {
    let t = TestRoot::new();
    std::fs::write(t.path().join("config.json"), r#"{"leaseSecs": 4}"#).unwrap();
    let slow = agent("slow.sh").display().to_string();
    let mut w = WorkerProc::start(&t, S0, &slow, &[], &[]);
    t.client
        .write_task(S0, &Task::new("work on").with_id("f1"))
        .unwrap();
    let mut agent_pid = None;
    wait_until(BOUND, "f1's agent to run", || {
        agent_pid = t
            .client
            .read_status(S0)
            .ok()
            .flatten()
            .filter(|s| s.status == WorkerState::Working)
            .and_then(|s| s.agent_pid);
        agent_pid.is_some()
    });
    let agent_pid = agent_pid.unwrap();
    // Every renewal of the slot's lock takes this flock first: from now on none succeeds.
    let guard = File::open(t.client.worker(S0).dir.join(".lock.guard")).unwrap();
    let held = Flock::lock(guard, FlockArg::LockExclusive).expect("hold the lock's guard");
    let since = Instant::now();
    wait_until(BOUND, "the fence to stop f1's agent", || {
        !conductor::host::pid_alive(agent_pid)
    });
    let stopped = since.elapsed();
    // The last renewal came before `since`: the agent was stopped before any other host
    // could have judged the lock gone (a lease after that renewal).
    assert!(
        stopped < LEASE,
        "the agent ran {stopped:?} with its renewals hung (lease {LEASE:?})"
    );
    assert!(w.child.as_mut().unwrap().try_wait().unwrap().is_none());
    // The renewals go through again: nobody took the lock, so the task ends here, once,
    // as interrupted (not as an agent killed by a signal).
    drop(held);
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("f1"), BOUND)
        .unwrap();
    assert_eq!(r.outcome, Some(Outcome::Interrupted), "{r:?}");
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("fenced itself")),
        "{r:?}"
    );
    wait_until(BOUND, "the worker to be past f1", || {
        t.client
            .read_status(S0)
            .ok()
            .flatten()
            .is_some_and(|s| s.status != WorkerState::Working)
    });
    assert!(
        w.child.as_mut().unwrap().try_wait().unwrap().is_none()
            && conductor::pool::serving(t.client.root(), S0, w.pid),
        "the worker no longer serves its slot:\n{}",
        w.stderr()
    );
}
