//! The MCP server's costs: start to an answered `initialize`, a `submit` tool call against `conductor submit` and the library's `Queue::submit`, `status` calls, a submit → result round trip, and what many pending `wait`s hold.
//!
//! `cargo bench --bench mcp` (options after `--`: `--starts N`, default 50; `--submits N`,
//! default 300; `--statuses N`, default 1000; `--trips N`, default 100; `--waits N`,
//! default 200, each with `--wait-secs S`, default 50; `--only NAME` to run one part:
//! start, submit, status, trip, waits; `--base DIR` for where the temporary root goes).
//! Except for the round trip (one `conductor-worker` whose agent is `true`), no worker
//! runs: tasks only queue up, so this measures the front ends, not the agents. The MCP
//! client here is a plain pipe writing JSON lines, so no client library's cost is counted.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use std::time::Duration;

use conductor::gate::Gate;
use conductor::queue::Queue;
use conductor::{Client, Root, Slot, Status, Task, WorkerState};

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(name: &str, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name:<44} n={:<5} p50={:>8.3} ms  p90={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        samples.len(),
        percentile(&samples, 0.50),
        percentile(&samples, 0.90),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// A running `conductor mcp` and its pipes.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn spawn(root: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_conductor"))
            .arg("mcp")
            .arg("--root")
            .arg(root)
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_DEPTH")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start conductor mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
        }
    }

    /// Send one line; with `answer`, read lines until the one answering it.
    fn say(&mut self, line: &str, answer: Option<u64>) -> serde_json::Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let Some(id) = answer else {
            return serde_json::Value::Null;
        };
        let mut buf = String::new();
        loop {
            buf.clear();
            assert!(
                self.stdout.read_line(&mut buf).unwrap() > 0,
                "server closed"
            );
            let v: serde_json::Value = serde_json::from_str(&buf).expect("JSON-RPC line");
            if v["id"] == id {
                return v;
            }
        }
    }

    fn handshake(&mut self) {
        let r = self.say(INIT, Some(0));
        assert!(r["result"]["protocolVersion"].is_string(), "{r}");
        self.say(INITIALIZED, None);
    }

    fn stop(mut self) {
        drop(self.stdin);
        self.child.wait().unwrap();
    }
}

/// A `tools/call` line.
fn tool_call(id: u64, name: &str, args: serde_json::Value) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": args},
    })
    .to_string()
}

fn submit_call(id: u64) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "submit", "arguments": {"prompt": format!("review module {id}"), "key": "bench"}},
    })
    .to_string()
}

fn bench_start(root: &Path, runs: usize) {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let mut s = Server::spawn(root);
        s.handshake();
        samples.push(ms(started));
        s.stop();
    }
    summary("mcp: spawn to initialize answered", samples);
}

fn bench_tool_submits(root: &Path, runs: usize) {
    let mut s = Server::spawn(root);
    s.handshake();
    let mut samples = Vec::with_capacity(runs);
    for i in 1..=runs as u64 {
        let started = Instant::now();
        let r = s.say(&submit_call(i), Some(i));
        samples.push(ms(started));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    summary("mcp: submit tool call (server running)", samples);
    s.stop();
}

fn bench_cli_submits(root: &Path, runs: usize) {
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_conductor"))
            .args(["submit", "--key", "bench", "--root"])
            .arg(root)
            .arg(format!("review module {i}"))
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_DEPTH")
            .stderr(Stdio::null())
            .output()
            .unwrap();
        samples.push(ms(started));
        assert!(out.status.success());
    }
    summary("cli: conductor submit (process per task)", samples);
}

fn bench_library_submits(root: &Path, runs: usize) {
    let queue = Queue::new(Root::new(root));
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let task = Task::new(format!("review module {i}"));
        let started = Instant::now();
        queue.submit(&task).unwrap();
        samples.push(ms(started));
    }
    summary("library: Queue::submit (in process)", samples);
}

