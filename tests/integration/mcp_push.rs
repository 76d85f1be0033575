//! `conductor mcp` under many waits, cancels, progress and subscriptions: a raw JSON-RPC client on a pipe, where the exact messages (ids, notifications, cancels) matter.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use conductor::gate::Gate;
use conductor::Slot;
use serde_json::{json, Value};

use crate::harness::{assert_nothing_left, bin, wait_until, TestRoot};

const BOUND: Duration = Duration::from_secs(60);

/// `conductor mcp` on a pipe, initialized; every line it writes parsed and kept.
pub struct Raw {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Raw {
    pub fn start(t: &TestRoot) -> Raw {
        let mut child = Command::new(bin("conductor"))
            .args(["mcp", "--root"])
            .arg(t.path())
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_DEPTH")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn conductor mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&line))
                });
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let mut raw = Raw {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        };
        raw.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        raw.answer(&json!(0));
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, v: Value) {
        self.send_line(v.to_string().as_bytes());
    }

    pub fn send_line(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Read until a message `pred` accepts has been seen (bounded); return it.
    pub fn expect(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(v) = self.seen.iter().find(|v| pred(v)) {
                return v.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => self.seen.push(v),
                Err(RecvTimeoutError::Timeout) => panic!("no {what} in time; got {:?}", self.seen),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("server gone; no {what}; got {:?}", self.seen)
                }
            }
        }
    }

    /// The answer to request `id`.
    pub fn answer(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.expect(&format!("answer to {id}"), move |v| {
            v["id"] == id && (v.get("result").is_some() || v.get("error").is_some())
        })
    }

    /// Call `tool` as request `id`; its result.
    pub fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        self.answer(&id)["result"].clone()
    }

    /// The `status` tool's `server` part.
    pub fn server_status(&mut self, id: u64) -> Value {
        let r = self.call(json!(id), "status", json!({}));
        r["structuredContent"]["server"].clone()
    }
}

/// Process `pid`'s threads and inotify instances.
fn holdings(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let inotify = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:inotify")
        })
        .count();
    (threads, inotify)
}

#[test]
fn many_pending_waits_share_one_watcher_and_a_cancel_frees_each_at_once() {
    const N: u64 = 60;
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    // Standing in for a live worker, so that no wait ends for want of one.
    let _gate = Gate::acquire(&t.client.root().worker(Slot(0)).worker_gate(), "test").unwrap();
    let mut raw = Raw::start(&t);
    let (idle_threads, _) = holdings(raw.pid());
    let mut ids = Vec::new();
    for i in 0..N {
        let r = raw.call(
            json!(format!("s{i}")),
            "submit",
            json!({"prompt": format!("p{i}")}),
        );
        ids.push(r["structuredContent"]["id"].clone());
    }
    // Half on the queue, as submitted; a few on slot 0's inbox too.
    let sent = raw.call(json!("send"), "send", json!({"slot": 0, "prompt": "inbox"}));
    ids.push(sent["structuredContent"]["id"].clone());
    for (i, id) in ids.iter().enumerate() {
        raw.send(
            json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
            "params": {"name": "wait", "arguments": {"ids": [id], "timeoutSecs": 50}}}),
        );
    }
    let n = ids.len() as u64;
    let mut q = 0;
    wait_until(BOUND, "every wait pending", || {
        q += 1;
        raw.server_status(q)["pendingWaits"] == n
    });
    // Idle: the runtime's thread, its blocking pool (at most 8), the watcher's thread.
    let (threads, inotify) = holdings(raw.pid());
    assert_eq!(inotify, 1, "one inotify instance for {n} waits");
    assert!(
        threads <= idle_threads + 8 + 1,
        "{n} waits hold no thread each: {threads} threads, {idle_threads} idle"
    );
    assert_eq!(raw.server_status(9999)["watcherSubscriptions"], n);
    let cancelled = Instant::now();
    for i in 0..ids.len() {
        raw.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1000 + i, "reason": "test"}}),
        );
    }
    wait_until(Duration::from_secs(5), "every wait freed", || {
        q += 1;
        let s = raw.server_status(q);
        s["pendingWaits"] == 0 && s["watcherSubscriptions"] == 0
    });
    assert!(
        cancelled.elapsed() < Duration::from_secs(5),
        "freed in {:?}",
        cancelled.elapsed()
    );
    // The server serves on: a new wait is answered.
    let r = raw.call(
        json!("again"),
        "wait",
        json!({"ids": [ids[0]], "timeoutSecs": 0}),
    );
    assert_eq!(r["structuredContent"]["allFinished"], false, "{r}");
    drop(raw);
    assert_nothing_left(t.path());
}
