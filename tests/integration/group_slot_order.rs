//! Issue 38 follow-up: a task's result must not be visible while its group's run slot is
//! still held — `group rm` right after `wait` returned was refused ("1 running") on a
//! loaded machine, because the worker published the result first and let go of the run
//! slots after.

use std::time::Duration;

use conductor::Slot;

use crate::harness::{keyed_worker, run_conductor, spin_until_exists, TestRoot};

const BOUND: Duration = Duration::from_secs(120);

#[test]
fn a_groups_run_slot_is_let_go_before_its_tasks_result_is_out() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    run_conductor(&t, &["group", "add", "solo", "--parallel", "1"], 0);
    let _w = keyed_worker(&t, Slot(0), &log);
    let lock = t.path().join("groups/solo.0.lock");
    for i in 0..6 {
        let id = format!("g{i}");
        run_conductor(&t, &["submit", "--group", "solo", "--id", &id, "a 0"], 0);
        // The first copy of the result to appear is the slot's.
        let result = t.path().join(format!("workers/0/results/{id}.json"));
        spin_until_exists(&result, BOUND);
        assert!(
            !lock.exists(),
            "task {id}'s result is out while its group's run slot is still held"
        );
    }
    // What the race broke: `group rm` at once, with no task of the group left.
    run_conductor(&t, &["group", "rm", "solo"], 0);
}
