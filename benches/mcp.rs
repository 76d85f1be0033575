//! The MCP server's costs: start to an answered `initialize`, and a `submit` tool call against `conductor submit` and the library's `Queue::submit`.
//!
//! `cargo bench --bench mcp` (options after `--`: `--starts N`, default 50; `--submits N`,
//! default 300; `--base DIR` for where the temporary root goes). No worker runs: tasks
//! only queue up, so this measures the front ends, not the agents. The MCP client here is
//! a plain pipe writing JSON lines, so no client library's cost is counted.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use conductor::queue::Queue;
use conductor::{Client, Root, Task};

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
    bench_start(&fresh_root(dir.path(), "start"), starts);
    bench_tool_submits(&fresh_root(dir.path(), "mcp"), submits);
    bench_cli_submits(&fresh_root(dir.path(), "cli"), submits);
    bench_library_submits(&fresh_root(dir.path(), "lib"), submits);
}
