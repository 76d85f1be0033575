//! Tasks by id through the real binaries: `wait`, `result`, `logs`, `cancel`, `retry`
//! without a slot, `conductor tasks` and its filters, and withdrawing waiting tasks.

use std::fs;
use std::process::Command;
use std::time::Duration;

use conductor::queue::Queue;
use conductor::tasks::{CancelTask, TaskState};
use conductor::{Outcome, Slot, Task, TaskId, WorkerState};
use serde_json::Value;

use crate::harness::Bg;
use crate::harness::{agent, wait_until, Ran, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);
const S1: Slot = Slot(1);

#[track_caller]
fn cli(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    crate::harness::run_conductor(t, args, code)
}

#[track_caller]
fn json(t: &TestRoot, args: &[&str]) -> Value {
    let r = cli(t, args, 0);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}:\n{}", r.stdout))
}

/// The ids `conductor tasks ARGS --json` lists, in order.
#[track_caller]
fn listed(t: &TestRoot, args: &[&str]) -> Vec<String> {
    let mut all = vec!["tasks", "--json"];
    all.extend_from_slice(args);
    json(t, &all)["tasks"]
        .as_array()
        .expect("tasks array")
        .iter()
        .map(|v| match &v["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn send(t: &TestRoot, slot: Slot, task: Task) -> TaskId {
    t.client.write_task(slot, &task).expect("write_task")
}

fn submit(t: &TestRoot, task: Task) -> TaskId {
    Queue::new(t.client.root().clone())
        .submit(&task)
        .expect("submit")
}

/// A task as an original client leaves it: written straight into the inbox, no registry entry.
fn write_like_an_original_client(t: &TestRoot, slot: Slot, body: &str) {
    fs::write(t.client.worker(slot).task(), body).unwrap();
}

#[test]
fn waiting_and_queued_tasks_are_withdrawn_by_id_and_their_waiters_end() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    t.client.create_worker(S1).unwrap();
    // Stand in for live workers (their gates held), so the waits below end by the
    // withdrawals, not because nobody serves; no real worker claims anything.
    let _g0 = conductor::gate::Gate::acquire(&t.client.worker(S0).worker_gate(), "test").unwrap();
    let _g1 = conductor::gate::Gate::acquire(&t.client.worker(S1).worker_gate(), "test").unwrap();
    send(&t, S0, Task::new("in the inbox").with_id("in1"));
    submit(&t, Task::new("in the queue").with_id("q1"));
    // A Date.now() id, not registered: a lone big number that is no slot is an id.
    write_like_an_original_client(&t, S1, r#"{"id": 1700000000001, "prompt": "by hand"}"#);

    let loc = t.client.find_task(&TaskId::from("in1")).unwrap().unwrap();
    assert_eq!((loc.state, loc.slot), (TaskState::Waiting, Some(S0)));
    let loc = t.client.find_task(&TaskId::from("q1")).unwrap().unwrap();
    assert_eq!(
        (loc.state, loc.queued, loc.slot),
        (TaskState::Queued, true, None)
    );
    let loc = t
        .client
        .find_task(&TaskId::from(1700000000001))
        .unwrap()
        .unwrap();
    assert_eq!((loc.state, loc.slot), (TaskState::Waiting, Some(S1)));

    // Nothing has a result yet.
    let r = cli(&t, &["result", "q1"], 1);
    assert!(
        r.stderr.contains("no result yet (it is queued)"),
        "{}",
        r.stderr
    );

    let mut waiter = Bg::spawn(&t, &["wait", "in1", "q1", "1700000000001", "--json"], true);
    let r = cli(&t, &["cancel", "in1"], 0);
    assert!(
        r.stdout.contains("withdrawn from worker 0's inbox"),
        "{}",
        r.stdout
    );
    let r = cli(&t, &["cancel", "q1"], 0);
    assert!(
        r.stdout.contains("withdrawn from the queue"),
        "{}",
        r.stdout
    );
    cli(&t, &["cancel", "1700000000001"], 0);

    // Every waiter ends, with a `cancelled` result for each task, in the order asked.
    assert_eq!(
        waiter.wait_exit().code(),
        Some(1),
        "cancelled tasks failed: {}",
        waiter.stderr()
    );
    let out = waiter.stdout();
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("one JSON document per task");
    let got: Vec<(String, String)> = docs
        .iter()
        .map(|r| {
            (
                r["taskId"].to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("\"in1\"".to_string(), "cancelled".to_string()),
            ("\"q1\"".to_string(), "cancelled".to_string()),
            ("1700000000001".to_string(), "cancelled".to_string()),
        ]
    );
    // The files are out of reach of any worker, the results where waiters look.
    assert!(!t.client.worker(S0).task().exists());
    assert!(!t.client.worker(S1).task().exists());
    assert!(fs::read_dir(t.client.root().queue_pending())
        .unwrap()
        .next()
        .is_none());
    assert!(t
        .client
        .worker(S0)
        .result_for(&TaskId::from("in1"))
        .exists());
    assert!(t.client.root().queue_results().join("q1.json").exists());

    // By id and in the slot form alike; a second cancel finds them finished.
    let r = cli(&t, &["result", "in1", "--json"], 1);
    assert!(r.stdout.contains("\"cancelled\""), "{}", r.stdout);
    cli(&t, &["result", "0", "in1"], 1);
    cli(&t, &["result", "--slot", "0", "in1"], 1);
    let r = cli(&t, &["cancel", "q1"], 1);
    assert!(
        r.stderr.contains("already finished: cancelled"),
        "{}",
        r.stderr
    );
    // An id nothing knows is a usage error naming it.
    let r = cli(&t, &["wait", "nosuch"], 2);
    assert!(r.stderr.contains("no task nosuch"), "{}", r.stderr);

    // `tasks` shows them, newest first, with where they were.
    let v = json(&t, &["tasks", "--json"]);
    let states: Vec<(&str, &str)> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["promptPreview"].as_str().unwrap(),
                x["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("by hand", "cancelled"),
            ("in the queue", "cancelled"),
            ("in the inbox", "cancelled")
        ]
    );
}

#[test]
fn finished_tasks_are_waited_for_read_and_logged_by_id_and_retried() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    send(&t, S0, Task::new("direct hello").with_id("d1"));
    let r = cli(&t, &["wait", "d1"], 0);
    assert_eq!(r.stdout, "direct hello\n");
    submit(&t, Task::new("queued hello").with_id("q2"));
    let r = cli(&t, &["wait", "q2"], 0);
    assert_eq!(r.stdout, "queued hello\n");

    // Finished: result and logs by id, wherever they ran.
    assert_eq!(cli(&t, &["result", "d1"], 0).stdout, "direct hello\n");
    assert_eq!(cli(&t, &["result", "q2"], 0).stdout, "queued hello\n");
    assert_eq!(cli(&t, &["logs", "d1"], 0).stdout, "direct hello");
    assert_eq!(cli(&t, &["logs", "q2"], 0).stdout, "queued hello");
    // -f on a finished task prints its log and ends.
    assert_eq!(cli(&t, &["logs", "q2", "-f"], 0).stdout, "queued hello");
    let loc = t.client.find_task(&TaskId::from("q2")).unwrap().unwrap();
    assert_eq!(
        (loc.state, loc.queued, loc.slot),
        (TaskState::Done, true, Some(S0))
    );
    let r = cli(&t, &["cancel", "d1"], 1);
    assert!(r.stderr.contains("already finished: done"), "{}", r.stderr);
    // The slot forms still work.
    assert_eq!(cli(&t, &["wait", "0", "d1"], 0).stdout, "direct hello\n");
    assert_eq!(
        cli(&t, &["logs", "0", "--task", "d1"], 0).stdout,
        "direct hello"
    );

    // Retry by id: a direct task goes back to its slot, a queued one to the queue.
    let r = cli(&t, &["retry", "d1", "--wait"], 0);
    assert_eq!(r.stdout, "direct hello\n");
    let new = cli(&t, &["retry", "q2"], 0).stdout.trim().to_string();
    assert_eq!(new, "q2-r1");
    assert_eq!(cli(&t, &["wait", "q2-r1"], 0).stdout, "queued hello\n");
    let loc = t.client.find_task(&TaskId::from("q2-r1")).unwrap().unwrap();
    assert!(loc.queued, "{loc:?}");
    let loc = t.client.find_task(&TaskId::from("d1-r1")).unwrap().unwrap();
    assert_eq!((loc.state, loc.queued), (TaskState::Done, false));
}

fn wait_working(t: &TestRoot, slot: Slot, id: &str) {
    let want = TaskId::from(id);
    wait_until(
        BOUND,
        &format!("worker {slot} working on {id}"),
        || matches!(t.client.read_status(slot), Ok(Some(s)) if s.status == WorkerState::Working && s.task_id.as_ref() == Some(&want)),
    );
}

#[test]
fn a_running_task_is_followed_and_cancelled_by_id() {
    let t = TestRoot::new();
    let slow = agent("slow.sh").display().to_string();
    let _w = WorkerProc::start(&t, S0, &slow, &[], &[]);
    submit(&t, Task::new("x").with_id("r1"));
    wait_working(&t, S0, "r1");
    let loc = t.client.find_task(&TaskId::from("r1")).unwrap().unwrap();
    assert_eq!(
        (loc.state, loc.queued, loc.slot),
        (TaskState::Running, true, Some(S0))
    );
    // `working`, as status and the dashboard say it; `running` is taken as an alias.
    let v = json(&t, &["tasks", "--json", "--state", "running"]);
    assert_eq!(v["tasks"][0]["id"], "r1");
    assert_eq!(v["tasks"][0]["state"], "working");
    let v = json(&t, &["tasks", "--json", "--state", "working"]);
    assert_eq!(v["tasks"][0]["id"], "r1");
    assert_eq!(v["tasks"][0]["slot"], 0);

    let mut follower = Bg::spawn(&t, &["logs", "r1", "-f"], true);
    wait_until(BOUND, "the follower to print the agent's output", || {
        follower.stdout().contains("working")
    });
    let r = cli(&t, &["cancel", "r1"], 0);
    assert!(r.stdout.contains("running on worker 0"), "{}", r.stdout);
    let r = cli(&t, &["wait", "r1", "--json"], 1);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["outcome"], "cancelled");
    // The follower ends with the task, having printed its output once.
    assert_eq!(
        follower.wait_exit().code(),
        Some(0),
        "{}",
        follower.stderr()
    );
    assert_eq!(follower.stdout(), "working\n");
}

