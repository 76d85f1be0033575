//! The shared queue (pull model) with real `conductor-worker` processes: per-key
//! serialization, the global running cap, priorities, fairness across keys, concurrent
//! submitters, crash recovery of key and run-slot locks, bad entries, and the CLI
//! (`submit`, `queue`, `queue cancel|retry`, the capacity part of `status`).
//!
//! The agent is `tests/agents/keyed.sh`: its prompt is `KEY NAP [HOLD]`; it appends
//! `start <id> <key> <ns>` and `end <id> <key> <ns>` to `$AGENT_LOG`.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use conductor::queue::Queue;
use conductor::{Outcome, Slot, Task, TaskId, TaskResult, WorkerState};
use serde_json::Value;

use crate::harness::{assert_nothing_left, bin, wait_until, ChildProc, Ran, TestRoot, WorkerProc};
use crate::harness::{
    keyed_runs, keyed_worker, max_concurrent, run_conductor, starts_of, worker_stderrs, KeyedRun,
};

/// Generous: two cores, busy, other tests running beside us.
const BOUND: Duration = Duration::from_secs(120);

/// `n` workers on slots 0..n.
fn workers(t: &TestRoot, n: u32, log: &Path) -> Vec<WorkerProc> {
    (0..n).map(|i| keyed_worker(t, Slot(i), log)).collect()
}

/// Every worker's stderr, for failure messages.
fn write_config(t: &TestRoot, json: &str) {
    fs::write(t.path().join("config.json"), json).unwrap();
}

fn keyed(id: &str, key: Option<&str>, prompt: &str) -> Task {
    let mut task = Task::new(prompt).with_id(id);
    task.key = key.map(String::from);
    task
}

#[track_caller]
fn submit(q: &Queue, task: &Task) -> TaskId {
    q.submit(task)
        .unwrap_or_else(|e| panic!("submit {:?}: {e}", task.id))
}

#[track_caller]
fn result_of(q: &Queue, id: &str, ws: &[WorkerProc]) -> TaskResult {
    q.wait_for_result(&TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}\n{}", worker_stderrs(ws)))
}

