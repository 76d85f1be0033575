//! The task-listing benchmark: `conductor tasks` (default page) on a root with many finished tasks.
//!
//! `cargo bench --bench tasks` (options after `--`: `--tasks N`, default 10000; `--runs N`,
//! default 200; `--base DIR` for where the temporary root goes). The root is written
//! directly — registry entries, results, task records, as workers leave them, a quarter
//! of them through the queue — so this measures listing, not running.

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use conductor::tasks::{ListOptions, TaskState};
use conductor::{Client, Outcome, Root, Slot, Task, TaskId, TaskResult};

const SLOTS: u32 = 4;

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

fn set_mtime(path: &std::path::Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(t))
        .unwrap();
}

/// `n` finished tasks, one second apart, spread over the slots; every fourth queued.
fn build_root(client: &Client, n: usize) {
    let root = client.root();
    for s in 0..SLOTS {
        client.create_worker(Slot(s)).unwrap();
    }
    let start = SystemTime::now() - Duration::from_secs(n as u64 + 60);
    for i in 0..n {
        let id = TaskId::Text(format!("task-{i:06}"));
        let slot = Slot(i as u32 % SLOTS);
        let queued = i % 4 == 0;
        let w = root.worker(slot);
        let mut task =
            Task::new(format!("review module {i} and report what could break")).with_id(id.clone());
        if queued {
            task.origin = Some("queue".into());
            task.key = Some(format!("user{}", i % 7));
        }
        fs::write(w.task_record(&id), serde_json::to_vec(&task).unwrap()).unwrap();
        let mut r = TaskResult::failed(id.clone(), Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.output = format!("module {i} looks fine");
        r.duration_ms = Some(1000 + i as u64);
        r.attempt = Some(1);
        r.worker = Some(slot.0);
        r.cost_usd = Some(0.01);
        let kept = w.result_for(&id);
        fs::write(&kept, serde_json::to_vec(&r).unwrap()).unwrap();
        let place = if queued {
            fs::hard_link(&kept, root.queue_results().join(format!("{id}.json"))).unwrap();
            "queue".to_string()
        } else {
            format!("workers/{slot}")
        };
        let entry = root.id_entry(&id);
        fs::write(&entry, format!("{{\"schema\":1,\"place\":\"{place}\"}}")).unwrap();
        set_mtime(&entry, start + Duration::from_secs(i as u64));
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
    let client = Client::new(Root::new(dir.path().join("root")));
    client.init_queue().unwrap();
    let built = Instant::now();
    build_root(&client, n);
    println!(
        "conductor tasks benchmark: {n} finished tasks over {SLOTS} slots under {} (built in {:.1}s)",
        base.display(),
        built.elapsed().as_secs_f64()
    );

    let page = ListOptions {
        limit: Some(50),
        ..ListOptions::default()
    };
    let newest = client.list_tasks(&page).unwrap();
    assert_eq!(newest.len(), 50);
    assert_eq!(newest[0].id, TaskId::Text(format!("task-{:06}", n - 1)));
    let time = |opts: &ListOptions| {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(client.list_tasks(opts).unwrap());
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect::<Vec<f64>>()
    };
    summary("list_tasks, default page (50)", time(&page));
    let filtered = ListOptions {
        key: Some("user3".into()),
        ..page.clone()
    };
    summary("list_tasks --key (1 in 28 match)", time(&filtered));
    let none = ListOptions {
        states: vec![TaskState::Running],
        ..page.clone()
    };
    summary("list_tasks --state running (no match)", time(&none));

    let exe = env!("CARGO_BIN_EXE_conductor");
    let cli: Vec<f64> = (0..runs.min(100))
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(exe)
                .args(["tasks", "--root"])
                .arg(client.root().path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    summary("`conductor tasks` process, default page", cli);
}