#[test]
fn tasks_lists_newest_first_with_filters_and_json() {
    let t = TestRoot::new();
    {
        let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        let mut a1 = Task::new("first   prompt\nover lines").with_id("a1");
        a1.key = Some("k1".into());
        send(&t, S0, a1);
        cli(&t, &["wait", "a1"], 0);
        let mut a2 = Task::new("second").with_id("a2");
        a2.key = Some("k2".into());
        send(&t, S0, a2);
        cli(&t, &["wait", "a2"], 0);
    }
    send(&t, S0, Task::new("waits").with_id("w1"));
    let mut q1 = Task::new("queued").with_id("q1");
    q1.key = Some("k1".into());
    q1.priority = Some(7);
    submit(&t, q1);

    assert_eq!(listed(&t, &[]), ["q1", "w1", "a2", "a1"]);
    assert_eq!(listed(&t, &["--state", "done"]), ["a2", "a1"]);
    assert_eq!(listed(&t, &["--state", "waiting,queued"]), ["q1", "w1"]);
    assert_eq!(listed(&t, &["--key", "k1"]), ["q1", "a1"]);
    assert_eq!(listed(&t, &["--slot", "0"]), ["w1", "a2", "a1"]);
    assert_eq!(listed(&t, &["-l", "1"]), ["q1"]);
    assert_eq!(listed(&t, &["--state", "done", "--limit", "1"]), ["a2"]);
    // The old short name is kept for scripts (hidden: -n means workers elsewhere).
    assert_eq!(listed(&t, &["--state", "done", "-n", "1"]), ["a2"]);
    assert_eq!(listed(&t, &["--since", "2000-01-01T00:00:00Z"]).len(), 4);
    cli(&t, &["tasks", "--state", "sleeping"], 2);

    let v = json(&t, &["tasks", "--json", "--key", "k1"]);
    let q = &v["tasks"][0];
    assert_eq!(q["state"], "queued");
    assert_eq!(q["queued"], true);
    assert_eq!(q["priority"], 7);
    let a = &v["tasks"][1];
    assert_eq!(a["state"], "done");
    assert_eq!(a["slot"], 0);
    assert_eq!(a["promptPreview"], "first prompt over lines");
    assert_eq!(a["attempt"], 1);
    assert!(a["durationMs"].is_u64(), "{a}");
    assert!(a["finishedAt"].is_string(), "{a}");

    // --since counts from the registry entry's time.
    let st = Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(t.client.root().id_entry(&TaskId::from("a1")))
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(listed(&t, &["--since", "1h"]), ["q1", "w1", "a2"]);

    let table = cli(&t, &["tasks"], 0).stdout;
    assert!(table.starts_with("STATE "), "{table}");
    assert!(
        table.contains("queue") && table.contains("slot 0"),
        "{table}"
    );

    // A lost registry entry is rebuilt from the files, keeping the order.
    fs::remove_file(t.client.root().id_entry(&TaskId::from("a2"))).unwrap();
    assert_eq!(listed(&t, &[]), ["q1", "w1", "a1"]);
    let v = json(&t, &["tasks", "reindex", "--json"]);
    assert_eq!(v["added"], 1, "{v}");
    assert_eq!(listed(&t, &["--state", "done"]), ["a2", "a1"]);
}