/// Wait until the agent logged the start of `id`.
fn wait_started(log: &Path, id: &str, ws: &[WorkerProc]) {
    let deadline = Instant::now() + BOUND;
    while starts_of(log, id) == 0 {
        assert!(
            Instant::now() < deadline,
            "task {id} never started; agent log:\n{}\n{}",
            fs::read_to_string(log).unwrap_or_default(),
            worker_stderrs(ws)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Panics if two runs of one key overlap.
fn assert_keys_serialized(all: &[KeyedRun]) {
    let mut by_key: HashMap<&str, Vec<&KeyedRun>> = HashMap::new();
    for r in all {
        by_key.entry(&r.key).or_default().push(r);
    }
    for (key, mut rs) in by_key {
        rs.sort_by_key(|r| r.start);
        for pair in rs.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                b.start > a.end.unwrap(),
                "key {key}: task {} started at {} before task {} ended at {}",
                b.id,
                b.start,
                a.id,
                a.end.unwrap()
            );
        }
    }
}

/// In how many worker slots `id` has a result (each task must have exactly one).
fn result_copies(t: &TestRoot, id: &str) -> usize {
    let id = TaskId::from(id);
    t.client
        .list_workers()
        .unwrap()
        .into_iter()
        .filter(|s| t.client.worker(*s).result_for(&id).exists())
        .count()
}

/// Wait (bounded) until every id has a queue result.
fn wait_all_results(q: &Queue, ids: &[String], ws: &[WorkerProc]) {
    let deadline = Instant::now() + BOUND;
    loop {
        let missing: Vec<&String> = ids
            .iter()
            .filter(|id| !matches!(q.read_result(&TaskId::from(id.as_str())), Ok(Some(_))))
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} tasks have no result, e.g. {:?}; pending: {:?}\n{}",
            missing.len(),
            ids.len(),
            &missing[..missing.len().min(5)],
            q.pending().map(|p| p.len()).map_err(|e| e.to_string()),
            worker_stderrs(ws)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every task succeeded once: one queue result with its output, one worker copy,
/// one agent run; nothing left pending.
fn assert_each_ran_once(t: &TestRoot, q: &Queue, ids: &[String], log: &Path) {
    let all = keyed_runs(log);
    let mut starts: HashMap<&str, usize> = HashMap::new();
    for r in &all {
        *starts.entry(r.id.as_str()).or_default() += 1;
    }
    for id in ids {
        let r = q.read_result(&TaskId::from(id.as_str())).unwrap().unwrap();
        assert!(r.success, "{id}: {r:?}");
        assert_eq!(r.output, format!("done {id}\n"), "{id}");
        assert_eq!(
            starts.get(id.as_str()),
            Some(&1),
            "{id} ran {:?} times",
            starts.get(id.as_str())
        );
        assert_eq!(
            result_copies(t, id),
            1,
            "{id}: results in more than one slot"
        );
    }
    assert_eq!(
        all.len(),
        ids.len(),
        "runs of tasks never submitted: {all:?}"
    );
    assert!(q.pending().unwrap().is_empty(), "tasks left pending");
}

/// 60 tasks over 3 keys on 4 workers; returns the runs.
fn sixty_over_three_keys(t: &TestRoot) -> Vec<KeyedRun> {
    let log = t.dir.path().join("agent.log");
    let ws = workers(t, 4, &log);
    let q = Queue::new(t.client.root().clone());
    let keys = ["alice", "bob", "carol"];
    let mut ids = Vec::new();
    for i in 0..60 {
        let id = format!("t{i:02}");
        let key = keys[i % 3];
        submit(&q, &keyed(&id, Some(key), &format!("{key} 0.05")));
        ids.push(id);
    }
    wait_all_results(&q, &ids, &ws);
    assert_each_ran_once(t, &q, &ids, &log);
    let all = keyed_runs(&log);
    assert_keys_serialized(&all);
    drop(ws);
    assert_nothing_left(t.path());
    all
}

#[test]
fn sixty_tasks_over_three_keys_run_once_each_and_never_overlap_within_a_key() {
    let t = TestRoot::new();
    let all = sixty_over_three_keys(&t);
    // The workers did pull in parallel (three keys could run at once).
    assert!(
        max_concurrent(&all) >= 2,
        "never two agents at once: {all:?}"
    );
}

#[test]
fn max_running_caps_agents_across_all_workers() {
    let t = TestRoot::new();
    write_config(&t, r#"{"maxRunning": 2}"#);
    let all = sixty_over_three_keys(&t);
    let most = max_concurrent(&all);
    assert!(most <= 2, "{most} agents ran at once under maxRunning 2");
}

#[test]
fn parallel_sets_the_root_wide_cap_and_the_workers_honour_it() {
    let t = TestRoot::new();
    write_config(&t, r#"{"leaseSecs": 60}"#);
    let shown = run_conductor(&t, &["parallel"], 0);
    assert!(
        shown.stdout.starts_with("no root-wide cap"),
        "{}",
        shown.stdout
    );
    let set = run_conductor(&t, &["parallel", "2"], 0);
    assert!(set.stdout.starts_with("at most 2 agents"), "{}", set.stdout);
    let config: Value =
        serde_json::from_str(&fs::read_to_string(t.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(config["maxRunning"], 2, "{config}");
    assert_eq!(config["leaseSecs"], 60, "the other keys are kept: {config}");
    let zero = run_conductor(&t, &["parallel", "0"], 2);
    assert!(zero.stderr.contains("--off"), "{}", zero.stderr);
    let json = run_conductor(&t, &["parallel", "--json"], 0);
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["maxRunning"], 2, "{json}");

    let all = sixty_over_three_keys(&t);
    let most = max_concurrent(&all);
    assert!(most <= 2, "{most} agents ran at once under `parallel 2`");

    run_conductor(&t, &["parallel", "--off"], 0);
    let json = run_conductor(&t, &["parallel", "--json"], 0);
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["maxRunning"], Value::Null, "{json}");
    let typo = t.dir.path().join("no-such-root");
    let typo = run_conductor(&t, &["parallel", "3", "--root", typo.to_str().unwrap()], 2);
    assert!(typo.stderr.contains("no-such-root"), "{}", typo.stderr);
    assert!(!t.dir.path().join("no-such-root").exists());
}

#[test]
fn a_priority_nine_task_overtakes_twenty_waiting_ones() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let hold = t.dir.path().join("release-busy");
    let ws = workers(&t, 1, &log);
    let q = Queue::new(t.client.root().clone());
    // Keep the only worker busy until the queue has filled.
    submit(
        &q,
        &keyed("busy", None, &format!("none 0 {}", hold.display())),
    );
    wait_started(&log, "busy", &ws);
    let mut ids = vec!["busy".to_string()];
    for i in 0..20 {
        let id = format!("p5-{i:02}");
        submit(&q, &keyed(&id, None, "none 0"));
        ids.push(id);
    }
    let mut urgent = keyed("urgent", None, "none 0");
    urgent.priority = Some(9);
    submit(&q, &urgent);
    ids.push("urgent".into());

    let pending = q.pending().unwrap();
    assert_eq!(pending.len(), 21);
    assert_eq!(pending[0].id, Some(TaskId::from("urgent")), "{pending:?}");

    fs::write(&hold, "").unwrap();
    wait_all_results(&q, &ids, &ws);
    assert_each_ran_once(&t, &q, &ids, &log);
    let order: Vec<String> = keyed_runs(&log).into_iter().map(|r| r.id).collect();
    let mut want = vec!["busy".to_string(), "urgent".to_string()];
    want.extend((0..20).map(|i| format!("p5-{i:02}")));
    assert_eq!(order, want, "run order");
}

#[test]
fn a_key_with_few_tasks_is_not_starved_behind_a_key_with_many() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let hold = t.dir.path().join("release-busy");
    let ws = workers(&t, 1, &log);
    let q = Queue::new(t.client.root().clone());
    submit(
        &q,
        &keyed("busy", None, &format!("none 0 {}", hold.display())),
    );
    wait_started(&log, "busy", &ws);
    let mut ids = vec!["busy".to_string()];
    for i in 0..30 {
        let id = format!("a{i:02}");
        submit(&q, &keyed(&id, Some("A"), "A 0"));
        ids.push(id);
    }
    for i in 0..3 {
        let id = format!("b{i}");
        submit(&q, &keyed(&id, Some("B"), "B 0"));
        ids.push(id);
    }
    fs::write(&hold, "").unwrap();
    wait_all_results(&q, &ids, &ws);
    assert_each_ran_once(&t, &q, &ids, &log);

    let all = keyed_runs(&log);
    let last_end = |key: &str| {
        all.iter()
            .filter(|r| r.key == key)
            .map(|r| r.end.unwrap())
            .max()
            .unwrap()
    };
    let order: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert!(
        last_end("B") < last_end("A"),
        "B's tasks all ran after A's: {order:?}"
    );
    // Least recently served key first: A and B alternate while both wait.
    let last_b = order.iter().rposition(|id| id.starts_with('b')).unwrap();
    assert!(
        last_b <= 8,
        "B's last task ran only at position {last_b}: {order:?}"
    );
}

#[test]
fn four_submitters_and_four_workers_two_hundred_tasks_each_once() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let ws = workers(&t, 4, &log);
    let q = Queue::new(t.client.root().clone());
    // Each submitter: `conductor submit` fifty times in a shell loop.
    let script = r#"i=1
while [ $i -le 50 ]; do
    k=k$((i % 4))
    "$0" submit --id "s$1-$i" --key "$k" "$k 0" >/dev/null || exit 1
    i=$((i + 1))
done"#;
    let mut submitters: Vec<ChildProc> = (1..=4)
        .map(|n| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", script])
                .arg(bin("conductor"))
                .arg(n.to_string())
                .env("CONDUCTOR_HOME", t.path())
                .env_remove("CONDUCTOR_WORKER")
                .env_remove("RUST_LOG");
            ChildProc::spawn(cmd)
        })
        .collect();
    for s in &mut submitters {
        let st = s.wait_exit(BOUND);
        assert!(st.success(), "a submitter failed: {st}");
    }
    let ids: Vec<String> = (1..=4)
        .flat_map(|n| (1..=50).map(move |i| format!("s{n}-{i}")))
        .collect();
    wait_all_results(&q, &ids, &ws);
    assert_each_ran_once(&t, &q, &ids, &log);
    assert_keys_serialized(&keyed_runs(&log));
    assert_eq!(
        fs::read_dir(t.client.root().queue_results())
            .unwrap()
            .count(),
        200
    );
    drop(ws);
    assert_nothing_left(t.path());
}

