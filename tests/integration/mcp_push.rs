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
        Raw::start_with(t, json!({}))
    }

    /// As [`Raw::start`], the client declaring `capabilities`.
    pub fn start_with(t: &TestRoot, capabilities: Value) -> Raw {
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
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
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
    (threads, conductor::procfs::inotify_instances(pid))
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
        let s = raw.server_status(q);
        s["pendingWaits"] == n && s["watcherSubscriptions"] == n
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

#[test]
fn all_digit_ids_round_trip_as_given_whether_number_or_string() {
    let t = TestRoot::new();
    let mut raw = Raw::start(&t);
    let r = raw.call(json!(1), "submit", json!({"prompt": "n", "id": 12345}));
    assert_eq!(r["structuredContent"]["id"], json!(12345), "{r}");
    let r = raw.call(json!(2), "submit", json!({"prompt": "s", "id": "67890"}));
    assert_eq!(r["structuredContent"]["id"], json!("67890"), "{r}");
    // Either form finds either task, and comes back as it was sent.
    for (i, given) in [json!(12345), json!("12345"), json!(67890), json!("67890")]
        .into_iter()
        .enumerate()
    {
        let r = raw.call(json!(10 + i), "result", json!({"id": given}));
        assert_eq!(r["isError"], false, "{r}");
        assert_eq!(r["structuredContent"]["id"], given, "{r}");
        assert_eq!(r["structuredContent"]["state"], "queued", "{r}");
        let w = raw.call(
            json!(20 + i),
            "wait",
            json!({"ids": [given], "timeoutSecs": 0}),
        );
        assert_eq!(w["structuredContent"]["tasks"][0]["id"], given, "{w}");
    }
    let r = raw.call(json!(30), "cancel", json!({"id": 12345}));
    assert_eq!(r["structuredContent"]["id"], json!(12345), "{r}");
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn schemas_have_no_null_types_and_every_tool_an_output_schema_its_answers_fit() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let mut raw = Raw::start(&t);
    raw.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    let tools = raw.answer(&json!("list"))["result"]["tools"].clone();
    let tools = tools.as_array().unwrap();
    fn nulls(v: &Value, at: &str, found: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(ts)) = m.get("type") {
                    if ts.contains(&json!("null")) {
                        found.push(at.to_string());
                    }
                }
                for (k, v) in m {
                    nulls(v, &format!("{at}.{k}"), found);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| nulls(v, at, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for tool in tools {
        nulls(
            &tool["inputSchema"],
            tool["name"].as_str().unwrap(),
            &mut found,
        );
        assert_eq!(tool["outputSchema"]["type"], "object", "{}", tool["name"]);
    }
    assert!(found.is_empty(), "null types in input schemas: {found:?}");
    let submit = tools.iter().find(|t| t["name"] == "submit").unwrap();
    for f in ["timeoutSecs", "priority", "maxAttempts"] {
        assert_eq!(
            submit["inputSchema"]["properties"][f]["type"], "integer",
            "{f}"
        );
    }
    let schema =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["outputSchema"].clone();
    // Each tool's answer fits its output schema.
    let id = raw.call(json!(1), "submit", json!({"prompt": "x", "key": "k"}))["structuredContent"]
        ["id"]
        .clone();
    let calls = [
        ("submit", json!({"prompt": "y"})),
        ("send", json!({"slot": 0, "prompt": "z"})),
        ("wait", json!({"ids": [id], "timeoutSecs": 0})),
        ("result", json!({"id": id})),
        ("tasks", json!({"limit": 2})),
        ("status", json!({})),
        ("queue", json!({})),
        ("logs", json!({"id": id})),
        ("cancel", json!({"id": id})),
    ];
    for (i, (name, args)) in calls.into_iter().enumerate() {
        let r = raw.call(json!(100 + i), name, args);
        assert_eq!(r["isError"], false, "{name}: {r}");
        conductor::mcp::schema::check(&schema(name), &r["structuredContent"])
            .unwrap_or_else(|e| panic!("{name}'s answer does not fit its schema: {e}: {r}"));
    }
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn bad_arguments_are_tool_errors_naming_the_field() {
    let t = TestRoot::new();
    let mut raw = Raw::start(&t);
    let cases = [
        (
            "submit",
            json!({"prompt": ""}),
            "`prompt` must not be empty",
        ),
        (
            "submit",
            json!({"prompt": "x", "timeoutSecs": -5}),
            "`timeoutSecs`",
        ),
        (
            "submit",
            json!({"prompt": "x", "priority": 12}),
            "`priority` must be at most 9",
        ),
        (
            "submit",
            json!({"prompt": "x", "bogus": 1}),
            "unknown argument `bogus`",
        ),
        ("submit", json!({}), "`prompt` is required"),
        (
            "wait",
            json!({"ids": ["a"], "timeoutSecs": -1}),
            "`timeoutSecs` must be at least 0",
        ),
        ("wait", json!({"ids": []}), "`ids` must not be empty"),
        ("wait", json!({"ids": [true]}), "`ids[0]`"),
        (
            "tasks",
            json!({"limit": "ten"}),
            "`limit` must be an integer",
        ),
        ("result", json!({"id": "a/b"}), "invalid task id"),
    ];
    for (i, (tool, args, want)) in cases.into_iter().enumerate() {
        let r = raw.call(json!(100 + i), tool, args.clone());
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(want),
            "{tool} {args}: {text:?} lacks {want:?}"
        );
    }
    // A line over the size limit is answered with its id, and the server reads on.
    let mut line = br#"{"jsonrpc":"2.0","id":4242,"method":"tools/call","params":{"name":"submit","arguments":{"prompt":""#.to_vec();
    line.resize(17 * 1024 * 1024, b'x');
    line.extend_from_slice(br#""}}}"#);
    raw.send_line(&line);
    let a = raw.answer(&json!(4242));
    assert_eq!(a["error"]["code"], -32600, "{a}");
    let r = raw.call(json!("after"), "status", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn tasks_pages_with_a_cursor_and_filters_every_task_listed_once() {
    let t = TestRoot::new();
    let mut raw = Raw::start(&t);
    let mut submitted = Vec::new();
    for i in 0..7 {
        let key = if i % 2 == 0 { "even" } else { "odd" };
        let r = raw.call(
            json!(format!("s{i}")),
            "submit",
            json!({"prompt": "p", "key": key}),
        );
        submitted.push(r["structuredContent"]["id"].clone());
    }
    let pages = |raw: &mut Raw, args: Value, tag: &str| {
        let mut seen = Vec::new();
        let mut cursor: Option<Value> = None;
        for page in 0.. {
            assert!(page < 10, "pagination never ends");
            let mut a = args.clone();
            if let Some(c) = &cursor {
                a["cursor"] = c.clone();
            }
            let r = raw.call(json!(format!("{tag}{page}")), "tasks", a);
            assert_eq!(r["isError"], false, "{r}");
            let got = r["structuredContent"]["tasks"].as_array().unwrap().clone();
            assert!(got.len() <= 3, "{r}");
            seen.extend(got.iter().map(|t| t["id"].clone()));
            match r["structuredContent"].get("nextCursor") {
                Some(c) => cursor = Some(c.clone()),
                None => break,
            }
        }
        seen
    };
    let all = pages(&mut raw, json!({"limit": 3}), "a");
    let mut want = submitted.clone();
    want.reverse(); // newest first
    assert_eq!(all, want);
    let q = raw.call(json!("q"), "queue", json!({}));
    let pending = q["structuredContent"]["pending"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(pending.len(), 7, "{q}");
    assert!(
        pending
            .iter()
            .all(|p| p["waiting"].as_str().is_some_and(|w| !w.is_empty())),
        "each says why it waits: {q}"
    );
    let even = pages(
        &mut raw,
        json!({"limit": 3, "key": "even", "states": ["queued"]}),
        "e",
    );
    assert_eq!(even.len(), 4, "{even:?}");
    let r = raw.call(json!("bad"), "tasks", json!({"cursor": "nonsense"}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"].as_str().unwrap().contains("cursor"),
        "{r}"
    );
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn a_wait_with_a_progress_token_reports_each_step_and_subscribed_resources_are_told_of_changes() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let w = crate::harness::WorkerProc::start(
        &t,
        Slot(0),
        &crate::harness::agent("step.sh").display().to_string(),
        &[],
        &[],
    );
    let hold = t.dir.path().join("hold");
    let mut raw = Raw::start(&t);
    raw.send(json!({"jsonrpc": "2.0", "id": "tpl", "method": "resources/templates/list"}));
    let tpl = raw.answer(&json!("tpl"));
    let uris: Vec<&str> = tpl["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(
        uris,
        ["conductor://tasks/{id}", "conductor://tasks/{id}/log"]
    );
    let r = raw.call(
        json!("s"),
        "submit",
        json!({"prompt": hold.display().to_string(), "id": "pro-1"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    for (i, uri) in ["conductor://tasks/pro-1", "conductor://tasks/pro-1/log"]
        .iter()
        .enumerate()
    {
        raw.send(
            json!({"jsonrpc": "2.0", "id": format!("sub{i}"), "method": "resources/subscribe",
            "params": {"uri": uri}}),
        );
        let a = raw.answer(&json!(format!("sub{i}")));
        assert!(a.get("result").is_some(), "{a}");
    }
    raw.send(
        json!({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": {
        "name": "wait", "arguments": {"ids": ["pro-1"], "timeoutSecs": 50},
        "_meta": {"progressToken": "tok"}}}),
    );
    let progress = |want: &'static str| {
        move |v: &Value| {
            v["method"] == "notifications/progress"
                && v["params"]["progressToken"] == "tok"
                && v["params"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(want))
        }
    };
    raw.expect("progress: working on slot 0", progress("working on slot 0"));
    raw.expect("progress: the last output line", progress("working on it"));
    // The agent's first line may be written before the log subscription is in place
    // (a busy machine picks the task up at once): its second, after `hold`, comes
    // after it for sure.
    std::fs::write(&hold, "").unwrap();
    raw.expect("the log resource updated", |v| {
        v["method"] == "notifications/resources/updated"
            && v["params"]["uri"] == "conductor://tasks/pro-1/log"
    });
    let done = raw.answer(&json!("w"));
    assert_eq!(
        done["result"]["structuredContent"]["allFinished"], true,
        "{done}"
    );
    raw.expect("progress: done", progress("pro-1: done"));
    raw.expect("the task resource updated", |v| {
        v["method"] == "notifications/resources/updated"
            && v["params"]["uri"] == "conductor://tasks/pro-1"
    });
    // Progress counts up.
    let counts: Vec<f64> = raw
        .seen
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .map(|v| v["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    raw.send(
        json!({"jsonrpc": "2.0", "id": "r1", "method": "resources/read",
        "params": {"uri": "conductor://tasks/pro-1"}}),
    );
    let read = raw.answer(&json!("r1"));
    let text = read["result"]["contents"][0]["text"].as_str().unwrap();
    let task: Value = serde_json::from_str(text).unwrap();
    assert_eq!(task["state"], "done", "{task}");
    raw.send(
        json!({"jsonrpc": "2.0", "id": "r2", "method": "resources/read",
        "params": {"uri": "conductor://tasks/pro-1/log"}}),
    );
    let log = raw.answer(&json!("r2"));
    assert!(
        log["result"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("finished"),
        "{log}"
    );
    raw.send(
        json!({"jsonrpc": "2.0", "id": "r3", "method": "resources/read",
        "params": {"uri": "conductor://tasks/nope"}}),
    );
    assert!(raw.answer(&json!("r3")).get("error").is_some());
    drop(raw);
    drop(w);
    assert_nothing_left(t.path());
}