/// Withdrawing races a worker's claim: whoever renames the file first wins, and every
/// task ends with exactly one result that agrees with what the cancel reported.
#[test]
fn withdrawing_races_claims_without_losing_or_doubling_a_task() {
    let t = TestRoot::new();
    let log = t.dir.path().join("ran.log");
    let log_s = log.display().to_string();
    let rec = agent("record.sh").display().to_string();
    let _w = WorkerProc::start(&t, S0, &rec, &[], &[("AGENT_LOG", log_s.as_str())]);
    let mut outcomes = Vec::new();
    for i in 0..30 {
        let id = TaskId::Text(format!("race{i}"));
        if i % 2 == 0 {
            send(&t, S0, Task::new("p").with_id(id.clone()));
        } else {
            submit(&t, Task::new("p").with_id(id.clone()));
        }
        let did = t.client.cancel_task(&id).expect("cancel_task");
        let r = t.client.wait_for_task(&id, BOUND).expect("a result");
        match did {
            CancelTask::Withdrawn { .. } => assert_eq!(r.outcome, Some(Outcome::Cancelled)),
            CancelTask::Requested { .. } => assert!(
                matches!(r.outcome, Some(Outcome::Cancelled | Outcome::Success)),
                "{r:?}"
            ),
            CancelTask::Finished { state } => assert_eq!(state, TaskState::Done),
            other => panic!("{id}: {other:?}"),
        }
        outcomes.push((id, did, r));
    }
    let ran = fs::read_to_string(&log).unwrap_or_default();
    for (id, did, r) in &outcomes {
        let times = ran.lines().filter(|l| *l == id.to_string()).count();
        match (did, r.outcome) {
            (CancelTask::Withdrawn { .. }, _) => {
                assert_eq!(times, 0, "withdrawn task {id} ran anyway: {r:?}")
            }
            // Stopped while running: the agent may or may not have got to its log line.
            (_, Some(Outcome::Cancelled)) => assert!(times <= 1, "task {id} ran {times} times"),
            _ => assert_eq!(times, 1, "task {id} ({did:?}) ran {times} times"),
        }
    }
}

