//! Issue 25, items 10 and 13: groups with their own parallelism (`group add|set|list|rm`,
//! `submit --group`, their cap held across workers and crashes as `maxRunning` is) and
//! pause/resume (`pause --slot|--key|--group|--all [--now]`, `resume`), with real
//! `conductor-worker` processes. Judged from the agents' own records.
//!
//! The agent is `tests/agents/keyed.sh`: its prompt is `KEY NAP [HOLD]`; it appends
//! `start <id> <key> <ns>` and `end <id> <key> <ns>` to `$AGENT_LOG`, waiting for the
//! file HOLD (if given) before its nap.

use std::fs;
use std::time::Duration;

use conductor::queue::Queue;
use conductor::{Slot, TaskId};
use serde_json::Value;

use crate::harness::{
    keyed_runs, keyed_worker, max_concurrent, run_conductor, starts_of, wait_until, worker_stderrs,
    TestRoot, WorkerProc,
};

/// Generous: two cores, busy, other tests running beside us.
const BOUND: Duration = Duration::from_secs(120);

#[track_caller]
fn finished(q: &Queue, id: &str, ws: &[WorkerProc]) -> conductor::TaskResult {
    let r = q
        .wait_for_result(&TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}\n{}", worker_stderrs(ws)));
    assert!(r.success, "{id}: {r:?}\n{}", worker_stderrs(ws));
    r
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The pending ids, in run order, with why each waits.
fn pending(q: &Queue) -> Vec<(String, Option<String>)> {
    q.pending()
        .unwrap()
        .into_iter()
        .map(|p| (p.id.map(|i| i.to_string()).unwrap_or_default(), p.waiting))
        .collect()
}

#[test]
fn a_group_of_one_runs_its_three_tasks_one_at_a_time_on_three_idle_workers() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let q = Queue::new(t.client.root().clone());
    let added = run_conductor(&t, &["group", "add", "solo", "--parallel", "1"], 0);
    assert!(added.stdout.contains("at most 1"), "{}", added.stdout);
    let ws: Vec<WorkerProc> = (0..3).map(|i| keyed_worker(&t, Slot(i), &log)).collect();
    // Three keys, so nothing but the group keeps them apart; each runs a while.
    for (id, key) in [("s1", "a"), ("s2", "b"), ("s3", "c")] {
        let prompt = format!("{key} 0.4");
        run_conductor(&t, &["submit", "--group", "solo", "--id", id, &prompt], 0);
    }
    for id in ["s1", "s2", "s3"] {
        finished(&q, id, &ws);
    }
    let all = keyed_runs(&log);
    assert_eq!(all.len(), 3, "each ran once: {all:?}");
    assert_eq!(
        max_concurrent(&all),
        1,
        "two tasks of a group of parallel 1 ran at once: {all:?}"
    );

    // Filters and totals name the group.
    let listed = json(&run_conductor(&t, &["tasks", "--group", "solo", "--json"], 0).stdout);
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3, "{listed}");
    assert!(tasks
        .iter()
        .all(|t| t["group"] == "solo" && t["state"] == "done"));
    let summary = json(&run_conductor(&t, &["tasks", "--summary", "--json"], 0).stdout);
    let by_group = summary["byGroup"].as_array().unwrap();
    let solo = by_group.iter().find(|g| g["name"] == "solo").unwrap();
    assert_eq!(solo["tasks"], 3, "{summary}");
    assert_eq!(solo["done"], 3, "{summary}");
    let text = run_conductor(&t, &["tasks", "--summary"], 0).stdout;
    assert!(text.contains("GROUP") && text.contains("solo"), "{text}");
    drop(ws);
    crate::harness::assert_nothing_left(t.path());
}

