//! A task's result whose commit is owed to the slot's next claim (issue 39.1): on a
//! journaled ext4 the claim of the next task commits the last result with it, and a
//! worker killed between the two — the result published, its commit not yet made, the
//! next task renamed into `running.json` — loses nothing and runs nothing twice.

use std::path::Path;
use std::time::Duration;

use conductor::{Client, Outcome, Root, Slot, Task, TaskId};

use nix::sys::signal::Signal;

use crate::harness::{wait_until, TestRoot, WorkerProc};
use crate::journaled_commit::Ext4;
use crate::scale::Many;

/// The state letter of process `pid` (`T`: stopped), from `/proc/<pid>/stat`.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The prompts the agent saw, one line each (a prompt run twice is there twice).
fn runs(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_worker_killed_while_its_last_result_is_owed_to_the_next_claim_loses_and_doubles_nothing() {
    let Some(fs) = Ext4::made_or_skipped() else {
        return;
    };
    let dir = tempfile::tempdir_in(&fs.mount).unwrap();
    let client = Client::new(Root::new(dir.path().join("root")));
    client.init_queue().unwrap();
    let t = TestRoot { dir, client };
    let log = t.dir.path().join("runs.log");
    let go = t.dir.path().join("go");
    // Notes its prompt; the first waits until the test lets it end, so that the second
    // task is in the inbox when the first ends (its claim then pays the first's commit).
    let agent = format!(
        "sh -c 'p=$(cat); echo \"$p\" >> {log}; if [ \"$p\" = first ]; then \
         until [ -e {go} ]; do sleep 0.01; done; fi'",
        log = log.display(),
        go = go.display()
    );
    let stop_owed = [("CONDUCTOR_DEBUG_STOP_OWED", "1")];
    let mut w = WorkerProc::start(&t, Slot(0), &agent, &[], &stop_owed);
    let paths = t.client.root().worker(Slot(0));
    t.client
        .write_task(Slot(0), &Task::new("first").with_id("first"))
        .unwrap();
    wait_until(Duration::from_secs(60), "the first agent to start", || {
        runs(&log).contains(&"first".to_string())
    });
    t.client
        .write_task(Slot(0), &Task::new("second").with_id("second"))
        .unwrap();
    std::fs::write(&go, b"").unwrap();
    // The first's result is out, its commit owed; the second is claimed, its commit
    // (which pays the first's) not made: the worker stopped itself there.
    wait_until(
        Duration::from_secs(60),
        "the worker to stop before the claim's commit",
        || state_of(w.pid) == Some('T'),
    );
    let first = TaskId::from("first");
    assert!(
        paths.result_for(&first).exists(),
        "the first result is published before the commit it owes"
    );
    let in_hand = std::fs::read_to_string(paths.running()).unwrap();
    assert!(in_hand.contains("second"), "running.json: {in_hand}");
    w.crash();
    let _w2 = WorkerProc::start(&t, Slot(0), &agent, &[], &[]);
    let second = t
        .client
        .wait_for_result(Slot(0), &TaskId::from("second"), Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        second.outcome,
        Some(Outcome::Interrupted),
        "claimed, never started: {second:?}"
    );
    let first = t
        .client
        .wait_for_result(Slot(0), &first, Duration::from_secs(60))
        .unwrap();
    assert!(first.success, "{first:?}");
    assert_eq!(
        runs(&log),
        vec!["first".to_string()],
        "each agent ran at most once, the second never"
    );
    assert!(!paths.running().exists());
}

/// A many-slot worker stopped while one of its slots lingers with its last result's
/// commit owed pays that commit and starts the result's callback before it exits (it
/// dropped the slot, debt and all, and the callback never ran).
#[test]
fn a_many_slot_worker_stopped_while_a_result_is_owed_still_runs_its_callback() {
    let Some(fs) = Ext4::made_or_skipped() else {
        return;
    };
    let dir = tempfile::tempdir_in(&fs.mount).unwrap();
    let client = Client::new(Root::new(dir.path().join("root")));
    client.init_queue().unwrap();
    let t = TestRoot { dir, client };
    let told = t.dir.path().join("told");
    let config = t.client.root().config_file();
    let mut json: serde_json::Value = std::fs::read_to_string(&config).map_or_else(
        |_| serde_json::json!({}),
        |s| serde_json::from_str(&s).unwrap(),
    );
    json["callback"] = format!("echo \"$CONDUCTOR_TASK_ID\" >> {}", told.display()).into();
    std::fs::write(&config, json.to_string()).unwrap();
    // The slot lingers far longer than the test: only the stop can pay the debt.
    let linger = [("CONDUCTOR_DEBUG_LINGER_MS", "600000")];
    let mut w = Many::start(&t, &[Slot(0), Slot(1)], "cat", &linger);
    let id = TaskId::from("owed1");
    t.client
        .write_task(Slot(0), &Task::new("hi").with_id("owed1"))
        .unwrap();
    let paths = t.client.root().worker(Slot(0));
    wait_until(Duration::from_secs(60), "the result", || {
        paths.result_for(&id).exists()
    });
    assert!(!told.exists(), "told before its commit was made");
    w.signal(Signal::SIGTERM);
    assert!(w.wait_exit().success(), "{}", w.stderr());
    wait_until(
        Duration::from_secs(30),
        "the owed result's callback",
        || std::fs::read_to_string(&told).is_ok_and(|s| s.lines().any(|l| l == "owed1")),
    );
}