/// Issue 25, item 14: cancel in bulk (`--all`, `--state`, `--key`) and `wait --any`.
#[test]
fn cancel_in_bulk_and_wait_for_any() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let run = |args: &[&str], code: i32| crate::harness::run_conductor(&t, args, code);
    for (id, key) in [("ka1", "a"), ("ka2", "a"), ("kb1", "b"), ("kn", "")] {
        let mut args = vec!["submit", "x", "--id", id];
        if !key.is_empty() {
            args.extend(["--key", key]);
        }
        run(&args, 0);
    }
    let state_of = |id: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&run(&["tasks", "--json", "--all"], 0).stdout).unwrap();
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .map(|x| x["state"].as_str().unwrap().to_string())
            .unwrap()
    };
    let r = run(&["cancel", "--key", "a"], 0);
    assert!(
        r.stdout.contains("ka1") && r.stdout.contains("ka2"),
        "{r:?}"
    );
    assert_eq!(state_of("ka1"), "cancelled");
    assert_eq!(state_of("kb1"), "queued");
    let r = run(&["cancel", "--state", "done"], 2);
    assert!(
        r.stderr.contains("only waiting, queued and working"),
        "{r:?}"
    );
    run(&["cancel", "--all", "ka1"], 2);
    let r = run(&["cancel", "--all"], 0);
    assert!(r.stdout.contains("kb1") && r.stdout.contains("kn"), "{r:?}");
    assert_eq!(state_of("kn"), "cancelled");
    let r = run(&["cancel", "--state", "queued"], 0);
    assert!(r.stderr.contains("nothing cancelled"), "{r:?}");

    // wait --any: the first of several to finish, while another runs on.
    let _busy = crate::harness::WorkerProc::start(&t, Slot(1), "sleep 60", &[], &[]);
    t.client
        .write_task(Slot(1), &conductor::Task::new("long").with_id("long"))
        .unwrap();
    t.client
        .wait_for_status(
            Slot(1),
            &[conductor::WorkerState::Working],
            Duration::from_secs(60),
        )
        .unwrap();
    let _fast = crate::harness::WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    t.client
        .write_task(
            Slot(0),
            &conductor::Task::new("quick answer").with_id("fast"),
        )
        .unwrap();
    let r = run(&["wait", "--any", "long", "fast"], 0);
    assert!(
        r.stdout
            .lines()
            .next()
            .unwrap_or("")
            .starts_with("── task fast · ok"),
        "{r:?}"
    );
    assert!(r.stdout.contains("quick answer"), "{r:?}");
    assert_eq!(state_of("long"), "working");
}

