//! Dependencies between queued tasks (`submit --after`), per-task working directories
//! (`submit --dir`) and `run --chain`, with real `conductor` and `conductor-worker`
//! processes.
//!
//! The agent is mostly `tests/agents/keyed.sh`: its prompt is `KEY NAP [HOLD]` (NAP
//! `fail` exits 3); it appends `start <id> …` and `end <id> …` lines to `$AGENT_LOG`.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use conductor::queue::Queue;
use conductor::{Error, Outcome, Slot, Task, TaskId, TaskResult};
use serde_json::Value;

use crate::harness::keyed_worker;
use crate::harness::{agent, assert_nothing_left, bin, wait_until, Ran, TestRoot, WorkerProc};
use crate::prereq;

/// Generous: two cores, busy, other tests running beside us.
const BOUND: Duration = Duration::from_secs(120);

fn stderrs(ws: &[&WorkerProc]) -> String {
    ws.iter()
        .map(|w| format!("--- worker {} (pid {}):\n{}", w.slot, w.pid, w.stderr()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[track_caller]
fn cli(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    crate::harness::run_conductor(t, args, code)
}

/// The queued task's result, waited for (bounded).
fn result_of(q: &Queue, id: &str, ws: &[&WorkerProc]) -> TaskResult {
    match q.wait_for_result(&TaskId::from(id), BOUND) {
        Ok(r) => r,
        Err(e) => panic!("no result for {id}: {e}\n{}", stderrs(ws)),
    }
}

/// Lines of the keyed agent's log that start with `what` for task `id`.
fn logged(log: &Path, what: &str, id: &str) -> Option<u128> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(what) && w.next() == Some(id))
            .then(|| w.nth(1).and_then(|ns| ns.parse().ok()))
            .flatten()
    })
}

#[test]
fn a_failed_dependency_cancels_its_dependents_down_the_chain() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let w = keyed_worker(&t, Slot(0), &log);
    let q = Queue::new(t.client.root().clone());
    cli(&t, &["submit", "--id", "A", "x 0"], 0);
    cli(&t, &["submit", "--id", "B", "--after", "A", "x fail"], 0);
    cli(&t, &["submit", "--id", "C", "--after", "B", "x 0"], 0);
    cli(&t, &["submit", "--id", "D", "--after", "A,C", "x 0"], 0);

    let a = result_of(&q, "A", &[&w]);
    assert!(a.success, "{a:?}");
    let b = result_of(&q, "B", &[&w]);
    assert_eq!(b.outcome, Some(Outcome::Failure), "{b:?}");
    let c = result_of(&q, "C", &[&w]);
    assert_eq!(c.outcome, Some(Outcome::Cancelled), "{c:?}");
    assert_eq!(c.error.as_deref(), Some("dependency B failed"));
    let d = result_of(&q, "D", &[&w]);
    assert_eq!(d.outcome, Some(Outcome::Cancelled), "{d:?}");
    assert_eq!(
        d.error.as_deref(),
        Some("dependency C was cancelled (dependency B failed)")
    );
    for never in ["C", "D"] {
        assert_eq!(logged(&log, "start", never), None, "{never} must not run");
    }
    // Withdrawn like a cancelled task: out of pending/, kept with a reason.
    assert!(q.pending().unwrap().is_empty());
    let reasons: Vec<String> = fs::read_dir(t.path().join("queue/rejected"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".reason"))
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("dependency B failed")),
        "{reasons:?}"
    );
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn a_waiting_dependent_holds_no_worker_while_its_dependency_runs() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let hold = t.dir.path().join("release-a");
    let w0 = keyed_worker(&t, Slot(0), &log);
    let w1 = keyed_worker(&t, Slot(1), &log);
    let ws = [&w0, &w1];
    let q = Queue::new(t.client.root().clone());
    let slow = format!("a 0 {}", hold.display());
    cli(&t, &["submit", "--id", "A", &slow], 0);
    wait_until(BOUND, "A to start", || logged(&log, "start", "A").is_some());
    cli(&t, &["submit", "--id", "B", "--after", "A", "b 0"], 0);
    let listed = cli(&t, &["queue", "--json"], 0);
    let doc: Value = serde_json::from_str(&listed.stdout).unwrap();
    let entry = &doc["pending"][0];
    assert_eq!(entry["id"], "B", "{doc}");
    assert_eq!(entry["after"], serde_json::json!(["A"]), "{doc}");
    assert_eq!(entry["waiting"], "waiting for A", "{doc}");
    let listed = cli(&t, &["tasks", "--json"], 0);
    let doc: Value = serde_json::from_str(&listed.stdout).unwrap();
    let b = doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "B")
        .unwrap_or_else(|| panic!("B not listed: {doc}"));
    assert_eq!(b["state"], "queued", "{doc}");
    assert_eq!(b["after"], serde_json::json!(["A"]), "{doc}");
    let table = cli(&t, &["tasks"], 0).stdout;
    assert!(table.contains("queue after A"), "{table}");

    // Submitted after B, it still runs at once on the other worker: B holds none.
    cli(&t, &["submit", "--id", "X", "x 0"], 0);
    let x = result_of(&q, "X", &ws);
    assert!(x.success, "{x:?}");
    assert!(q.read_result(&TaskId::from("A")).unwrap().is_none());
    assert!(q.read_result(&TaskId::from("B")).unwrap().is_none());
    assert_eq!(logged(&log, "start", "B"), None, "B must wait for A");

    fs::write(&hold, "").unwrap();
    let b = result_of(&q, "B", &ws);
    assert!(b.success, "{b:?}");
    let a_end = logged(&log, "end", "A").expect("A ended");
    let b_start = logged(&log, "start", "B").expect("B started");
    assert!(
        b_start > a_end,
        "B started at {b_start}, before A ended at {a_end}"
    );
    drop((w0, w1));
    assert_nothing_left(t.path());
}

