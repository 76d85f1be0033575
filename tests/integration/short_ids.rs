//! Issue 36, item 5: generated ids are told apart by their first six characters, views
//! on a terminal show that handle, and every command takes it back.

use std::collections::HashSet;
use std::time::Duration;

use conductor::{Slot, Task, TaskId};

use crate::harness::{run_conductor_env, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);

fn narrow() -> Vec<(String, String)> {
    vec![("COLUMNS".into(), "60".into())]
}

#[track_caller]
fn assert_unique_handles(ids: &[TaskId]) {
    let mut seen = HashSet::new();
    for id in ids {
        let id = id.to_string();
        let handle = &id[..6];
        assert!(
            handle.as_bytes()[0].is_ascii_lowercase()
                && handle
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{id}: the handle is lowercase base 32, a letter first"
        );
        assert!(seen.insert(handle.to_string()), "two ids start {handle}");
    }
}

#[test]
fn ten_thousand_generated_ids_differ_in_their_first_six_characters() {
    let ids: Vec<TaskId> = (0..10_000).map(|_| TaskId::generate()).collect();
    assert_unique_handles(&ids);
}

/// Across processes the handle is made unique by the root: each of these ids claims
/// its handle in `ids/.handles/`, and a taken one is skipped.
#[test]
fn ten_thousand_ids_made_on_a_root_have_unique_handles() {
    let t = TestRoot::new();
    let ids: Vec<TaskId> = (0..10_000)
        .map(|_| conductor::ids::fresh(t.client.root()).unwrap())
        .collect();
    assert_unique_handles(&ids);
    let handles = std::fs::read_dir(t.path().join("ids/.handles"))
        .unwrap()
        .count();
    assert_eq!(handles, 10_000);
}

#[test]
fn a_six_character_handle_names_a_task_to_result_and_the_views_show_it() {
    let t = TestRoot::new();
    let done = {
        let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        let done = t.client.write_task(S0, &Task::new("echo me back")).unwrap();
        t.client.wait_for_result(S0, &done, BOUND).unwrap();
        done
    };
    let done = done.to_string();
    let handle = &done[..6];
    let res = run_conductor_env(&t, &["result", handle], &[], 0);
    assert!(res.stdout.contains("echo me back"), "{res:?}");

    // Queued tasks (each submit its own process; no worker takes them): `queue` and
    // `tasks` at 60 columns show each id as its handle.
    let mut queued = Vec::new();
    for p in ["first queued task", "second queued task"] {
        let out = run_conductor_env(&t, &["submit", p, "--key", "k"], &[], 0);
        queued.push(out.stdout.trim().to_string());
    }
    for view in ["queue", "tasks", "status"] {
        let out = run_conductor_env(&t, &[view], &narrow(), 0).stdout;
        assert!(out.lines().next().unwrap().contains("ID"), "{view}:\n{out}");
        let ids: &[String] = if view == "status" {
            std::slice::from_ref(&done)
        } else {
            &queued
        };
        for id in ids {
            let words: Vec<&str> = out.split_whitespace().collect();
            assert!(
                words.contains(&&id[..6]),
                "{view} shows no {}:\n{out}",
                &id[..6]
            );
        }
        assert!(
            out.lines().all(|l| l.chars().count() <= 60),
            "{view}:\n{out}"
        );
    }

    // A retry's id is its task's and `-r1`: the handle still names the task, and the
    // views show the retry as `<handle>-r1`, which names it.
    let q = &queued[1];
    run_conductor_env(&t, &["cancel", &q[..6]], &[], 0);
    let retried = run_conductor_env(&t, &["retry", &q[..6]], &[], 0).stdout;
    assert_eq!(retried.trim(), format!("{q}-r1"));
    let tasks = run_conductor_env(&t, &["tasks", "--all"], &narrow(), 0).stdout;
    let short_retry = format!("{}-r1", &q[..6]);
    assert!(
        tasks.split_whitespace().any(|w| w == short_retry),
        "{tasks}"
    );
    let res = run_conductor_env(&t, &["result", &q[..6], "--json"], &[], 1).stdout;
    assert!(res.contains(&format!("\"{q}\"")), "{res}");
    let res = run_conductor_env(&t, &["cancel", &short_retry], &[], 0).stdout;
    assert!(res.contains(&format!("{q}-r1")), "{res}");
}