fn bench_status(root: &Path, runs: usize) {
    let mut s = Server::spawn(root);
    s.handshake();
    let mut samples = Vec::with_capacity(runs);
    for i in 1..=runs as u64 {
        let started = Instant::now();
        let r = s.say(&tool_call(i, "status", serde_json::json!({})), Some(i));
        samples.push(ms(started));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    summary("mcp: status tool call", samples);
    s.stop();
}

/// A worker on slot 0 whose agent is `true`; killed on drop.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(root: &Path) -> Worker {
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_conductor-worker"))
        .arg("0")
        .arg(&project)
        .args(["--agent", "true", "-q"])
        .env("CONDUCTOR_HOME", root)
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("CONDUCTOR_DEPTH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start conductor-worker");
    let pid = child.id();
    let client = Client::new(Root::new(root));
    let deadline = Instant::now() + Duration::from_secs(60);
    // Polled: the worker's own status file is the only sign it is up.
    while !matches!(
        client.read_status(Slot(0)),
        Ok(Some(Status { status: WorkerState::Idle, worker_pid: Some(p), .. })) if p == pid
    ) {
        assert!(Instant::now() < deadline, "the worker did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    Worker(child)
}

/// `submit` with `wait` off, then `wait` for it: the whole round trip an orchestrating
/// agent pays for one task whose agent does nothing.
fn bench_round_trip(root: &Path, runs: usize) {
    let _worker = start_worker(root);
    let mut s = Server::spawn(root);
    s.handshake();
    let mut samples = Vec::with_capacity(runs);
    let mut n = 0;
    for i in 0..runs {
        let started = Instant::now();
        n += 1;
        let prompt = format!("trip {i}");
        let r = s.say(
            &tool_call(n, "submit", serde_json::json!({"prompt": prompt})),
            Some(n),
        );
        let id = r["result"]["structuredContent"]["id"].clone();
        assert!(!id.is_null(), "{r}");
        n += 1;
        let r = s.say(
            &tool_call(
                n,
                "wait",
                serde_json::json!({"ids": [id], "timeoutSecs": 50}),
            ),
            Some(n),
        );
        samples.push(ms(started));
        assert_eq!(r["result"]["structuredContent"]["allFinished"], true, "{r}");
    }
    summary("mcp: submit → wait → result (agent `true`)", samples);
    let mut samples = Vec::with_capacity(runs);
    for i in 0..runs {
        let started = Instant::now();
        n += 1;
        let prompt = format!("trip with wait {i}");
        let r = s.say(
            &tool_call(
                n,
                "submit",
                serde_json::json!({"prompt": prompt, "wait": true, "waitSecs": 50}),
            ),
            Some(n),
        );
        samples.push(ms(started));
        let v = &r["result"]["structuredContent"];
        assert_eq!(v["wait"]["allFinished"], true, "{r}");
    }
    summary("mcp: submit with wait → result (agent `true`)", samples);
    s.stop();
}

/// What process `pid` holds: resident memory (KiB), threads, inotify instances.
fn holdings(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let inotify = conductor::procfs::inotify_instances(pid);
    (field("VmRSS:"), field("Threads:"), inotify)
}

/// Ask the server (its `status` tool, as request `id`) how many `wait` calls it has
/// pending and how many subscriptions its shared watcher holds, until `done` says yes
/// (at most `bound`); the last answer and how long it took.
fn server_waits(
    s: &mut Server,
    id: &mut u64,
    bound: Duration,
    done: impl Fn(u64, u64) -> bool,
) -> ((u64, u64), Duration) {
    let started = Instant::now();
    loop {
        *id += 1;
        let r = s.say(&tool_call(*id, "status", serde_json::json!({})), Some(*id));
        let server = &r["result"]["structuredContent"]["server"];
        let now = (
            server["pendingWaits"].as_u64().expect("pendingWaits"),
            server["watcherSubscriptions"]
                .as_u64()
                .expect("watcherSubscriptions"),
        );
        if done(now.0, now.1) || started.elapsed() >= bound {
            return (now, started.elapsed());
        }
    }
}

/// `n` pending `wait` calls on one server (a gate held on slot 0 stands for a live
/// worker, so no wait ends early), then every one cancelled: what the server holds.
/// The server itself says when all `n` are pending and when all are gone.
fn bench_waits(root: &Path, n: u64, secs: f64) {
    let client = Client::new(Root::new(root));
    client.root().worker(Slot(0)).create_files().unwrap();
    let _gate = Gate::acquire(&client.root().worker(Slot(0)).worker_gate(), "bench").unwrap();
    let mut s = Server::spawn(root);
    s.handshake();
    let pid = s.child.id();
    let idle = holdings(pid);
    let mut ids = Vec::new();
    for i in 1..=n {
        let r = s.say(&submit_call(i), Some(i));
        ids.push(r["result"]["structuredContent"]["id"].clone());
    }
    let base = 1_000_000;
    for (i, id) in ids.iter().enumerate() {
        let line = tool_call(
            base + i as u64,
            "wait",
            serde_json::json!({"ids": [id], "timeoutSecs": secs}),
        );
        writeln!(s.stdin, "{line}").unwrap();
    }
    s.stdin.flush().unwrap();
    let mut asked = 2 * base;
    // Each pending wait (no progress token) holds one subscription on the hub.
    let ((pending, subs), _) = server_waits(&mut s, &mut asked, Duration::from_secs(30), |p, w| {
        p == n && w >= n
    });
    assert_eq!((pending, subs), (n, n), "every wait pending and subscribed");
    let held = holdings(pid);
    let sent = Instant::now();
    for i in 0..n {
        let line = serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": base + i, "reason": "bench"},
        });
        writeln!(s.stdin, "{line}").unwrap();
    }
    s.stdin.flush().unwrap();
    let ((left, left_subs), _) = server_waits(
        &mut s,
        &mut asked,
        Duration::from_secs_f64(secs + 10.0),
        |p, w| p == 0 && w == 0,
    );
    let took = sent.elapsed();
    assert_eq!((left, left_subs), (0, 0), "every wait gone");
    let freed = holdings(pid);
    let show = |what: &str, (rss, threads, ino): (u64, u64, usize)| {
        println!(
            "mcp: {what:<38} rss={:>7} KiB  threads={threads:>4}  inotify={ino:>4}",
            rss
        );
    };
    show("idle server", idle);
    show(&format!("{n} pending waits ({subs} watcher subs)"), held);
    show("when every wait was gone", freed);
    println!(
        "mcp: {n} cancelled waits gone (pendingWaits 0, no watcher subscription) {:.1} ms after the cancels were sent",
        took.as_secs_f64() * 1000.0
    );
    s.stop();
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A fresh root under `base`: each measure starts from an empty queue, so none pays
/// for the tasks an earlier one left pending.
fn fresh_root(base: &Path, name: &str) -> PathBuf {
    let root = base.join(name);
    Client::new(Root::new(&root)).init_queue().unwrap();
    root
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let starts = arg(&args, "--starts").map_or(50, |s| s.parse().unwrap());
    let submits = arg(&args, "--submits").map_or(300, |s| s.parse().unwrap());
    let base = arg(&args, "--base").map(PathBuf::from);
    let dir = match &base {
        Some(b) => tempfile::Builder::new()
            .prefix("conductor-bench-")
            .tempdir_in(b),
        None => tempfile::Builder::new()
            .prefix("conductor-bench-")
            .tempdir(),
    }
    .unwrap();
    println!(
        "roots under {} (no workers: tasks only queue up)",
        dir.path().display()
    );
    let statuses = arg(&args, "--statuses").map_or(1000, |s| s.parse().unwrap());
    let trips = arg(&args, "--trips").map_or(100, |s| s.parse().unwrap());
    let waits = arg(&args, "--waits").map_or(200, |s| s.parse().unwrap());
    let wait_secs = arg(&args, "--wait-secs").map_or(50.0, |s| s.parse().unwrap());
    let only = arg(&args, "--only");
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if run("start") {
        bench_start(&fresh_root(dir.path(), "start"), starts);
    }
    if run("submit") {
        bench_tool_submits(&fresh_root(dir.path(), "mcp"), submits);
        bench_cli_submits(&fresh_root(dir.path(), "cli"), submits);
        bench_library_submits(&fresh_root(dir.path(), "lib"), submits);
    }
    if run("status") {
        bench_status(&fresh_root(dir.path(), "status"), statuses);
    }
    if run("trip") {
        bench_round_trip(&fresh_root(dir.path(), "trip"), trips);
    }
    if run("waits") {
        bench_waits(&fresh_root(dir.path(), "waits"), waits, wait_secs);
    }
}
