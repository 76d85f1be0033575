//! `conductor submit --batch -f FILE`: many tasks from one process.

use std::fs;

use conductor::{Slot, Task, TaskId};
use serde_json::Value;

use crate::harness::{agent, run_conductor, TestRoot, WorkerProc};

/// The task as slot 0 ran it (`workers/0/tasks/<id>.json`).
fn record(t: &TestRoot, id: &str) -> Task {
    let path = t.path().join(format!("workers/0/tasks/{id}.json"));
    serde_json::from_slice(&fs::read(&path).unwrap()).unwrap()
}

fn worker(t: &TestRoot) -> WorkerProc {
    let cmd = agent("record.sh").display().to_string();
    WorkerProc::start(t, Slot(0), &cmd, &[], &[])
}

#[test]
fn a_batch_submits_every_line_in_order_and_waits_for_all() {
    let t = TestRoot::new();
    let file = t.dir.path().join("tasks.txt");
    fs::write(
        &file,
        "# one task a line\nfirst prompt\n\n{\"prompt\": \"second\", \"id\": \"b2\", \"key\": \"k2\"}\n\
         {\"prompt\": \"third\", \"after\": [\"b2\"]}\n",
    )
    .unwrap();
    let _w = worker(&t);
    let r = run_conductor(
        &t,
        &[
            "submit",
            "--batch",
            "-f",
            file.to_str().unwrap(),
            "--priority",
            "7",
            "--wait",
            "--json",
        ],
        0,
    );
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON Lines"))
        .collect();
    // Three id lines (with the line of the file each came from), then three results.
    assert_eq!(lines.len(), 6, "{}", r.stdout);
    let numbers: Vec<u64> = lines[..3]
        .iter()
        .map(|l| l["line"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 4, 5]);
    assert_eq!(lines[1]["id"], "b2");
    let outputs: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, ["first prompt", "second", "third"]);
    // The options applied to every line; a JSON line's own fields were kept.
    let third = record(&t, lines[2]["id"].as_str().unwrap());
    assert_eq!(third.priority, Some(7));
    assert_eq!(third.after, vec![TaskId::from("b2")]);
    let second = record(&t, "b2");
    assert_eq!(
        (second.key.as_deref(), second.priority),
        (Some("k2"), Some(7))
    );
}

#[test]
fn a_bad_line_refuses_the_whole_batch_naming_the_line() {
    let t = TestRoot::new();
    let file = t.dir.path().join("tasks.txt");
    fs::write(
        &file,
        "good prompt\n{\"prompt\": \"x\", \"priority\": 12}\n",
    )
    .unwrap();
    let r = run_conductor(&t, &["submit", "--batch", "-f", file.to_str().unwrap()], 2);
    assert!(
        r.stderr.contains("tasks.txt:2:") && r.stderr.contains("priority"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
    fs::write(&file, "{\"key\": \"k\"}\n").unwrap();
    let r = run_conductor(&t, &["submit", "--batch", "-f", file.to_str().unwrap()], 2);
    assert!(
        r.stderr
            .contains("tasks.txt:1: a task line needs a \"prompt\""),
        "{}",
        r.stderr
    );
    // Nothing reached the queue.
    let pending = fs::read_dir(t.path().join("queue/pending")).map_or(0, |d| d.count());
    assert_eq!(pending, 0);
}

#[test]
fn a_batch_reads_stdin() {
    let t = TestRoot::new();
    let out = assert_cmd::Command::new(crate::harness::bin("conductor"))
        .args(["submit", "--batch", "-f", "-"])
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .write_stdin("one\ntwo\n")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(ids.len(), 2);
    for (id, prompt) in ids.iter().zip(["one", "two"]) {
        let pending = fs::read_dir(t.path().join("queue/pending")).unwrap();
        let found = pending.filter_map(|e| {
            let bytes = fs::read(e.unwrap().path()).unwrap();
            serde_json::from_slice::<Task>(&bytes).ok()
        });
        let task = found
            .into_iter()
            .find(|task| task.id.as_ref().map(|i| i.to_string()).as_deref() == Some(id))
            .expect("the task is queued");
        assert_eq!(task.prompt, prompt);
    }
}
