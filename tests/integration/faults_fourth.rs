//! Faults of the fourth storm (issue 38): damaged copies, dependencies already gone,
//! and what a killed worker or a deleted root leaves.

use std::fs;

use conductor::Slot;

use crate::harness::{run_conductor, TestRoot, WorkerProc};

const S0: Slot = Slot(0);

/// Issue 38.5: the queue's result replaced by an empty file while the slot's copy and
/// the task record are whole: `result` reads the slot's copy, and once no copy is whole,
/// `retry` (what `doctor` advises) runs the record again.
#[test]
fn a_damaged_queue_result_gives_way_to_the_whole_copies_its_task_left() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    run_conductor(&t, &["submit", "--id", "d1", "the prompt kept"], 0);
    run_conductor(&t, &["wait", "d1"], 0);
    drop(w);
    let queued = t.path().join("queue/results/d1.json");
    fs::remove_file(&queued).unwrap();
    fs::write(&queued, "").unwrap();
    let r = run_conductor(&t, &["result", "d1"], 0);
    assert_eq!(r.stdout.trim(), "the prompt kept", "{r:?}");
    // The slot's copy (one file with workers/0/result.json) damaged too: no result to
    // show, but the record still runs it again.
    fs::write(t.path().join("workers/0/results/d1.json"), "").unwrap();
    run_conductor(&t, &["result", "d1"], 1);
    let r = run_conductor(&t, &["retry", "d1"], 0);
    assert_eq!(r.stdout.trim(), "d1-r1", "{r:?}");
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = run_conductor(&t, &["wait", "d1-r1"], 0);
    assert_eq!(r.stdout.trim(), "the prompt kept", "{r:?}");
}