#[test]
fn unknown_or_circular_dependencies_are_refused_at_submit() {
    let t = TestRoot::new();
    let q = Queue::new(t.client.root().clone());
    let r = cli(&t, &["submit", "--after", "nope", "p"], 2);
    assert!(
        r.stderr
            .contains("waits for task nope, which this root has no record of"),
        "{}",
        r.stderr
    );
    let r = cli(&t, &["submit", "--id", "S", "--after", "S", "p"], 2);
    assert!(r.stderr.contains("cannot wait for itself"), "{}", r.stderr);
    // Neither was accepted, and neither id was used up.
    assert!(q.pending().unwrap().is_empty());
    cli(&t, &["submit", "--id", "S", "p"], 0);
    // Ids come into being in submit order, so a later task can never be waited for by
    // an earlier one: the first of two tasks naming each other is refused.
    let err = q
        .submit(&Task::new("p").with_id("T").with_after(["U"]))
        .unwrap_err();
    assert!(matches!(err, Error::UnknownDependency { .. }), "{err:?}");
    // Direct delivery keeps no dependencies: refused, not run early.
    t.client.create_worker(Slot(0)).unwrap();
    let err = t
        .client
        .write_task(Slot(0), &Task::new("p").with_after(["S"]))
        .unwrap_err();
    assert!(matches!(err, Error::AfterNeedsQueue { .. }), "{err:?}");
    assert!(err.to_string().contains("kept only by the shared queue"));
}

#[test]
fn an_inbox_task_with_dependencies_is_rejected_by_the_worker() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    // As an original client would write it, past the library's check.
    let inbox = t.path().join("workers/0/task.json");
    fs::write(&inbox, r#"{"id":"early","prompt":"p","after":["x"]}"#).unwrap();
    let r = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("early"), BOUND)
        .unwrap_or_else(|e| panic!("{e}\n{}", w.stderr()));
    assert_eq!(r.outcome, Some(Outcome::Rejected), "{r:?}");
    assert!(
        r.error
            .as_deref()
            .unwrap()
            .contains("kept only by the shared queue"),
        "{r:?}"
    );
}

#[test]
fn a_task_with_a_dir_runs_its_agent_there() {
    let t = TestRoot::new();
    let project = t.dir.path().join("other-project");
    fs::create_dir(&project).unwrap();
    let env_agent = agent("env.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &env_agent, &[], &[]);
    let q = Queue::new(t.client.root().clone());
    let dir = project.to_str().unwrap();
    cli(&t, &["submit", "--id", "there", "--dir", dir, "p"], 0);
    cli(&t, &["submit", "--id", "here", "p"], 0);
    let there = result_of(&q, "there", &[&w]);
    let cwd = |r: &TaskResult| {
        r.output
            .lines()
            .find_map(|l| l.strip_prefix("cwd="))
            .map(|p| fs::canonicalize(p).unwrap())
    };
    assert_eq!(cwd(&there), Some(fs::canonicalize(&project).unwrap()));
    let here = result_of(&q, "here", &[&w]);
    assert_eq!(cwd(&here), Some(fs::canonicalize(t.dir.path()).unwrap()));
}

/// A directory another user owns: `/`, or, where we own `/` (root, as in CI), one of the
/// test's own given to the next uid. `None` where neither can be had (the not-ours case
/// is then skipped, or fails under CI).
fn not_ours_dir(t: &TestRoot) -> Option<PathBuf> {
    let me = nix::unistd::geteuid().as_raw();
    if fs::metadata("/").unwrap().uid() != me {
        return Some(PathBuf::from("/"));
    }
    let theirs = t.dir.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    let given = nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(me + 1)), None)
        .map_err(|e| {
            format!(
                "we own / and cannot chown a directory to uid {}: {e}",
                me + 1
            )
        });
    prereq::runs_part("the not-ours case", given).then_some(theirs)
}

