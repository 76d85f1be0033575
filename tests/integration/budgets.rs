//! Spend limits (issue 37, item 6) through a real worker running the claude preset on
//! `tests/agents/fake-claude-stream`, which reports a cost of $0.0375 per task: a task's
//! own cap reaches the agent as `--max-budget-usd`; a spent daily budget of the root or
//! of a group holds new tasks (the queue, `tasks` and `tasks --summary` say so) until it
//! is raised.

use std::time::Duration;

use conductor::{Slot, TaskId};
use serde_json::Value;

use crate::harness::{agent, run_conductor, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);

fn config(t: &TestRoot, json: &str) {
    std::fs::create_dir_all(t.path()).unwrap();
    // Written whole and renamed: the worker follows the file as it changes.
    let tmp = t.path().join(".config.json.tmp");
    std::fs::write(&tmp, json).unwrap();
    std::fs::rename(&tmp, t.path().join("config.json")).unwrap();
}

fn result(t: &TestRoot, id: &str) -> Value {
    let r = t
        .client
        .wait_for_task(&TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("task {id}: {e}"));
    serde_json::to_value(r).unwrap()
}

/// The queue's reason for `id` to wait, as `conductor queue --json` gives it.
fn queue_reason(t: &TestRoot, id: &str) -> Option<String> {
    let v: Value = serde_json::from_str(&run_conductor(t, &["queue", "--json"], 0).stdout).unwrap();
    v["pending"].as_array()?.iter().find(|p| p["id"] == id)?["waiting"]
        .as_str()
        .map(str::to_string)
}

fn task_state(t: &TestRoot, id: &str) -> Value {
    let v: Value = serde_json::from_str(&run_conductor(t, &["tasks", "--json"], 0).stdout).unwrap();
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_spent_root_budget_holds_new_tasks_with_the_reason_and_a_raised_one_resumes() {
    let t = TestRoot::new();
    config(&t, r#"{"dailyBudgetUsd": 0.01}"#);
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "claude"], &[]);
    run_conductor(
        &t,
        &["submit", "one", "--id", "b1", "--max-budget-usd", "0.5"],
        0,
    );
    let r = result(&t, "b1");
    assert_eq!(r["success"], true, "{r}");
    assert!(
        r["output"].as_str().unwrap().contains("(max budget 0.5)"),
        "{r}"
    );

    // $0.0375 spent of $0.01: the next task waits, and everything says why.
    run_conductor(&t, &["submit", "two", "--id", "b2"], 0);
    let mut why = None;
    wait_until(BOUND, "the queue to say b2 waits for the budget", || {
        why = queue_reason(&t, "b2");
        why.as_deref()
            .is_some_and(|w| w.contains("daily budget spent"))
    });
    let why = why.unwrap();
    assert!(why.contains("$0.0375 of $0.0100"), "{why}");
    let listed = task_state(&t, "b2");
    assert_eq!(listed["state"], "queued", "{listed}");
    assert!(
        listed["waiting"]
            .as_str()
            .unwrap_or("")
            .contains("daily budget spent"),
        "{listed}"
    );
    let summary = run_conductor(&t, &["tasks", "--summary"], 0).stdout;
    assert!(
        summary.contains("spent today: root $0.0375 of $0.0100 (spent: no new task starts)"),
        "{summary}"
    );
    let v: Value =
        serde_json::from_str(&run_conductor(&t, &["tasks", "--summary", "--json"], 0).stdout)
            .unwrap();
    assert_eq!(v["budgets"][0]["name"], "root", "{v}");
    assert_eq!(v["budgets"][0]["dailyBudgetUsd"], 0.01, "{v}");

    // A task sent to the worker's inbox waits there the same way.
    run_conductor(&t, &["send", "0", "three", "--id", "i1"], 0);
    wait_until(BOUND, "tasks to say i1 waits for the budget", || {
        let i1 = task_state(&t, "i1");
        i1["state"] == "waiting"
            && i1["waiting"]
                .as_str()
                .unwrap_or("")
                .contains("daily budget spent")
    });

    // Raised, the worker follows config.json and the held tasks run.
    config(&t, r#"{"dailyBudgetUsd": 1.0}"#);
    assert_eq!(result(&t, "b2")["success"], true);
    assert_eq!(result(&t, "i1")["success"], true);
}

#[test]
fn a_spent_group_budget_holds_only_that_groups_tasks_until_raised() {
    let t = TestRoot::new();
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "claude"], &[]);
    let added = run_conductor(
        &t,
        &[
            "group",
            "add",
            "g",
            "--parallel",
            "2",
            "--daily-budget-usd",
            "0.01",
        ],
        0,
    );
    assert!(
        added.stdout.contains("daily budget $0.0100"),
        "{}",
        added.stdout
    );
    run_conductor(&t, &["submit", "first", "--id", "g1", "--group", "g"], 0);
    assert_eq!(result(&t, "g1")["success"], true);
    run_conductor(&t, &["submit", "second", "--id", "g2", "--group", "g"], 0);
    run_conductor(&t, &["submit", "other", "--id", "n1"], 0);
    // A task of no group runs; the group's waits, saying why.
    assert_eq!(result(&t, "n1")["success"], true);
    let why = queue_reason(&t, "g2").unwrap_or_default();
    assert!(
        why.contains("group g's daily budget spent ($0.0375 of $0.0100"),
        "{why}"
    );
    let summary = run_conductor(&t, &["tasks", "--summary"], 0).stdout;
    assert!(summary.contains("group g $0.0375 of $0.0100"), "{summary}");
    assert!(summary.contains("root $0.0750"), "{summary}");
    let listed = run_conductor(&t, &["group", "list"], 0).stdout;
    assert!(listed.contains("$0.0375 of $0.0100"), "{listed}");

    let bad = run_conductor(&t, &["group", "set", "g", "--daily-budget-usd", "-1"], 2);
    assert!(bad.stderr.contains("--daily-budget-usd"), "{}", bad.stderr);
    run_conductor(&t, &["group", "set", "g", "--daily-budget-usd", "1"], 0);
    assert_eq!(result(&t, "g2")["success"], true);
}
