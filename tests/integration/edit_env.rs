//! Issue 25 items 11, 12 and 15 through the real binaries: `conductor edit` of a queued
//! task (and its race with a pickup), per-task env and labels, and the root's callback.

use std::fs;
use std::time::Duration;

use conductor::queue::Queue;
use conductor::{Error, Slot, Task, TaskId};
use serde_json::Value;

use crate::harness::{
    agent, run_conductor, run_conductor_env, wait_until, Bg, TestRoot, WorkerProc,
};

const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);

fn submit(t: &TestRoot, task: Task) -> TaskId {
    Queue::new(t.client.root().clone())
        .submit(&task)
        .expect("submit")
}

/// The task as `conductor tasks --json` shows it.
#[track_caller]
fn listed(t: &TestRoot, id: &str) -> Value {
    let r = run_conductor(t, &["tasks", "--json", "--all"], 0);
    let v: Value = serde_json::from_str(&r.stdout).expect("tasks --json");
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {}", r.stdout))
}

/// An agent that prints its prompt and the variable FOO.
const PRINTS_PROMPT_AND_FOO: &str = "sh -c 'p=$(cat); echo \"$p FOO=$FOO\"'";

#[test]
fn a_queued_task_is_edited_by_options_and_in_the_editor_and_refused_once_it_ran() {
    let t = TestRoot::new();
    let id = submit(&t, Task::new("first words").with_id("e1").with_label("old"));
    run_conductor(
        &t,
        &[
            "edit",
            "e1",
            "--prompt",
            "second words",
            "--priority",
            "9",
            "--key",
            "k2",
            "--env",
            "FOO=bar",
            "--label",
            "new",
            "--label",
            "two",
        ],
        0,
    );
    let shown = listed(&t, "e1");
    assert_eq!(shown["state"], "queued");
    assert_eq!(shown["priority"], 9);
    assert_eq!(shown["key"], "k2");
    assert_eq!(shown["labels"], serde_json::json!(["new", "two"]));
    assert_eq!(shown["env"], serde_json::json!({"FOO": "bar"}));
    // One entry, named for the new priority and key.
    let pending: Vec<String> = fs::read_dir(t.client.root().queue_pending())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(
        pending[0].starts_with("0~") && pending[0].ends_with("~k2~e1.json"),
        "{pending:?}"
    );

    // In the editor ($EDITOR is run through the shell, its arguments kept).
    let editor = |cmd: &str| vec![("EDITOR".to_string(), cmd.to_string())];
    run_conductor_env(&t, &["edit", "e1"], &editor("sed -i s/second/third/"), 0);
    // Emptied in the editor: refused, the task unchanged.
    let r = run_conductor_env(&t, &["edit", "e1"], &editor("truncate -s 0"), 2);
    assert!(r.stderr.contains("prompt is empty"), "{}", r.stderr);
    let r = run_conductor(&t, &["edit", "e1", "--prompt", "  "], 2);
    assert!(r.stderr.contains("prompt is empty"), "{}", r.stderr);
    // A cycle through --after is refused.
    submit(&t, Task::new("later").with_id("e2").with_after(["e1"]));
    let r = run_conductor(&t, &["edit", "e1", "--after", "e2"], 2);
    assert!(r.stderr.contains("neither would ever run"), "{}", r.stderr);

    let _w = WorkerProc::start(&t, S0, PRINTS_PROMPT_AND_FOO, &[], &[]);
    let done = t.client.wait_for_task(&id, BOUND).expect("e1 result");
    assert!(done.success, "{done:?}");
    assert_eq!(done.output.trim(), "third words FOO=bar");
    let r = run_conductor(&t, &["edit", "e1", "--prompt", "too late"], 3);
    assert!(r.stderr.contains("it has finished (done)"), "{}", r.stderr);

    // A task in a slot's inbox is not edited, and says why.
    t.client.create_worker(Slot(1)).unwrap();
    t.client
        .write_task(Slot(1), &Task::new("direct").with_id("in1"))
        .unwrap();
    let r = run_conductor(&t, &["edit", "in1", "--prompt", "x"], 3);
    assert!(r.stderr.contains("inbox"), "{}", r.stderr);
}

