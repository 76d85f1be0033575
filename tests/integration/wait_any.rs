//! `conductor wait --any` (issue 37, item 7): wakes at a task's end, a question waiting for a person, or a daily budget spent, saying which; exit codes 0/1, 5, 1 on --timeout.

use std::fs;
use std::time::Duration;

use conductor::Slot;
use serde_json::{json, Value};

use crate::harness::{agent, run_conductor, wait_until, Bg, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);

/// Whether process `pid` has an inotify watch armed: a `wait --any` has taken its
/// look at the root by then, so what happens next is news to it.
fn armed(pid: u32) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_to_string(fd.path())
            .is_ok_and(|info| info.lines().any(|l| l.starts_with("inotify wd:")))
    })
}

fn waiter(t: &TestRoot, args: &[&str]) -> Bg {
    let w = Bg::spawn(t, args, true);
    wait_until(BOUND, "wait --any to arm its watch", || armed(w.pid()));
    w
}

#[test]
fn wait_any_wakes_for_a_question_already_waiting_and_says_whose() {
    let t = TestRoot::new();
    let w = t.client.worker(Slot(0));
    w.create_files().unwrap();
    let q = json!({"schema": 1, "id": "qa1", "taskId": "asker", "toolName": "Bash",
                   "input": {"command": "make deploy"}, "askedAt": "2026-01-01T00:00:00Z",
                   "deadline": "2099-01-01T00:10:00Z", "pid": 1});
    fs::write(w.dir.join("approval.json"), q.to_string()).unwrap();
    let out = run_conductor(&t, &["wait", "--any", "--timeout", "30s"], 5);
    assert!(
        out.stdout
            .contains("task asker needs approval: Bash: make deploy"),
        "{}",
        out.stdout
    );
    let out = run_conductor(&t, &["wait", "--any", "--json", "--timeout", "30s"], 5);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["event"], "needsApproval", "{v}");
    assert_eq!(v["taskId"], "asker", "{v}");
    assert_eq!(v["slot"], 0, "{v}");
    // Nothing else to wake for, and a bound shorter than nobody's grace: exit 1.
    fs::remove_file(w.dir.join("approval.json")).unwrap();
    let out = run_conductor(&t, &["wait", "--any", "--timeout", "1s"], 1);
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
}

#[test]
fn wait_any_wakes_at_the_next_task_to_finish_then_at_a_spent_budget() {
    let t = TestRoot::new();
    let told = t.dir.path().join("budget.told");
    let config = json!({
        "dailyBudgetUsd": 0.05,
        "budgetCallback": format!("cat > {}", told.display()),
    });
    fs::create_dir_all(t.path()).unwrap();
    fs::write(t.path().join("config.json"), config.to_string()).unwrap();
    let fake = agent("fake-claude-stream").display().to_string();
    let _w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "claude"], &[]);

    // No ids: the first task of the root to finish after the wait began.
    let mut any = waiter(&t, &["wait", "--any", "--timeout", "60s"]);
    run_conductor(&t, &["submit", "one", "--id", "b1"], 0);
    let status = any.wait_exit();
    assert_eq!(status.code(), Some(0), "{}\n{}", any.stdout(), any.stderr());
    assert!(
        any.stdout().starts_with("── task b1 · ok"),
        "{}",
        any.stdout()
    );

    // With an id that waits (its key paused), another task's cost spends the root's
    // budget ($0.0375 x 2 of $0.05): that wakes it, as the event, exit 5.
    run_conductor(&t, &["pause", "--key", "later"], 0);
    run_conductor(&t, &["submit", "held", "--id", "h1", "--key", "later"], 0);
    let mut any = waiter(&t, &["wait", "--any", "h1", "--json", "--timeout", "60s"]);
    run_conductor(&t, &["submit", "two", "--id", "b2"], 0);
    let status = any.wait_exit();
    assert_eq!(status.code(), Some(5), "{}\n{}", any.stdout(), any.stderr());
    let v: Value = serde_json::from_str(&any.stdout()).unwrap();
    assert_eq!(v["event"], "budgetReached", "{v}");
    assert_eq!(v["budget"], "root", "{v}");
    assert_eq!(v["taskId"], "b2", "{v}");
    assert_eq!(v["budgetUsd"], 0.05, "{v}");
    // The budgetCallback hook was told the same event, once.
    wait_until(BOUND, "the budget hook to have run", || {
        fs::read_to_string(&told).is_ok_and(|s| s.ends_with('\n'))
    });
    let hooked: Value = serde_json::from_str(&fs::read_to_string(&told).unwrap()).unwrap();
    assert_eq!(hooked, v);
}

