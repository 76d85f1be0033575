//! Faults of the fourth storm (issue 38): damaged copies, dependencies already gone,
//! and what a killed worker or a deleted root leaves.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use conductor::Slot;

use crate::harness::{run_conductor, TestRoot, WorkerProc};

const S0: Slot = Slot(0);

/// Set `path`'s mtime `ago` into the past.
fn age(path: &Path, ago: Duration) {
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - ago).unwrap();
}

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

/// Issue 38.6: `submit --after X` where gc collected X (sent to a slot) is refused at
/// once, not cancelled at a later queue scan.
#[test]
fn a_dependency_gc_collected_is_refused_at_submit() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    run_conductor(&t, &["send", "0", "--id", "x1", "collected soon"], 0);
    run_conductor(&t, &["wait", "x1"], 0);
    drop(w);
    run_conductor(&t, &["gc", "--older-than", "0s", "--apply"], 0);
    // As gc's default (24 h) finds it: long registered.
    age(&t.path().join("ids/x1"), Duration::from_secs(3600));
    let began = Instant::now();
    let r = run_conductor(&t, &["submit", "--after", "x1", "--id", "y1", "never"], 2);
    assert!(r.stderr.contains("x1") && r.stderr.contains("gc"), "{r:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(!t.path().join("ids/y1").exists(), "y1 was not taken");
}