/// Edits raced against a worker taking the task: each is either wholly applied before
/// the task starts or refused, and every task runs exactly once.
#[test]
fn an_edit_racing_a_pickup_is_whole_or_refused_and_the_task_runs_once() {
    let t = TestRoot::new();
    let log = t.dir.path().join("ran.log");
    let log_s = log.display().to_string();
    let rec = agent("record.sh").display().to_string();
    let _w = WorkerProc::start(&t, S0, &rec, &[], &[("AGENT_LOG", log_s.as_str())]);
    let mut applied = 0;
    for i in 0..30 {
        let id = submit(
            &t,
            Task::new(format!("before-{i}")).with_id(TaskId::Text(format!("race{i}"))),
        );
        let edit = t
            .client
            .edit_task(&id, None, |task| task.prompt = format!("after-{i}"));
        let r = t.client.wait_for_task(&id, BOUND).expect("a result");
        match edit {
            Ok(_) => {
                applied += 1;
                assert_eq!(r.output, format!("after-{i}"), "edit applied, yet: {r:?}");
            }
            Err(Error::NotEditable { reason, .. }) => {
                assert_eq!(
                    r.output,
                    format!("before-{i}"),
                    "edit refused ({reason}), yet: {r:?}"
                );
                assert!(
                    reason.contains("started") || reason.contains("finished"),
                    "{reason}"
                );
            }
            Err(e) => panic!("{id}: {e}"),
        }
    }
    let ran = fs::read_to_string(&log).unwrap();
    for i in 0..30 {
        let times = ran.lines().filter(|l| *l == format!("race{i}")).count();
        assert_eq!(times, 1, "race{i} ran {times} times");
    }
    eprintln!("{applied} of 30 edits came before the pickup");
}