#[test]
fn group_set_lets_more_run_at_once_without_restarting_workers() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let hold = t.dir.path().join("hold");
    let q = Queue::new(t.client.root().clone());
    run_conductor(&t, &["group", "add", "batch", "--parallel", "1"], 0);
    let ws: Vec<WorkerProc> = (0..3).map(|i| keyed_worker(&t, Slot(i), &log)).collect();
    for (id, key) in [("b1", "a"), ("b2", "b"), ("b3", "c")] {
        let prompt = format!("{key} 0 {}", hold.display());
        run_conductor(&t, &["submit", "--group", "batch", "--id", id, &prompt], 0);
    }
    wait_until(BOUND, "one task of the group to start", || {
        keyed_runs(&log).len() == 1
    });
    // The two others wait for the group, and say so everywhere a user looks.
    let waiting = pending(&q);
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    for (id, why) in &waiting {
        assert_eq!(
            why.as_deref(),
            Some("group batch at its limit (parallel 1)"),
            "{id}: {waiting:?}"
        );
    }
    let queue = run_conductor(&t, &["queue"], 0).stdout;
    assert!(queue.contains("group batch at its limit"), "{queue}");
    let list = json(&run_conductor(&t, &["group", "list", "--json"], 0).stdout);
    let g = &list["groups"][0];
    assert_eq!(
        (&g["name"], &g["parallel"], &g["running"], &g["queued"]),
        (&"batch".into(), &1.into(), &1.into(), &2.into()),
        "{list}"
    );
    let table = run_conductor(&t, &["group", "list"], 0).stdout;
    assert!(
        table.contains("RUNNING") && table.contains("batch"),
        "{table}"
    );
    let held = waiting[0].0.clone();
    let waited = run_conductor(&t, &["wait", &held, "--timeout", "0.2"], 1);
    assert!(
        waited.stderr.contains(&format!(
            "task {held} is queued and waits: group batch at its limit"
        )),
        "{}",
        waited.stderr
    );
    // Refused while it has tasks, saying what to do.
    let rm = run_conductor(&t, &["group", "rm", "batch"], 3);
    assert!(
        rm.stderr.contains("1 running and 2 queued") && rm.stderr.contains("cancel --group batch"),
        "{}",
        rm.stderr
    );

    // Two at once from now: the running one still holds (no HOLD file yet).
    run_conductor(&t, &["group", "set", "batch", "--parallel", "2"], 0);
    wait_until(BOUND, "a second task of the group to start", || {
        keyed_runs(&log).len() == 2
    });
    let waiting = pending(&q);
    assert_eq!(
        waiting,
        vec![(
            waiting[0].0.clone(),
            Some("group batch at its limit (parallel 2)".to_string())
        )]
    );
    fs::write(&hold, "").unwrap();
    for id in ["b1", "b2", "b3"] {
        finished(&q, id, &ws);
    }
    let all = keyed_runs(&log);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(max_concurrent(&all), 2, "{all:?}");
    // The group's run slots are let go before a task's result is out: `group rm` right
    // after the last result (it was refused "1 running" on a loaded machine when the
    // result came first).
    run_conductor(&t, &["group", "rm", "batch"], 0);
    let list = json(&run_conductor(&t, &["group", "list", "--json"], 0).stdout);
    assert_eq!(list["groups"], Value::Array(vec![]), "{list}");
    drop(ws);
}

#[test]
fn an_unknown_group_is_refused_by_name_and_cancel_group_withdraws_its_tasks() {
    let t = TestRoot::new();
    run_conductor(&t, &["group", "add", "known", "--parallel", "1"], 0);
    let refused = run_conductor(&t, &["submit", "--group", "nope", "x"], 2);
    assert!(
        refused.stderr.contains("no group nope") && refused.stderr.contains("known groups: known"),
        "{}",
        refused.stderr
    );
    let bad = run_conductor(&t, &["group", "add", "a/b", "--parallel", "1"], 2);
    assert!(bad.stderr.contains("not a group name"), "{}", bad.stderr);
    let zero = run_conductor(&t, &["group", "add", "z", "--parallel", "0"], 2);
    assert!(zero.stderr.contains("at least 1"), "{}", zero.stderr);
    // Nobody serves the root: both stay queued until cancelled by group.
    run_conductor(&t, &["submit", "--group", "known", "--id", "k1", "one"], 0);
    run_conductor(&t, &["submit", "--group", "known", "--id", "k2", "two"], 0);
    run_conductor(&t, &["submit", "--id", "other", "three"], 0);
    let cancelled = run_conductor(&t, &["cancel", "--group", "known"], 0);
    assert!(
        cancelled.stderr.contains("2 task(s) selected"),
        "{}",
        cancelled.stderr
    );
    let listed = json(&run_conductor(&t, &["tasks", "--group", "known", "--json"], 0).stdout);
    let states: Vec<&Value> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["state"])
        .collect();
    assert_eq!(states, [&Value::from("cancelled"); 2], "{listed}");
    let q = Queue::new(t.client.root().clone());
    assert_eq!(pending(&q).len(), 1, "the task of no group stays queued");
    let unknown = run_conductor(&t, &["tasks", "--group", "nope"], 2);
    assert!(
        unknown.stderr.contains("no group nope"),
        "{}",
        unknown.stderr
    );
}

