//! Issue 36, item 4: a bare argument is a task id; a number that names both a worker slot and a task is refused, naming both forms.

use conductor::Slot;

use crate::harness::{run_conductor, TestRoot};

#[test]
fn a_number_naming_both_a_slot_and_a_task_is_refused_showing_both_commands() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    // Only the slot: the slot form, as before.
    assert_eq!(run_conductor(&t, &["logs", "0"], 0).stdout, "");

    run_conductor(&t, &["submit", "--id", "0", "a task named 0"], 0);
    for command in ["logs", "wait", "result", "cancel"] {
        let r = run_conductor(&t, &[command, "0"], 2);
        assert!(
            r.stderr.contains("names both worker slot 0 and task 0")
                && r.stderr
                    .contains(&format!("`conductor {command} --slot 0`"))
                && r.stderr
                    .contains(&format!("`conductor {command} --task 0`")),
            "{command}: {}",
            r.stderr
        );
    }
    // Each form says which, and does it.
    assert_eq!(run_conductor(&t, &["logs", "--slot", "0"], 0).stdout, "");
    let r = run_conductor(&t, &["cancel", "--task", "0"], 0);
    assert!(r.stdout.contains('0'), "{r:?}");
}

#[test]
fn a_prefix_of_several_tasks_that_is_also_a_slot_is_refused_too() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(1002)).unwrap();
    run_conductor(&t, &["submit", "--id", "10020", "one"], 0);
    run_conductor(&t, &["submit", "--id", "10021", "two"], 0);
    let r = run_conductor(&t, &["wait", "1002"], 2);
    assert!(
        r.stderr.contains("worker slot 1002 and task 1002… (2 ids)")
            && r.stderr.contains("`conductor wait --slot 1002`"),
        "{}",
        r.stderr
    );
    // A number no slot has is a task id (a prefix of one here).
    run_conductor(&t, &["submit", "--id", "98761", "three"], 0);
    let r = run_conductor(&t, &["cancel", "9876"], 0);
    assert!(r.stdout.contains("98761"), "{r:?}");
}