/// The editor is open while a worker takes the task: the edit is refused, naming the
/// file that keeps it, and the task runs as it was.
#[test]
fn a_task_taken_while_the_editor_is_open_keeps_the_edit_in_a_file() {
    let t = TestRoot::new();
    let id = submit(&t, Task::new("as submitted").with_id("ed1"));
    let result = t.client.root().queue_results().join("ed1.json");
    let editor = agent("editor_waits.sh").display().to_string();
    let mut bg = Bg::spawn_env(
        &t,
        &["edit", "ed1"],
        &[
            ("EDITOR", editor.as_str()),
            ("NEW_PROMPT", "as edited"),
            ("WAIT_FOR", result.to_str().unwrap()),
        ],
    );
    // The editor has written its text before the worker starts.
    let edits = t.client.root().queue_dir().join("edits");
    wait_until(BOUND, "the editor to write", || {
        fs::read_dir(&edits).is_ok_and(|d| {
            d.flatten()
                .any(|e| fs::read_to_string(e.path()).is_ok_and(|s| s.contains("as edited")))
        })
    });
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = t.client.wait_for_task(&id, BOUND).expect("ed1 result");
    assert_eq!(r.output, "as submitted");
    let status = bg.wait_exit();
    assert_eq!(status.code(), Some(3), "stderr: {}", bg.stderr());
    let err = bg.stderr();
    assert!(
        err.contains("ed1 started while you edited; your edit is saved in"),
        "{err}"
    );
    let kept = err
        .split("saved in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("a file named");
    assert_eq!(fs::read_to_string(kept).unwrap().trim(), "as edited");
}

#[test]
fn env_reaches_the_agent_and_labels_filter_tasks() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, PRINTS_PROMPT_AND_FOO, &[], &[]);
    let r = run_conductor(
        &t,
        &[
            "submit",
            "--id",
            "v1",
            "--env",
            "FOO=a b=c",
            "--label",
            "team:x",
            "--wait",
            "hi",
        ],
        0,
    );
    assert_eq!(r.stdout.trim(), "hi FOO=a b=c");
    let r = run_conductor(
        &t,
        &[
            "send", "0", "--id", "v2", "--env", "FOO=sent", "--wait", "yo",
        ],
        0,
    );
    assert_eq!(r.stdout.trim(), "yo FOO=sent");
    // run: every task gets them.
    let r = run_conductor(
        &t,
        &[
            "run",
            "-n",
            "2",
            "--agent",
            PRINTS_PROMPT_AND_FOO,
            "--env",
            "FOO=run",
            "p1",
            "p2",
        ],
        0,
    );
    for p in ["p1", "p2"] {
        assert!(r.stdout.contains(&format!("{p} FOO=run")), "{}", r.stdout);
    }
    // Refused: conductor's own names, and no `=`; the message names --env.
    for bad in ["CONDUCTOR_WORKER=3", "NOVALUE", "1X=a"] {
        let r = run_conductor(&t, &["submit", "--env", bad, "x"], 2);
        assert!(r.stderr.contains("--env"), "{bad}: {}", r.stderr);
    }
    let r = run_conductor(&t, &["submit", "--env", "CONDUCTOR_X=1", "x"], 2);
    assert!(r.stderr.contains("reserved"), "{}", r.stderr);
    // Labels: shown, filtered, in --json.
    let r = run_conductor(&t, &["tasks", "--label", "team:x", "--json"], 0);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let ids: Vec<&Value> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["id"])
        .collect();
    assert_eq!(ids, [&Value::from("v1")]);
    assert_eq!(v["tasks"][0]["labels"], serde_json::json!(["team:x"]));
    let r = run_conductor(&t, &["tasks"], 0);
    assert!(
        r.stdout.contains("LABELS") && r.stdout.contains("team:x"),
        "{}",
        r.stdout
    );
    let r = run_conductor(&t, &["tasks", "--label", "nobody"], 0);
    assert!(r.stdout.contains("no tasks match"), "{}", r.stdout);
}

/// Write the root's config.json.
fn config(t: &TestRoot, json: Value) {
    fs::write(t.client.root().config_file(), json.to_string()).unwrap();
}

#[test]
fn the_callback_runs_once_per_ended_task_with_its_id_state_slot_exit_code_and_result() {
    let t = TestRoot::new();
    let log = t.dir.path().join("callbacks.log");
    config(
        &t,
        serde_json::json!({
            "callback": format!(
                "echo \"$CONDUCTOR_TASK_ID $CONDUCTOR_TASK_STATE $CONDUCTOR_SLOT \
                 [$CONDUCTOR_EXIT_CODE] $CONDUCTOR_RESULT\" >> {}; echo said; exit 7",
                log.display()
            ),
        }),
    );
    let agent_cmd = "sh -c 'p=$(cat); [ \"$p\" = fail ] && exit 3; echo ok'";
    let mut w = WorkerProc::start(&t, S0, agent_cmd, &[], &[]);
    let lines = || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for (id, prompt) in [("cb-ok", "fine"), ("cb-fail", "fail"), ("cb-last", "fine")] {
        let id = submit(&t, Task::new(prompt).with_id(id));
        t.client.wait_for_task(&id, BOUND).expect("result");
    }
    // Refused at pickup (the worker does not serve that preset): rejected, no exit code.
    let mut refused = Task::new("x").with_id("cb-rej");
    refused.agent = Some("codex".into());
    let id = t.client.write_task(S0, &refused).unwrap();
    t.client.wait_for_task(&id, BOUND).expect("rejected");
    wait_until(BOUND, "four callbacks", || lines().len() >= 4);
    let results = t.client.root().worker(S0).results_dir();
    let got = lines();
    for (id, state, code) in [
        ("cb-ok", "done", "0"),
        ("cb-fail", "failed", "3"),
        ("cb-last", "done", "0"),
        ("cb-rej", "rejected", ""),
    ] {
        let want = format!(
            "{id} {state} 0 [{code}] {}",
            results.join(format!("{id}.json")).display()
        );
        assert_eq!(
            got.iter().filter(|l| **l == want).count(),
            1,
            "{want:?} once in {got:#?}"
        );
    }
    assert_eq!(got.len(), 4, "{got:#?}");
    // Its failure is logged with its output, and changes nothing in the task.
    let r = t.client.result_of(&TaskId::from("cb-ok")).unwrap().unwrap();
    assert!(r.success, "{r:?}");
    wait_until(BOUND, "the callback's exit logged", || {
        w.stderr()
            .contains("callback for task cb-last (done) exited 7; stdout: said")
    });
    w.signal(nix::sys::signal::Signal::SIGTERM);
    w.wait_exit(BOUND);
}