/// Issue 22's premise for groups: a worker SIGKILLed mid-task leaves its agent's child
/// running; the group's run slot it held stays taken until that child is gone.
#[test]
fn a_killed_workers_leftover_keeps_its_group_slot_until_it_is_gone() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let agent = crate::harness::agent("leftover.sh").display().to_string();
    // `overcap` in the log: a task started while another's work still ran.
    let env = [("AGENT_LOG", log.to_str().unwrap()), ("MAX_RUNNING", "1")];
    let q = Queue::new(t.client.root().clone());
    run_conductor(&t, &["group", "add", "one", "--parallel", "1"], 0);
    let mut first = WorkerProc::start(&t, Slot(0), &agent, &[], &env);
    run_conductor(&t, &["submit", "--group", "one", "--id", "a1", "k1 6"], 0);
    let text = || fs::read_to_string(&log).unwrap_or_default();
    wait_until(BOUND, "a1 to start", || text().contains("start a1 k1"));
    let work = format!("leftover-work {} k1 ", log.display());
    let work_runs = || {
        std::process::Command::new("pgrep")
            .args(["-f", &work])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    wait_until(BOUND, "a1's work to run", work_runs);
    first.crash();
    assert!(
        work_runs(),
        "the fault's premise: a1's work outlives its worker"
    );

    // Another key, the same group of one: must not start while a1's work runs.
    let second = WorkerProc::start(&t, Slot(1), &agent, &[], &env);
    run_conductor(&t, &["submit", "--group", "one", "--id", "b1", "k2 0"], 0);
    let b1 = q
        .wait_for_result(&TaskId::from("b1"), BOUND)
        .unwrap_or_else(|e| panic!("b1 ends once a1's leftovers are gone: {e}"));
    assert!(b1.success, "{b1:?}");
    let logged = text();
    assert!(
        !logged.contains("overcap"),
        "a task of group `one` started while a1's work still ran:\n{logged}"
    );
    assert!(!work_runs());
    drop(second);
    crate::harness::assert_nothing_left(t.path());
}

#[test]
fn a_paused_slot_takes_nothing_until_resumed_and_says_so() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let q = Queue::new(t.client.root().clone());
    let ws = vec![keyed_worker(&t, Slot(0), &log)];
    let paused = run_conductor(&t, &["pause", "--slot", "0"], 0);
    assert!(
        paused.stdout.contains("paused slot 0") && paused.stdout.contains("running tasks go on"),
        "{}",
        paused.stdout
    );
    assert!(
        t.path().join("paused/slot-0").is_file(),
        "the pause is a file"
    );
    let sent = run_conductor(&t, &["send", "0", "--id", "p-in", "a 0"], 0);
    assert!(
        sent.stderr
            .contains("worker 0 is paused: task p-in waits in its inbox"),
        "{}",
        sent.stderr
    );
    run_conductor(&t, &["submit", "--id", "p-q", "b 0"], 0);
    // Held, as a bounded wait shows (it would end at once if the task ran).
    run_conductor(&t, &["wait", "p-q", "--timeout", "1"], 1);
    assert!(
        keyed_runs(&log).is_empty(),
        "a paused slot ran {:?}",
        keyed_runs(&log)
    );
    let status = run_conductor(&t, &["status"], 0).stdout;
    let row = status
        .lines()
        .find(|l| l.trim_start().starts_with('0'))
        .unwrap_or_else(|| panic!("no row for slot 0:\n{status}"));
    assert!(row.contains("paused"), "{status}");
    assert!(status.contains("paused: slot 0"), "{status}");
    assert_eq!(
        pending(&q),
        vec![(
            "p-q".to_string(),
            Some("paused (slot 0; no other idle worker)".to_string())
        )]
    );
    let queue = run_conductor(&t, &["queue"], 0).stdout;
    assert!(queue.contains("paused"), "{queue}");
    let tasks = json(&run_conductor(&t, &["tasks", "--json"], 0).stdout);
    let inbox = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "p-in")
        .unwrap()
        .clone();
    assert_eq!(inbox["waiting"], "paused (slot 0)", "{tasks}");

    let resumed = run_conductor(&t, &["resume", "--slot", "0"], 0);
    assert!(
        resumed.stdout.contains("resumed slot 0"),
        "{}",
        resumed.stdout
    );
    assert!(!t.path().join("paused/slot-0").exists());
    t.client
        .wait_for_result(Slot(0), &TaskId::from("p-in"), BOUND)
        .unwrap_or_else(|e| panic!("p-in: {e}\n{}", worker_stderrs(&ws)));
    finished(&q, "p-q", &ws);
    assert_eq!((starts_of(&log, "p-in"), starts_of(&log, "p-q")), (1, 1));
    let again = run_conductor(&t, &["resume", "--slot", "0"], 0);
    assert!(again.stdout.contains("was not paused"), "{}", again.stdout);
    drop(ws);
}