#[test]
fn a_dir_that_is_missing_or_not_ours_is_refused() {
    let t = TestRoot::new();
    let q = Queue::new(t.client.root().clone());
    let missing = t.dir.path().join("missing");
    let r = cli(&t, &["submit", "--dir", missing.to_str().unwrap(), "p"], 2);
    assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    let file = t.dir.path().join("a-file");
    fs::write(&file, "").unwrap();
    let r = cli(&t, &["submit", "--dir", file.to_str().unwrap(), "p"], 2);
    assert!(r.stderr.contains("is not a directory"), "{}", r.stderr);
    if let Some(theirs) = not_ours_dir(&t) {
        let r = cli(&t, &["submit", "--dir", theirs.to_str().unwrap(), "p"], 2);
        assert!(r.stderr.contains("is owned by uid"), "{}", r.stderr);
    }
    assert!(q.pending().unwrap().is_empty());

    // A dir that goes away after submit: the worker refuses the task with a reason.
    let gone = t.dir.path().join("gone");
    fs::create_dir(&gone).unwrap();
    cli(
        &t,
        &[
            "submit",
            "--id",
            "late",
            "--dir",
            gone.to_str().unwrap(),
            "p",
        ],
        0,
    );
    fs::remove_dir(&gone).unwrap();
    let w = WorkerProc::start(&t, Slot(0), "pwd", &[], &[]);
    let r = result_of(&q, "late", &[&w]);
    assert_eq!(r.outcome, Some(Outcome::Rejected), "{r:?}");
    let error = r.error.unwrap();
    assert!(
        error.contains(&gone.display().to_string()) && error.contains("does not exist"),
        "{error}"
    );
}

fn run_chain(t: &TestRoot, agent_cmd: &str, prompts: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(bin("conductor"))
        .env_remove("CONDUCTOR_WORKER")
        .args(["run", "--chain", "--json", "--agent", agent_cmd, "--root"])
        .arg(t.path())
        .args(prompts)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), doc)
}

#[test]
fn run_chain_hands_each_step_the_previous_output_and_stops_at_a_failure() {
    let t = TestRoot::new();
    let (code, doc) = run_chain(&t, "cat", &["one", "two", "three"]);
    assert_eq!(code, Some(0), "{doc}");
    let outputs: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs[0], "one");
    assert_eq!(outputs[1], "two\n\nOutput of the previous step:\none");
    assert_eq!(
        outputs[2],
        "three\n\nOutput of the previous step:\ntwo\n\nOutput of the previous step:\none"
    );

    let t = TestRoot::new();
    let failing = "sh -c 'p=$(cat); printf %s \"$p\"; case $p in fail*) exit 3;; esac'";
    let (code, doc) = run_chain(&t, failing, &["first", "fail here", "never"]);
    assert_eq!(code, Some(1), "{doc}");
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{doc}");
    assert_eq!(results[0]["success"], true);
    assert_eq!(results[1]["outcome"], "failure");
    assert_eq!(results[2]["outcome"], "cancelled");
    let why = results[2]["error"].as_str().unwrap();
    assert!(why.starts_with("not run: step 2"), "{why}");
    assert_nothing_left(t.path());
}

/// Issue 22, item 3: `gc` never takes the result a waiting dependent still needs, and a
/// dependency whose result is gone anyway cancels its dependent, naming it.
#[test]
fn gc_keeps_what_a_dependent_needs_and_a_gone_dependency_cancels_it() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let q = Queue::new(t.client.root().clone());
    let w = keyed_worker(&t, Slot(0), &log);
    for d in ["d1", "d2"] {
        let id = t
            .client
            .write_task(Slot(0), &Task::new("k 0").with_id(d))
            .unwrap();
        t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    }
    drop(w);
    // Nobody serves the queue: both dependents wait in it.
    let mut s1 = Task::new("k 0").with_id("s1");
    s1.after = vec![TaskId::from("d1")];
    let mut s2 = Task::new("k 0").with_id("s2");
    s2.after = vec![TaskId::from("d2")];
    q.submit(&s1).unwrap();
    q.submit(&s2).unwrap();

    cli(&t, &["gc", "--older-than", "0s", "--apply"], 0);
    let kept = t.client.worker(Slot(0)).result_for(&TaskId::from("d1"));
    assert!(kept.exists(), "gc took d1's result, which s1 waits for");

    // d2's result removed by hand (or by an older gc), long after it was registered.
    let paths = t.client.worker(Slot(0));
    fs::remove_file(paths.result_for(&TaskId::from("d2"))).unwrap();
    let entry = fs::File::options()
        .write(true)
        .open(t.path().join("ids/d2"))
        .unwrap();
    entry
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(60))
        .unwrap();

    let w = keyed_worker(&t, Slot(0), &log);
    let r1 = result_of(&q, "s1", &[&w]);
    assert!(r1.success, "{r1:?}");
    let r2 = result_of(&q, "s2", &[&w]);
    assert_eq!(r2.outcome, Some(Outcome::Cancelled), "{r2:?}");
    let why = r2.error.unwrap_or_default();
    assert!(why.contains("d2") && why.contains("no result"), "{why}");
}