#[test]
fn a_killed_worker_frees_its_key_and_run_slot_and_its_task_ends_interrupted_once() {
    let t = TestRoot::new();
    write_config(&t, r#"{"maxRunning": 1}"#);
    let log = t.dir.path().join("agent.log");
    let never = t.dir.path().join("never-created");
    let mut ws = workers(&t, 2, &log);
    let q = Queue::new(t.client.root().clone());
    submit(
        &q,
        &keyed(
            "crash",
            Some("alice"),
            &format!("alice 0 {}", never.display()),
        ),
    );
    wait_started(&log, "crash", &ws);
    // Which worker took it?
    let mut victim = None;
    wait_until(BOUND, "a worker working on crash", || {
        victim = ws.iter().position(|w| {
            matches!(t.client.read_status(w.slot), Ok(Some(s))
                if s.status == WorkerState::Working && s.task_id == Some(TaskId::from("crash")))
        });
        victim.is_some()
    });
    let victim = victim.unwrap();
    let slot = ws[victim].slot;
    let dead_pid = ws[victim].pid;
    let cap = q.capacity().unwrap();
    assert_eq!(cap.slots.used, 1, "{cap:?}");
    assert_eq!(cap.by_key["alice"].running, 1, "{cap:?}");

    ws[victim].crash();
    // The same key, while the crashed worker's key lock and run slot are still there:
    // the surviving worker must find them stale and take them.
    submit(&q, &keyed("after", Some("alice"), "alice 0"));
    let after = result_of(&q, "after", &ws);
    assert!(after.success, "{after:?}");

    // The crashed task ends interrupted — recovered by the idle survivor, no human.
    let crashed = result_of(&q, "crash", &ws);
    assert_eq!(crashed.outcome, Some(Outcome::Interrupted), "{crashed:?}");
    assert!(
        crashed
            .error
            .as_deref()
            .is_some_and(|e| e.contains(&dead_pid.to_string())),
        "{crashed:?}"
    );
    // Restarting the slot finds nothing more to do: still one result, one run. (The
    // recoverer holds the slot's gate until it has cleaned up; a start before then
    // would be refused.)
    let paths = t.client.worker(slot);
    wait_until(BOUND, "the recoverer to let go of the slot", || {
        !paths.running().exists()
            && matches!(conductor::gate::probe(&paths.worker_gate()), Ok(None))
    });
    ws[victim] = keyed_worker(&t, slot, &log);
    submit(&q, &keyed("later", Some("alice"), "alice 0"));
    assert!(result_of(&q, "later", &ws).success);
    assert_eq!(
        q.read_result(&TaskId::from("crash")).unwrap(),
        Some(crashed)
    );
    assert_eq!(result_copies(&t, "crash"), 1);
    assert_eq!(starts_of(&log, "crash"), 1, "the crashed task ran again");
    // Nothing stays held once the workers are idle (the result of `later` is published
    // before its worker lets go of running.json and the locks).
    wait_until(BOUND, "key and run slot free", || {
        ws.iter()
            .all(|w| !t.client.worker(w.slot).running().exists())
            && q.capacity()
                .is_ok_and(|c| c.slots.used == 0 && c.by_key.values().all(|k| k.running == 0))
    });
    drop(ws);
    assert_nothing_left(t.path());
}

#[test]
fn bad_queue_entries_are_rejected_with_reasons_and_the_queue_goes_on() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let ws = workers(&t, 1, &log);
    let q = Queue::new(t.client.root().clone());
    let pending = t.client.root().queue_pending();
    // Written beside, then renamed in: the worker sees each one whole.
    let drop_in = |name: &str, write: &dyn Fn(&Path)| {
        let staged = t.dir.path().join(format!("staged-{name}"));
        write(&staged);
        fs::rename(&staged, pending.join(name)).unwrap();
    };
    drop_in("malformed.json", &|p| {
        fs::write(p, br#"{"id": "m1", "prompt": "unterminated"#).unwrap()
    });
    drop_in("wrong-type.json", &|p| {
        fs::write(p, br#"{"id": "wt1", "prompt": 5}"#).unwrap()
    });
    let target = t.dir.path().join("elsewhere.json");
    fs::write(&target, br#"{"id": "ln1", "prompt": "none 0"}"#).unwrap();
    drop_in("link.json", &|p| symlink(&target, p).unwrap());
    let big = format!(
        r#"{{"id": "big1", "prompt": "{}"}}"#,
        "a".repeat(5 * 1024 * 1024)
    );
    drop_in("huge.json", &|p| fs::write(p, &big).unwrap());
    submit(&q, &keyed("good", None, "none 0"));
    let good = result_of(&q, "good", &ws);
    assert!(good.success, "{good:?}");

    let rejected = t.client.root().queue_rejected();
    let deadline = Instant::now() + BOUND;
    for name in [
        "malformed.json",
        "wrong-type.json",
        "link.json",
        "huge.json",
    ] {
        let kept = rejected.join(name);
        let reason = rejected.join(format!("{name}.reason"));
        while !(fs::symlink_metadata(&kept).is_ok() && reason.exists()) {
            assert!(
                Instant::now() < deadline,
                "{name} not kept in queue/rejected/ with a reason; there: {:?}; pending: {:?}\n{}",
                fs::read_dir(&rejected)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                    .ok(),
                fs::read_dir(&pending)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                    .ok(),
                worker_stderrs(&ws)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let why = fs::read_to_string(&reason).unwrap();
        assert!(!why.trim().is_empty(), "{name}: empty reason");
        assert!(
            fs::symlink_metadata(pending.join(name)).is_err(),
            "{name} still pending"
        );
    }
    let why = |name: &str| fs::read_to_string(rejected.join(format!("{name}.reason"))).unwrap();
    assert!(
        why("link.json").contains("symbolic link"),
        "{}",
        why("link.json")
    );
    assert!(
        why("huge.json").contains("over the limit"),
        "{}",
        why("huge.json")
    );
    assert!(
        fs::symlink_metadata(rejected.join("link.json"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link itself is kept"
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        br#"{"id": "ln1", "prompt": "none 0"}"#,
        "a symlink's target is never touched"
    );
    assert_eq!(
        fs::metadata(rejected.join("huge.json")).unwrap().len(),
        big.len() as u64,
        "kept whole"
    );
    // A bad entry whose id can be read is answered, so its submitter is not left waiting.
    let wt = result_of(&q, "wt1", &ws);
    assert_eq!(wt.outcome, Some(Outcome::Rejected), "{wt:?}");
    // None of them ran.
    assert_eq!(
        keyed_runs(&log)
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        vec!["good"]
    );
    // And the queue still serves.
    submit(&q, &keyed("good2", None, "none 0"));
    assert!(result_of(&q, "good2", &ws).success);
}

// ----------------------------------------------------------------------------- CLI

#[track_caller]
fn cli(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    crate::harness::run_conductor(t, args, code)
}

#[track_caller]
fn cli_json(t: &TestRoot, args: &[&str]) -> Value {
    let r = cli(t, args, 0);
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("conductor {args:?}: not JSON ({e}):\n{}", r.stdout))
}

#[test]
fn submit_prints_the_id_or_with_wait_the_output() {
    let t = TestRoot::new();
    let log = t.dir.path().join("agent.log");
    let ws = workers(&t, 1, &log);
    let q = Queue::new(t.client.root().clone());

    let r = cli(
        &t,
        &[
            "submit", "--wait", "--id", "w1", "--key", "alice", "alice 0",
        ],
        0,
    );
    assert_eq!(r.stdout, "done w1\n");

    let r = cli(
        &t,
        &[
            "submit",
            "--wait",
            "--json",
            "--id",
            "w2",
            "--priority",
            "8",
            "x 0",
        ],
        0,
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["taskId"], "w2");
    assert_eq!(v["success"], true);
    assert_eq!(v["output"], "done w2\n");

    let r = cli(&t, &["submit", "--wait", "--id", "w3", "x fail"], 1);
    assert!(r.stderr.contains("task w3 FAILED"), "{}", r.stderr);

    // Without --wait: the id, and the task runs anyway.
    let r = cli(
        &t,
        &[
            "submit",
            "--max-attempts",
            "2",
            "--timeout",
            "60",
            "--context",
            r#"{"a": 1}"#,
            "x 0",
        ],
        0,
    );
    let id = r.stdout.trim().to_string();
    assert!(!id.is_empty() && !id.contains(' '), "{:?}", r.stdout);
    assert!(result_of(&q, &id, &ws).success);
    let prompt_file = t.dir.path().join("prompt.txt");
    fs::write(&prompt_file, "x 0").unwrap();
    let v = cli_json(
        &t,
        &[
            "submit",
            "--json",
            "--id",
            "w5",
            "-f",
            prompt_file.to_str().unwrap(),
        ],
    );
    assert_eq!(v["id"], "w5");
    assert_eq!(result_of(&q, "w5", &ws).output, "done w5\n");

    // Refusals: a used id, a priority out of range, bad context.
    let r = cli(&t, &["submit", "--id", "w1", "again"], 2);
    assert!(r.stderr.contains("w1"), "{}", r.stderr);
    cli(&t, &["submit", "--priority", "10", "x"], 2);
    cli(&t, &["submit", "--context", "{nope", "x"], 2);
    cli(&t, &["submit", "--key", "a/b", "x"], 2);
}

#[test]
fn queue_lists_in_run_order_with_reasons_and_cancels_and_retries() {
    let t = TestRoot::new();
    write_config(&t, r#"{"maxRunning": 2}"#);
    let log = t.dir.path().join("agent.log");
    let never = t.dir.path().join("never-created");
    let ws = workers(&t, 1, &log);
    let q = Queue::new(t.client.root().clone());

    assert!(cli(&t, &["queue"], 0).stdout.contains("empty"));
    submit(
        &q,
        &keyed(
            "hold",
            Some("alice"),
            &format!("alice 0 {}", never.display()),
        ),
    );
    wait_started(&log, "hold", &ws);
    submit(&q, &keyed("q1", Some("alice"), "alice 0"));
    let mut q2 = keyed("q2", Some("bob"), "bob 0");
    q2.priority = Some(9);
    submit(&q, &q2);
    submit(&q, &keyed("q3", None, "none 0"));

    // Highest priority; then the key served least recently (alice was just served);
    // then oldest.
    let v = cli_json(&t, &["queue", "--json"]);
    let items = v["pending"].as_array().expect("pending array");
    let ids: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["q2", "q3", "q1"], "{v}");
    assert_eq!(items[0]["position"], 1);
    assert_eq!(items[0]["priority"], 9);
    assert_eq!(items[2]["key"], "alice");
    assert_eq!(items[0]["waiting"], "no idle worker", "{v}");
    assert_eq!(items[2]["waiting"], "key alice busy", "{v}");
    assert!(items[1]["ageSecs"].as_f64().unwrap() >= 0.0);

    let out = cli(&t, &["queue"], 0).stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("POS"), "{out}");
    let row = |id: &str| {
        *lines
            .iter()
            .find(|l| l.split_whitespace().any(|w| w == id))
            .unwrap_or_else(|| panic!("no row for {id}:\n{out}"))
    };
    assert!(
        row("q2").starts_with("1 ") && row("q2").contains("no idle worker"),
        "{out}"
    );
    assert!(row("q3").starts_with("2 "), "{out}");
    assert!(
        row("q1").starts_with("3 ") && row("q1").contains("key alice busy"),
        "{out}"
    );
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "wider than 80:\n{out}"
    );

    // The capacity view in status.
    let s = cli_json(&t, &["status", "--json"]);
    assert_eq!(s["workers"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["slots"]["max"], 2, "{s}");
    assert_eq!(s["slots"]["used"], 1, "{s}");
    assert_eq!(s["slots"]["available"], 1, "{s}");
    assert_eq!(s["byKey"]["alice"]["running"], 1, "{s}");
    assert_eq!(s["byKey"]["alice"]["pending"], 1, "{s}");
    assert_eq!(s["byKey"]["bob"]["pending"], 1, "{s}");
    assert_eq!(s["pending"]["total"], 3, "{s}");
    assert_eq!(s["pending"]["byPriority"]["9"], 1, "{s}");
    assert_eq!(s["pending"]["byPriority"]["5"], 2, "{s}");
    let locks = s["locks"].as_array().unwrap();
    let alice = locks
        .iter()
        .find(|l| l["kind"] == "key" && l["name"] == "alice")
        .unwrap_or_else(|| panic!("no key lock for alice: {s}"));
    assert_eq!(alice["alive"], true);
    assert_eq!(alice["holderPid"], ws[0].pid);
    assert!(
        alice["acquiredAt"].is_string() && alice["host"].is_string(),
        "{alice}"
    );
    assert!(
        locks
            .iter()
            .any(|l| l["kind"] != "key" && l["alive"] == true),
        "no run-slot lock: {s}"
    );
    let human = assert_cmd::Command::new(crate::harness::bin("conductor"))
        .args(["status"])
        .env("CONDUCTOR_HOME", t.path())
        .env("COLUMNS", "80")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    for want in [
        "running 1/2",
        "pending 3 (p9:1 p5:2)",
        "alice running +1 waiting",
        "bob 1 waiting",
    ] {
        assert!(human.contains(want), "{want:?} missing:\n{human}");
    }
    assert!(
        human.lines().all(|l| l.chars().count() <= 80),
        "wider than 80:\n{human}"
    );

    // Cancel a pending task: gone from the queue, answered `cancelled`.
    let r = cli(&t, &["queue", "cancel", "q3"], 0);
    assert!(r.stdout.contains("cancelled task q3"), "{}", r.stdout);
    let c = q
        .read_result(&TaskId::from("q3"))
        .unwrap()
        .expect("a result for q3");
    assert_eq!(c.outcome, Some(Outcome::Cancelled), "{c:?}");
    assert!(!c.success);
    let v = cli_json(&t, &["queue", "--json"]);
    let ids: Vec<&str> = v["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["q2", "q1"], "{v}");
    // Unknown: exit 2 (as `cancel nosuch`: the same verb), nothing written.
    let r = cli(&t, &["queue", "cancel", "nosuch"], 2);
    assert!(r.stderr.contains("nosuch"), "{}", r.stderr);
    assert!(q.read_result(&TaskId::from("nosuch")).unwrap().is_none());

    // Cancel the running one: its worker stops it; the rest then run.
    let r = cli(&t, &["queue", "cancel", "hold"], 0);
    assert!(r.stdout.contains("cancel requested"), "{}", r.stdout);
    let held = result_of(&q, "hold", &ws);
    assert_eq!(held.outcome, Some(Outcome::Cancelled), "{held:?}");
    assert!(result_of(&q, "q1", &ws).success);
    assert!(result_of(&q, "q2", &ws).success);
    assert!(cli(&t, &["queue"], 0).stdout.contains("empty"));

    // Retry a finished task: a new id, back through the queue.
    let r = cli(&t, &["queue", "retry", "q1"], 0);
    assert_eq!(r.stdout, "q1-r1\n");
    let again = result_of(&q, "q1-r1", &ws);
    assert!(again.success && again.output == "done q1-r1\n", "{again:?}");
    let r = cli(&t, &["queue", "retry", "q1-r1", "--wait"], 0);
    assert_eq!(r.stdout, "done q1-r2\n");
    cli(&t, &["queue", "retry", "never-ran"], 2);
    drop(ws);
    assert_nothing_left(t.path());
}

// ------------------------------------------------------------------ unique task ids

const FAKE: &[u8] = br#"{"id":"Q1","prompt":"FAKE RESULT","origin":"queue"}"#;

/// Issue 10.2, as reported: a task written into an inbox claiming `"origin":"queue"`
/// must not answer a queued task of the same id. Its id is worker 0's now, so the
/// submit is refused naming worker 0, and the queue never shows the fake's output.
#[test]
fn an_inbox_task_posing_as_queued_cannot_answer_a_later_submit_of_its_id() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    let q = Queue::new(t.client.root().clone());
    fs::write(t.client.worker(Slot(0)).task(), FAKE).unwrap();
    let fake = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("Q1"), BOUND)
        .unwrap_or_else(|e| panic!("{e}\n{}", w.stderr()));
    assert_eq!(fake.output, "FAKE RESULT");

    let r = cli(&t, &["submit", "--id", "Q1", "REAL PROMPT", "--wait"], 2);
    assert!(!r.stdout.contains("FAKE RESULT"), "{}", r.stdout);
    assert!(
        r.stderr.contains("worker 0"),
        "names where Q1 went: {}",
        r.stderr
    );
    let err = q
        .submit(&Task::new("REAL PROMPT").with_id("Q1"))
        .unwrap_err();
    assert!(
        matches!(&err, conductor::Error::IdTaken { place, .. } if place == "worker 0"),
        "{err:?}"
    );
    assert_eq!(q.read_result(&TaskId::from("Q1")).unwrap(), None);
    assert!(q.pending().unwrap().is_empty());
    assert_eq!(
        fs::read_dir(t.path().join("queue/rejected"))
            .unwrap()
            .count(),
        0,
        "nothing was accepted, so nothing was rejected"
    );
}

/// The other order: the queued task holds the id first, so the inbox impostor is
/// rejected (answered in result.json, with a reason naming the queue) and the real
/// task's result is the one the queue shows.
#[test]
fn an_inbox_task_reusing_a_queued_id_is_rejected_and_the_queued_one_runs() {
    let t = TestRoot::new();
    let q = Queue::new(t.client.root().clone());
    submit(&q, &Task::new("REAL PROMPT").with_id("Q1"));
    let w0 = t.client.create_worker(Slot(0)).unwrap();
    fs::write(w0.task(), FAKE).unwrap();
    let w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    let ws = [w];
    assert_eq!(result_of(&q, "Q1", &ws).output, "REAL PROMPT");
    let reasons: Vec<String> = fs::read_dir(w0.rejected_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".reason"))
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}\n{}", worker_stderrs(&ws));
    assert!(reasons[0].contains("the shared queue"), "{reasons:?}");
    assert_eq!(
        t.client
            .read_result_for(Slot(0), &TaskId::from("Q1"))
            .unwrap()
            .unwrap()
            .output,
        "REAL PROMPT",
        "the kept result is the task that ran"
    );
}

/// A result is linked into queue/results only for the queue's own id, and replaces
/// a file there only then.
#[test]
fn a_queue_result_is_published_only_for_an_id_the_queue_owns() {
    use conductor::ids::{self, Place};
    use conductor::queue::publish_queue_result;
    let t = TestRoot::new();
    let root = t.client.root();
    let kept = t.dir.path().join("kept.json");
    fs::write(&kept, "{}").unwrap();
    let dest = root.queue_results().join("mine.json");

    ids::reserve(root, &TaskId::from("mine"), Place::Worker(Slot(3))).unwrap();
    let err = publish_queue_result(root, &kept, &TaskId::from("mine")).unwrap_err();
    assert!(err.to_string().contains("worker 3"), "{err}");
    assert!(!dest.exists());

    let ours = TaskId::from("ours");
    ids::reserve(root, &ours, Place::Queue).unwrap();
    let stale = root.queue_results().join("ours.json");
    fs::write(&stale, "stale").unwrap();
    publish_queue_result(root, &kept, &ours).unwrap();
    assert_eq!(
        fs::read_to_string(&stale).unwrap(),
        "{}",
        "replaced: it was ours"
    );
    publish_queue_result(root, &kept, &ours).expect("already published: no-op");
}

/// Files the tool creates are private whatever the umask (queue/ids/<id> was not).
#[test]
fn submit_under_umask_022_creates_only_private_files() {
    let t = TestRoot::new();
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"umask 022 && exec "$0" submit --id U1 hi"#)
        .arg(bin("conductor"))
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut files = 0;
    let mut stack = vec![t.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
            if meta.is_dir() {
                assert_eq!(mode, 0o700, "{}", e.path().display());
                stack.push(e.path());
            } else {
                files += 1;
                assert_eq!(mode, 0o600, "{} is {mode:o}", e.path().display());
            }
        }
    }
    assert!(files >= 2, "the pending task and its id entry");
}

/// Issue 13: `maxRunning: 0` made every task wait silently; now the config is refused
/// when read, naming the file and the field.
#[test]
fn a_config_with_max_running_zero_is_refused_naming_file_and_field() {
    let t = TestRoot::new();
    write_config(&t, r#"{"maxRunning": 0}"#);
    let q = Queue::new(t.client.root().clone());
    let err = q
        .submit(&Task::new("p").with_id("z"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config.json") && err.contains("maxRunning 0"),
        "{err}"
    );
    let r = cli(&t, &["submit", "--id", "z", "p"], 1);
    assert!(r.stderr.contains("config.json"), "{}", r.stderr);
    assert!(
        r.stderr.contains("maxRunning 0 is out of range"),
        "{}",
        r.stderr
    );
}