/// Issue 25, item 16: cost and usage totals per key, per agent and per day.
#[test]
fn tasks_summary_totals_cost_per_key_agent_and_day() {
    let t = TestRoot::new();
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "claude"], &[]);
    let run = |args: &[&str], code: i32| crate::harness::run_conductor(&t, args, code);
    run(&["submit", "one", "--id", "s1", "--key", "a"], 0);
    run(&["submit", "two", "--id", "s2", "--key", "a"], 0);
    run(&["submit", "fail now", "--id", "s3", "--key", "b"], 0);
    run(&["wait", "s1", "s2", "s3"], 1);

    let v: Value = serde_json::from_str(&run(&["tasks", "--summary", "--json"], 0).stdout).unwrap();
    let near = |x: &Value, want: f64| (x.as_f64().unwrap() - want).abs() < 1e-9;
    assert_eq!(v["total"]["tasks"], 3, "{v}");
    assert_eq!(v["total"]["done"], 2, "{v}");
    assert_eq!(v["total"]["failed"], 1, "{v}");
    assert!(near(&v["total"]["costUsd"], 0.1125), "{v}");
    let by_key = v["byKey"].as_array().unwrap();
    let a = by_key.iter().find(|k| k["name"] == "a").unwrap();
    assert_eq!(a["tasks"], 2);
    assert!(near(&a["costUsd"], 0.075), "{v}");
    assert_eq!(v["byAgent"][0]["name"], "claude", "{v}");
    assert_eq!(v["byAgent"][0]["turns"], 9, "{v}");
    assert_eq!(v["byDay"].as_array().unwrap().len(), 1, "{v}");

    let text = run(&["tasks", "--summary"], 0).stdout;
    for want in [
        "KEY",
        "AGENT",
        "DAY",
        "$0.0750",
        "3 tasks: 2 done, 1 failed",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}

/// `queue cancel ID` is `cancel ID`, one code path (issue 36): it withdraws a task
/// waiting in a slot's inbox too, which the queue's own cancel never knew (it said "the
/// queue has no pending or running task" and exited 1), and refuses a finished one as
/// `cancel` does.
#[test]
fn queue_cancel_is_cancel_and_withdraws_an_inbox_task_too() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let _g0 = conductor::gate::Gate::acquire(&t.client.worker(S0).worker_gate(), "test").unwrap();
    send(&t, S0, Task::new("in the inbox").with_id("in1"));
    let r = cli(&t, &["queue", "cancel", "in1"], 0);
    assert!(
        r.stdout.contains("withdrawn from worker 0's inbox"),
        "{}",
        r.stdout
    );
    let result = t
        .client
        .result_of(&TaskId::from("in1"))
        .unwrap()
        .expect("a result for in1");
    assert_eq!(result.outcome, Some(Outcome::Cancelled), "{result:?}");
    let r = cli(&t, &["queue", "cancel", "in1"], 1);
    assert!(r.stderr.contains("has already finished"), "{}", r.stderr);
}