/// Issue 22, item 3: a dependent whose dependency waits in the inbox of a slot nobody
/// serves is not waited for in silence: `wait` exits 4 naming the dependency and slot.
#[test]
fn waiting_on_a_dependent_of_an_unserved_inbox_task_ends_naming_it() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let q = Queue::new(t.client.root().clone());
    let _w = keyed_worker(&t, Slot(0), &log);
    t.client.create_worker(Slot(3)).unwrap();
    t.client
        .write_task(Slot(3), &Task::new("k 0").with_id("b3"))
        .unwrap();
    let mut s3 = Task::new("k 0").with_id("s3");
    s3.after = vec![TaskId::from("b3")];
    q.submit(&s3).unwrap();
    let ran = cli(&t, &["wait", "s3", "--timeout", "60s"], 4);
    assert!(
        ran.stderr.contains("b3") && ran.stderr.contains("worker 3"),
        "{}",
        ran.stderr
    );
}

/// Issue 25, item 3: a broken chain names its root cause, a task that never ran can be
/// retried, and `retry ID --with-dependents` re-runs the failed task and re-queues the
/// dependents it cancelled, each waiting for the new run of what it waited for.
#[test]
fn a_broken_chain_names_its_root_cause_and_resumes_with_its_dependents() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let w = keyed_worker(&t, Slot(0), &log);
    let q = Queue::new(t.client.root().clone());
    cli(&t, &["submit", "--id", "b2", "x fail"], 0);
    cli(&t, &["submit", "--id", "t2", "--after", "b2", "x 0"], 0);
    cli(&t, &["submit", "--id", "s2", "--after", "t2", "x 0"], 0);
    let s2 = result_of(&q, "s2", &[&w]);
    assert_eq!(s2.outcome, Some(Outcome::Cancelled), "{s2:?}");
    let why = s2.error.unwrap_or_default();
    assert!(
        why.contains("t2 was cancelled") && why.contains("b2 failed"),
        "the root cause is not named: {why}"
    );
    let waited = cli(&t, &["wait", "s2"], 1);
    assert!(
        waited.stderr.contains("b2 failed") || waited.stdout.contains("b2 failed"),
        "{waited:?}"
    );

    // A task that never ran is retried like any other.
    let again = cli(&t, &["retry", "t2"], 0);
    let t2_again = again.stdout.trim().to_string();
    assert_eq!(t2_again, "t2-r1", "{again:?}");
    let r = result_of(&q, &t2_again, &[&w]);
    assert_eq!(r.outcome, Some(Outcome::Cancelled), "still after b2: {r:?}");

    // The failed root again (now succeeding) with its cancelled dependents, rewired.
    let ran = cli(
        &t,
        &["retry", "b2", "--with-dependents", "--prompt", "x 0"],
        0,
    );
    let ids: Vec<&str> = ran.stdout.split_whitespace().collect();
    assert_eq!(ids, ["b2-r1", "t2-r2", "s2-r1"], "{ran:?}");
    for id in &ids {
        let r = result_of(&q, id, &[&w]);
        assert!(r.success, "{id}: {r:?}");
    }
    let t2 = q.read_result(&TaskId::from("t2-r2")).unwrap().unwrap();
    assert!(t2.success);
    let rec: Value =
        serde_json::from_str(&cli(&t, &["tasks", "--json", "--all"], 0).stdout).unwrap();
    let after_of = |id: &str| {
        rec["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .map(|x| x["after"].clone())
            .unwrap_or_default()
    };
    assert_eq!(after_of("t2-r2"), serde_json::json!(["b2-r1"]));
    assert_eq!(after_of("s2-r1"), serde_json::json!(["t2-r2"]));
    // The start of each ran after the end of what it waited for.
    let (b_end, t_start) = (logged(&log, "end", "b2-r1"), logged(&log, "start", "t2-r2"));
    assert!(b_end.unwrap() <= t_start.unwrap());
}