#[test]
fn a_hanging_callback_is_stopped_at_its_timeout_and_the_worker_goes_on_taking_tasks() {
    let t = TestRoot::new();
    let pids = t.dir.path().join("callback.pids");
    config(
        &t,
        serde_json::json!({
            // The shell and a child in its group, both recorded; neither ends by itself.
            "callback": format!("sleep 1000 & echo \"$$ $!\" >> {}; wait", pids.display()),
            "callbackTimeoutSecs": 4,
        }),
    );
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let first = submit(&t, Task::new("one").with_id("h1"));
    t.client.wait_for_task(&first, BOUND).expect("h1");
    let recorded = || fs::read_to_string(&pids).unwrap_or_default();
    wait_until(BOUND, "the first callback to start", || {
        !recorded().is_empty()
    });
    let first_pids: Vec<i32> = recorded()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // While h1's callback hangs, the worker takes and finishes the next tasks.
    for id in ["h2", "h3"] {
        let id = submit(&t, Task::new("more").with_id(id));
        t.client.wait_for_task(&id, BOUND).expect("result");
    }
    assert!(
        first_pids.iter().any(|p| alive(*p)),
        "h1's callback ended before its timeout ({first_pids:?})"
    );
    // Then its timeout stops it: the shell and its child (the whole group).
    wait_until(BOUND, "h1's callback group to be stopped", || {
        first_pids.iter().all(|p| !alive(*p))
    });
    wait_until(BOUND, "the stop logged", || {
        w.stderr()
            .contains("callback for task h1 (done) ran over its 4s timeout")
    });
    // Every callback is stopped in turn; the worker stops cleanly after.
    wait_until(BOUND, "every callback stopped", || {
        let all: Vec<i32> = recorded()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        all.len() == 6 && all.iter().all(|p| !alive(*p))
    });
    w.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(w.wait_exit(BOUND).success());
}

/// Whether `pid` lives (a zombie counts as gone: only its parent's wait is left).
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn a_callback_still_running_when_its_worker_stops_is_stopped_with_it() {
    let t = TestRoot::new();
    let pids = t.dir.path().join("callback.pids");
    config(
        &t,
        serde_json::json!({
            "callback": format!("sleep 1000 & echo \"$$ $!\" >> {}; wait", pids.display()),
            "callbackTimeoutSecs": 3600,
        }),
    );
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let id = submit(&t, Task::new("one").with_id("s1"));
    t.client.wait_for_task(&id, BOUND).expect("s1");
    let recorded = || fs::read_to_string(&pids).unwrap_or_default();
    wait_until(BOUND, "the callback to start", || {
        recorded().split_whitespace().count() == 2
    });
    let group: Vec<i32> = recorded()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(group.iter().all(|p| alive(*p)), "{group:?}");
    w.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(w.wait_exit(BOUND).success(), "{}", w.stderr());
    wait_until(BOUND, "the callback's group to be gone", || {
        group.iter().all(|p| !alive(*p))
    });
}
