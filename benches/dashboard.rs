//! The dashboard's refresh: one `Reader::snapshot` of a root with 8 slots and many
//! finished tasks, the first (every result parsed) and the following ones (cached).
//!
//! `cargo bench --bench dashboard` (options after `--`: `--tasks N`, default 10000;
//! `--runs N`, default 200; `--base DIR` for where the temporary root goes). Results are
//! written directly, as workers leave them, a quarter linked into `queue/results/` too.

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use conductor::cli::dashboard::model::Reader;
use conductor::protocol::rfc3339;
use conductor::{Client, Root, Slot, Task, TaskId};

const SLOTS: u32 = 8;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(name: &str, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name:<40} n={:<5} p50={:>8.3} ms  p90={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        samples.len(),
        percentile(&samples, 0.50),
        percentile(&samples, 0.90),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

fn build_root(client: &Client, n: usize) {
    let root = client.root();
    for s in 0..SLOTS {
        client.create_worker(Slot(s)).unwrap();
    }
    let now = SystemTime::now();
    for i in 0..n {
        let id = TaskId::Text(format!("task-{i:06}"));
        let w = root.worker(Slot(i as u32 % SLOTS));
        let task =
            Task::new(format!("review module {i} and report what could break")).with_id(id.clone());
        fs::write(w.task_record(&id), serde_json::to_vec(&task).unwrap()).unwrap();
        let finished = rfc3339(now - Duration::from_secs((n - i) as u64));
        let result = serde_json::json!({
            "schema": 1, "taskId": id, "output": format!("module {i} looks fine"),
            "success": i % 10 != 0, "error": null, "timestamp": finished,
            "outcome": if i % 10 == 0 { "failure" } else { "success" },
            "finishedAt": finished, "durationMs": 1000 + i, "costUsd": 0.01,
        });
        let kept = w.result_for(&id);
        fs::write(&kept, serde_json::to_vec(&result).unwrap()).unwrap();
        if i % 4 == 0 {
            fs::hard_link(&kept, root.queue_results().join(format!("{id}.json"))).unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = flag("--tasks")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let runs: usize = flag("--runs").and_then(|v| v.parse().ok()).unwrap_or(200);
    let base = flag("--base")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).unwrap();
    let root = Root::new(dir.path().join("root"));
    let client = Client::new(root.clone());
    client.init_queue().unwrap();
    let built = Instant::now();
    build_root(&client, n);
    println!(
        "conductor dashboard benchmark: {n} finished tasks over {SLOTS} slots under {} (built in {:.1}s)",
        base.display(),
        built.elapsed().as_secs_f64()
    );
    let cold: Vec<f64> = (0..runs.clamp(1, 10))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(Reader::default().snapshot(&root));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    summary("first snapshot (every result parsed)", cold);
    let mut reader = Reader::default();
    let snap = reader.snapshot(&root);
    assert_eq!(snap.totals.done + snap.totals.failed, n as u32);
    let warm: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(reader.snapshot(&root));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    summary("refresh (results cached)", warm);
}