#[test]
fn pause_now_requeues_the_running_task_and_it_runs_once_after_resume() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let hold = t.dir.path().join("hold");
    let q = Queue::new(t.client.root().clone());
    let ws = vec![keyed_worker(&t, Slot(0), &log)];
    let prompt = format!("k 0 {}", hold.display());
    run_conductor(&t, &["submit", "--id", "n1", &prompt], 0);
    wait_until(BOUND, "n1 to start", || starts_of(&log, "n1") == 1);
    let paused = run_conductor(&t, &["pause", "--slot", "0", "--now"], 0);
    assert!(
        paused
            .stdout
            .contains("task n1 is being stopped and put back"),
        "{}",
        paused.stdout
    );
    wait_until(BOUND, "n1 to be back in the queue", || {
        pending(&q).iter().any(|(id, _)| id == "n1")
    });
    // Its worker says what happened to it (published once the task is back).
    wait_until(BOUND, "worker 0 to say n1 was put back", || {
        t.client
            .read_status(Slot(0))
            .ok()
            .flatten()
            .and_then(|st| st.problem)
            .is_some_and(|p| p.contains("task n1 interrupted by the pause of slot 0"))
    });
    assert_eq!(
        q.read_result(&TaskId::from("n1")).unwrap(),
        None,
        "nothing published"
    );
    // It could finish now, but the slot is paused: a bounded wait sees it held.
    fs::write(&hold, "").unwrap();
    run_conductor(&t, &["wait", "n1", "--timeout", "1"], 1);
    assert_eq!(starts_of(&log, "n1"), 1, "{:?}", keyed_runs(&log));

    run_conductor(&t, &["resume", "--slot", "0"], 0);
    let r = finished(&q, "n1", &ws);
    assert_eq!(r.attempt, Some(1), "the same attempt: {r:?}");
    let all = keyed_runs(&log);
    assert_eq!(
        all.len(),
        2,
        "stopped once, run once after the resume: {all:?}"
    );
    assert_eq!(all[0].end, None, "the first run was stopped");
    assert!(all[1].end.is_some());
    drop(ws);
}

#[test]
fn pausing_a_key_holds_its_tasks_and_not_others() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let q = Queue::new(t.client.root().clone());
    let ws = vec![keyed_worker(&t, Slot(0), &log)];
    run_conductor(&t, &["pause", "--key", "alice"], 0);
    run_conductor(
        &t,
        &["submit", "--key", "alice", "--id", "ka", "alice 0"],
        0,
    );
    run_conductor(&t, &["submit", "--key", "bob", "--id", "kb", "bob 0"], 0);
    finished(&q, "kb", &ws);
    assert_eq!(
        pending(&q),
        vec![("ka".to_string(), Some("paused (key alice)".to_string()))]
    );
    run_conductor(&t, &["resume", "--key", "alice"], 0);
    finished(&q, "ka", &ws);
    // Everything, then: nothing starts; `resume --all` lifts every pause.
    run_conductor(&t, &["pause", "--key", "alice"], 0);
    run_conductor(&t, &["pause", "--all"], 0);
    run_conductor(&t, &["submit", "--id", "kc", "carol 0"], 0);
    assert_eq!(
        pending(&q),
        vec![("kc".to_string(), Some("paused".to_string()))]
    );
    let resumed = run_conductor(&t, &["resume", "--all"], 0);
    assert!(
        resumed.stdout.contains("resumed everything, key alice"),
        "{}",
        resumed.stdout
    );
    assert_eq!(fs::read_dir(t.path().join("paused")).unwrap().count(), 0);
    finished(&q, "kc", &ws);
    drop(ws);
}

/// One process serving several slots: pausing one holds what is sent to it while the
/// other slot serves on; the resume lets it run.
#[test]
fn a_paused_slot_of_a_many_slot_worker_holds_its_inbox_until_resumed() {
    let t = TestRoot::new();
    let many = crate::scale::Many::start(&t, &[Slot(0), Slot(1)], "cat", &[]);
    run_conductor(&t, &["pause", "--slot", "1"], 0);
    let sent = run_conductor(&t, &["send", "1", "--id", "m-held", "held"], 0);
    assert!(
        sent.stderr.contains("worker 1 is paused"),
        "{}",
        sent.stderr
    );
    run_conductor(&t, &["send", "0", "--id", "m-free", "free"], 0);
    let free = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("m-free"), BOUND)
        .unwrap();
    assert!(free.success, "{free:?}");
    run_conductor(&t, &["wait", "m-held", "--timeout", "1"], 1);
    run_conductor(&t, &["resume", "--slot", "1"], 0);
    let held = t
        .client
        .wait_for_result(Slot(1), &TaskId::from("m-held"), BOUND)
        .unwrap();
    assert_eq!(held.output, "held");
    drop(many);
}