/// A question asked through `slot` at `asked_at`, as the permission tool writes it.
fn ask(t: &TestRoot, slot: u32, id: &str, task: &str, asked_at: &str) {
    let w = t.client.worker(Slot(slot));
    w.create_files().unwrap();
    let q = json!({"schema": 1, "id": id, "taskId": task, "toolName": "Bash",
                   "input": {"command": "make deploy"}, "askedAt": asked_at,
                   "deadline": "2099-01-01T00:10:00Z", "pid": 1});
    fs::write(w.dir.join("approval.json"), q.to_string()).unwrap();
}

/// Issue 38 follow-up: `wait --any` returned at once, every time, while a question
/// waited unanswered, so an orchestrator polling with it spun. `--since` the last
/// event's time wakes it only for news after that: not the same question again, but a
/// new one, and a task that finished after it even before this wait began.
#[test]
fn wait_any_since_the_last_event_wakes_only_for_news_after_it() {
    let t = TestRoot::new();
    let now = || conductor::protocol::now_rfc3339();
    ask(&t, 0, "qs1", "asker", &now());
    // Without --since: the waiting question, at once, every time.
    for _ in 0..2 {
        run_conductor(&t, &["wait", "--any", "--json", "--timeout", "30s"], 5);
    }
    let first = run_conductor(&t, &["wait", "--any", "--json", "--timeout", "30s"], 5);
    let v: Value = serde_json::from_str(&first.stdout).unwrap();
    let cursor = v["askedAt"].as_str().unwrap().to_string();
    // The same question, still waiting, is no news after its own time.
    let out = run_conductor(
        &t,
        &["wait", "--any", "--since", &cursor, "--timeout", "2s"],
        1,
    );
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
    // A new question is, whichever slot asks it.
    let mut any = waiter(
        &t,
        &[
            "wait",
            "--any",
            "--since",
            &cursor,
            "--json",
            "--timeout",
            "60s",
        ],
    );
    ask(&t, 1, "qs2", "second", &now());
    let status = any.wait_exit();
    assert_eq!(status.code(), Some(5), "{}\n{}", any.stdout(), any.stderr());
    let v: Value = serde_json::from_str(&any.stdout()).unwrap();
    assert_eq!(v["taskId"], "second", "{v}");
    // A task that finished after the cursor but before the wait began wakes it too:
    // polling loses nothing between two waits.
    fs::remove_file(t.client.worker(Slot(0)).dir.join("approval.json")).unwrap();
    fs::remove_file(t.client.worker(Slot(1)).dir.join("approval.json")).unwrap();
    let cursor = now();
    let _w = WorkerProc::start(&t, Slot(2), "cat", &[], &[]);
    run_conductor(&t, &["send", "2", "--id", "between", "done meanwhile"], 0);
    run_conductor(&t, &["wait", "between"], 0);
    let out = run_conductor(
        &t,
        &["wait", "--any", "--since", &cursor, "--timeout", "30s"],
        0,
    );
    assert!(
        out.stdout.starts_with("── task between · ok"),
        "{}",
        out.stdout
    );
    let bad = run_conductor(&t, &["wait", "--any", "--since", "yesterday-ish"], 2);
    assert!(bad.stderr.contains("RFC 3339"), "{}", bad.stderr);
}
