//! A client written for the original Claude Conductor, played byte for byte against
//! our worker: plain (non-atomic) writes of task.json, polling status.json, reading
//! result.json's output/success/error.

use std::fs;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{bin, wait_until, TestRoot};

const BOUND: Duration = Duration::from_secs(30);

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `JSON.parse(fs.readFileSync(p))` would give, or None while missing/unparseable.
fn read_json(p: &std::path::Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(p).ok()?).ok()
}

#[test]
fn an_original_client_runs_twenty_tasks_unchanged() {
    let t = TestRoot::new();
    let dir = t.path().join("workers").join("0");
    let _worker = Killed(
        Command::new(bin("conductor-worker"))
            .args(["0", t.dir.path().to_str().unwrap(), "--agent", "rev"])
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until(BOUND, "worker idle", || {
        read_json(&dir.join("status.json"))
            .is_some_and(|s| s["status"] == "idle" && s["workerPid"].is_number())
    });
    for i in 0..20u64 {
        let id = 1_705_234_567_890 + i; // Date.now()
                                        // writeTask: JSON.stringify(task, null, 2) written with writeFileSync (truncate,
                                        // then write) — here in two writes, as a slow disk or a big prompt would.
        let task = json!({
            "id": id,
            "prompt": format!("task number {i}"),
            "context": {"step": i, "repo": "demo"},
            "timestamp": "2024-01-14T12:34:56.789Z",
        });
        let text = serde_json::to_string_pretty(&task).unwrap();
        let (a, b) = text.as_bytes().split_at(text.len() / 3);
        let mut f = fs::File::create(dir.join("task.json")).unwrap();
        f.write_all(a).unwrap();
        f.flush().unwrap();
        f.write_all(b).unwrap();
        drop(f);
        // readStatus until this task is done.
        let mut status = Value::Null;
        wait_until(BOUND, &format!("status done for task {id}"), || {
            status = read_json(&dir.join("status.json")).unwrap_or(Value::Null);
            (status["status"] == "done" || status["status"] == "error")
                && status["taskId"] == json!(id)
        });
        assert_eq!(status["status"], "done", "{status}");
        assert!(status["timestamp"].is_string());
        // readResult
        let result = read_json(&dir.join("result.json")).expect("result.json");
        assert_eq!(
            result["taskId"],
            json!(id),
            "numeric ids come back as numbers"
        );
        let expected: String = format!("task number {i}").chars().rev().collect();
        assert_eq!(result["output"].as_str().unwrap().trim_end(), expected);
        assert_eq!(result["success"], true);
        assert_eq!(result["error"], Value::Null);
    }
    assert_eq!(fs::read_dir(dir.join("rejected")).unwrap().count(), 0);
    assert_eq!(fs::read_dir(dir.join("results")).unwrap().count(), 20);
}
