//! `conductor mcp` as a client sees it: a subprocess driven over stdio by rmcp's own client (and by a raw pipe for the malformed-input cases).

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conductor::{Slot, TaskId};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot, WorkerProc};

pub type Mcp = RunningService<RoleClient, ClientConfig>;

const S0: Slot = Slot(0);
/// Bound on anything a test waits for.
const BOUND: Duration = Duration::from_secs(60);

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `conductor mcp --root <root>` as a child, initialized by rmcp's client speaking
/// protocol 2025-06-18 (what current clients send). `env` is added to its environment.
pub async fn connect(t: &TestRoot, env: &[(&str, &str)]) -> Mcp {
    let mut cmd = tokio::process::Command::new(bin("conductor"));
    cmd.arg("mcp")
        .arg("--root")
        .arg(t.path())
        // Tags the server as this test's (assert_nothing_left finds it).
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("CONDUCTOR_DEPTH")
        .env_remove("CONDUCTOR_MAX_DEPTH")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn conductor mcp");
    let hello = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("conductor-test", "0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_06_18);
    tokio::time::timeout(BOUND, hello.serve(transport))
        .await
        .expect("initialize answered in time")
        .expect("initialize")
}

pub async fn call(mcp: &Mcp, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("tool arguments must be an object")
    };
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
    tokio::time::timeout(BOUND, mcp.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} answered in time"))
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

/// A successful call's JSON.
#[track_caller]
pub fn ok(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool error: {r:?}");
    r.structured_content.clone().expect("structured content")
}

/// A tool error's message.
#[track_caller]
pub fn tool_error(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "expected a tool error: {r:?}");
    r.content[0].as_text().expect("text content").text.clone()
}

pub async fn close(mcp: Mcp) {
    let _ = tokio::time::timeout(BOUND, mcp.cancel()).await;
}

#[test]
fn initialize_answers_with_the_clients_protocol_and_lists_every_tool_with_its_schema() {
    let t = TestRoot::new();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let info = mcp.peer_info().expect("server info");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_06_18);
        let tools = mcp.list_all_tools().await.expect("tools/list");
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "approve", "cancel", "deny", "diff", "discard", "edit", "logs", "merge", "pause",
                "queue", "result", "resume", "retry", "send", "status", "submit", "tasks",
                "totals", "wait"
            ]
        );
        for tool in &tools {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            let described = tool.description.as_deref().unwrap_or("");
            assert!(
                described.len() > 60,
                "{} is described: {described:?}",
                tool.name
            );
        }
        let schema = |name: &str| {
            let tool = tools.iter().find(|t| t.name == name).unwrap();
            Value::Object((*tool.input_schema).clone())
        };
        let submit = schema("submit");
        for field in [
            "prompt",
            "key",
            "priority",
            "after",
            "dir",
            "timeoutSecs",
            "id",
            "model",
            "allowedTools",
            "permissionMode",
            "maxBudgetUsd",
        ] {
            assert!(
                submit["properties"].get(field).is_some(),
                "submit takes {field}: {submit}"
            );
        }
        assert_eq!(submit["required"], json!(["prompt"]));
        assert_eq!(schema("wait")["required"], json!(["ids"]));
        assert!(schema("send")["required"]
            .as_array()
            .unwrap()
            .contains(&json!("slot")));
        assert!(schema("logs")["properties"].get("tailBytes").is_some());
        // Hints a client uses to ask (or not) before a call.
        let read_only = |name: &str| {
            let tool = tools.iter().find(|t| t.name == name).unwrap();
            tool.annotations.as_ref().and_then(|a| a.read_only_hint)
        };
        for name in ["wait", "result", "tasks", "status", "logs", "queue"] {
            assert_eq!(read_only(name), Some(true), "{name}");
        }
        for name in ["submit", "send", "cancel", "edit"] {
            assert_eq!(read_only(name), Some(false), "{name}");
        }
        close(mcp).await;
    });
    assert_nothing_left(t.path());
}

#[test]
fn submit_wait_result_round_trip_through_a_real_worker() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let w = WorkerProc::start(&t, S0, &agent("env.sh").display().to_string(), &[], &[]);
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let submitted = ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "hello", "key": "k1", "id": "mcp-1"}),
        )
        .await);
        assert_eq!(submitted["id"], "mcp-1");
        assert!(
            submitted.get("warning").is_none(),
            "a worker serves: {submitted}"
        );
        let sent = ok(&call(&mcp, "send", json!({"slot": 0, "prompt": "direct"})).await);
        let sent_id = sent["id"].as_str().expect("an id").to_string();

        let waited = ok(&call(
            &mcp,
            "wait",
            json!({"ids": ["mcp-1", sent_id], "timeoutSecs": 50}),
        )
        .await);
        assert_eq!(waited["allFinished"], true, "{waited}");
        for task in waited["tasks"].as_array().unwrap() {
            assert_eq!(task["state"], "done", "{task}");
            assert_eq!(task["result"]["success"], true, "{task}");
        }
        let output = waited["tasks"][0]["result"]["output"].as_str().unwrap();
        assert!(output.contains("task=mcp-1"), "{output}");
        let result = ok(&call(&mcp, "result", json!({"id": "mcp-1"})).await);
        assert_eq!(result["state"], "done");
        assert_eq!(result["result"]["exitCode"], 0);
        assert!(result["result"]["durationMs"].is_u64(), "{result}");
        assert!(result["result"]["output"]
            .as_str()
            .unwrap()
            .contains("worker=0"));

        let listed = ok(&call(&mcp, "tasks", json!({"key": "k1"})).await);
        let ids: Vec<&str> = listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["mcp-1"]);
        let status = ok(&call(&mcp, "status", json!({})).await);
        assert_eq!(status["workers"][0]["slot"], 0, "{status}");
        assert_eq!(status["servedByLiveWorker"], true);
        let logs = ok(&call(&mcp, "logs", json!({"id": "mcp-1"})).await);
        assert!(
            logs["text"].as_str().unwrap().contains("task=mcp-1"),
            "{logs}"
        );
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn a_bad_slot_and_an_unknown_id_are_tool_errors_and_the_server_keeps_serving() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let missing = tool_error(&call(&mcp, "send", json!({"slot": 7, "prompt": "x"})).await);
        assert!(missing.contains("no worker slot 7"), "{missing}");
        let huge = tool_error(&call(&mcp, "send", json!({"slot": 5000, "prompt": "x"})).await);
        assert!(huge.contains("too large"), "{huge}");
        for tool in ["result", "cancel", "logs"] {
            let e = tool_error(&call(&mcp, tool, json!({"id": "no-such-task"})).await);
            assert!(e.contains("no task no-such-task"), "{tool}: {e}");
        }
        let e = tool_error(
            &call(
                &mcp,
                "wait",
                json!({"ids": ["no-such-task"], "timeoutSecs": 50}),
            )
            .await,
        );
        assert!(e.contains("no task no-such-task"), "{e}");
        let e = tool_error(&call(&mcp, "submit", json!({"prompt": "x", "id": "bad id!"})).await);
        assert!(e.contains("invalid task id"), "{e}");
        let e = tool_error(
            &call(
                &mcp,
                "submit",
                json!({"prompt": "x", "allowedTools": ["Read", "-rf"]}),
            )
            .await,
        );
        assert!(
            e.contains("allowedTools: \"-rf\" is not a tool name"),
            "{e}"
        );
        // A narrowed task carries its narrowing to whichever worker claims it.
        let v = ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "x", "id": "narrow-1", "allowedTools": ["Read"],
                   "permissionMode": "plan"}),
        )
        .await);
        assert_eq!(v["id"], "narrow-1");
        let pending = conductor::queue::Queue::new(t.client.root().clone())
            .pending()
            .unwrap();
        let task = conductor::Task::read(&pending[0].path, 1 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(task.allowed_tools, Some(vec!["Read".to_string()]));
        assert_eq!(task.permission_mode.as_deref(), Some("plan"));
        let e = tool_error(&call(&mcp, "tasks", json!({"states": ["sleeping"]})).await);
        assert!(e.contains("unknown task state"), "{e}");
        // Still serving after all those.
        let status = ok(&call(&mcp, "status", json!({})).await);
        assert_eq!(status["servedByLiveWorker"], false, "{status}");
        close(mcp).await;
    });
    assert_nothing_left(t.path());
}

#[test]
fn a_wait_that_times_out_returns_the_state_and_a_cancel_ends_the_task() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let w = WorkerProc::start(&t, S0, &agent("slow.sh").display().to_string(), &[], &[]);
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        ok(&call(&mcp, "submit", json!({"prompt": "long", "id": "slow-1"})).await);
        let waited = ok(&call(&mcp, "wait", json!({"ids": ["slow-1"], "timeoutSecs": 0.5})).await);
        assert_eq!(waited["allFinished"], false, "{waited}");
        let state = waited["tasks"][0]["state"].as_str().unwrap();
        assert!(["queued", "working"].contains(&state), "{waited}");
        assert_eq!(waited["tasks"][0]["finished"], false);
        let deadline = Instant::now() + BOUND;
        loop {
            let logs = ok(&call(&mcp, "logs", json!({"id": "slow-1"})).await);
            if logs["text"].as_str().is_some_and(|s| s.contains("working")) {
                assert_eq!(logs["state"], "working");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the agent's output never showed: {logs}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let cancelled = ok(&call(&mcp, "cancel", json!({"id": "slow-1"})).await);
        assert_eq!(cancelled["done"], "requested", "{cancelled}");
        let waited = ok(&call(&mcp, "wait", json!({"ids": ["slow-1"], "timeoutSecs": 50})).await);
        assert_eq!(waited["tasks"][0]["state"], "cancelled", "{waited}");
        let again = tool_error(&call(&mcp, "cancel", json!({"id": "slow-1"})).await);
        assert!(again.contains("already finished"), "{again}");
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn submit_and_send_refuse_past_the_depth_limit_and_record_the_depth() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    runtime().block_on(async {
        let deep = connect(&t, &[("CONDUCTOR_DEPTH", "4")]).await;
        for (tool, args) in [
            ("submit", json!({"prompt": "x"})),
            ("send", json!({"slot": 0, "prompt": "x"})),
        ] {
            let e = tool_error(&call(&deep, tool, args).await);
            assert!(
                e.contains("depth 4") && e.contains("CONDUCTOR_MAX_DEPTH"),
                "{tool}: {e}"
            );
        }
        // Reading is not creating: still allowed.
        ok(&call(&deep, "status", json!({})).await);
        close(deep).await;

        let raised = connect(
            &t,
            &[("CONDUCTOR_DEPTH", "4"), ("CONDUCTOR_MAX_DEPTH", "5")],
        )
        .await;
        let v = ok(&call(&raised, "submit", json!({"prompt": "x", "id": "deep-4"})).await);
        assert_eq!(v["depth"], 4);
        close(raised).await;
    });
    let pending = conductor::queue::Queue::new(t.client.root().clone())
        .pending()
        .expect("pending");
    let entry = pending
        .iter()
        .find(|p| p.id == Some(TaskId::from("deep-4")))
        .expect("deep-4 is pending");
    let task: conductor::Task =
        serde_json::from_slice(&std::fs::read(&entry.path).unwrap()).unwrap();
    // Its agent will be told depth 5.
    assert_eq!(task.depth, Some(4));
    assert_nothing_left(t.path());
}

#[test]
fn an_agent_fanning_out_through_the_cli_is_stopped_at_the_depth_limit() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let conductor = bin("conductor").display().to_string();
    let w = WorkerProc::start(
        &t,
        S0,
        &agent("fanout.sh").display().to_string(),
        &[],
        &[("CONDUCTOR_BIN", &conductor), ("CONDUCTOR_MAX_DEPTH", "1")],
    );
    let top = t
        .client
        .write_task(S0, &conductor::Task::new("fan").with_id("top"))
        .unwrap();
    let top = t.client.wait_for_task(&top, BOUND).expect("top ends");
    assert!(top.output.contains("depth=1"), "{}", top.output);
    assert!(top.output.contains("submit exit=0"), "{}", top.output);
    let sub = t
        .client
        .wait_for_task(&TaskId::from("sub-1"), BOUND)
        .expect("the sub-task ends");
    assert!(sub.output.contains("depth=2"), "{}", sub.output);
    assert!(sub.output.contains("submit exit=3"), "{}", sub.output);
    assert!(sub.output.contains("CONDUCTOR_MAX_DEPTH"), "{}", sub.output);
    assert!(t
        .client
        .find_task(&TaskId::from("sub-2"))
        .unwrap()
        .is_none());
    drop(w);
    assert_nothing_left(t.path());
}

/// A child killed and reaped when the test ends, passed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a raw client reads: every stdout line, parsed (a line that is not JSON fails the test).
fn json_lines(out: &[u8]) -> Vec<Value> {
    out.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: Value = serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "stdout carried a line that is not JSON ({e}): {:?}",
                    String::from_utf8_lossy(l)
                )
            });
            assert_eq!(v["jsonrpc"], "2.0", "not JSON-RPC: {v}");
            v
        })
        .collect()
}

#[test]
fn malformed_lines_get_a_parse_error_and_stdout_stays_pure_json_rpc() {
    let t = TestRoot::new();
    let mut server = KillOnDrop(
        Command::new(bin("conductor"))
            .args(["mcp", "--root"])
            .arg(t.path())
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_DEPTH")
            // Every log line there is: none may reach stdout.
            .env("RUST_LOG", "trace")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn conductor mcp"),
    );
    let child = &mut server.0;
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<Value> = Vec::new();
    let mut expect = |pred: &dyn Fn(&Value) -> bool, what: &str| {
        let deadline = Instant::now() + BOUND;
        while !seen.iter().any(pred) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what}; got {seen:?}"));
            seen.extend(json_lines(&line));
        }
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let lines: [&[u8]; 9] = [
        b"this is not json\n",
        init.as_bytes(),
        b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
        b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/list\"\n", // cut short
        b"\xff\xfe\x00 binary\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\n",
        b"[1, 2,\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"status\",\"arguments\":{}}}\n",
        b"}{\n",
    ];
    for l in lines {
        stdin.write_all(l).unwrap();
        if !l.ends_with(b"\n") {
            stdin.write_all(b"\n").unwrap();
        }
        stdin.flush().unwrap();
    }
    let parse_errors = |s: &[Value]| s.iter().filter(|v| v["error"]["code"] == -32700).count();
    expect(
        &|v| v["id"] == 1 && v["result"]["protocolVersion"] == "2025-06-18",
        "initialize result",
    );
    expect(
        &|v| {
            v["id"] == 3
                && v["result"]["tools"]
                    .as_array()
                    .is_some_and(|t| t.len() == 19)
        },
        "tools/list result",
    );
    expect(
        &|v| v["id"] == 4 && v["result"]["structuredContent"]["workers"].is_array(),
        "status result",
    );
    // Five lines were not JSON: each one answered, with no id to answer to.
    let deadline = Instant::now() + BOUND;
    while parse_errors(&seen) < 5 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("parse errors missing; got {seen:?}"));
        seen.extend(json_lines(&line));
    }
    assert!(seen
        .iter()
        .filter(|v| v["error"]["code"] == -32700)
        .all(|v| v["id"].is_null()));
    // The cut-short request was never answered as id 2.
    assert!(!seen.iter().any(|v| v["id"] == 2), "{seen:?}");
    // Closing stdin ends the server, and nothing else came out.
    drop(stdin);
    let mut status = None;
    wait_until(BOUND, "conductor mcp to exit when stdin closes", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "{status:?}");
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        seen.extend(json_lines(&line));
    }
    assert_eq!(parse_errors(&seen), 5, "{seen:?}");
    assert_nothing_left(t.path());
}

/// The worker publishes a result before it retires `running.json` (and a worker killed in
/// between leaves both): `result` and `cancel` must see the task as finished, as `wait` does.
#[test]
fn a_finished_task_whose_running_file_is_not_yet_retired_reads_as_finished() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let root = t.client.root();
    let w = root.worker(S0);
    for (id, queued) in [("fin-inbox", false), ("fin-queue", true)] {
        let id = TaskId::from(id);
        let place = if queued {
            conductor::ids::Place::Queue
        } else {
            conductor::ids::Place::Worker(S0)
        };
        conductor::ids::reserve(root, &id, place).unwrap();
        let mut task = conductor::Task::new("x").with_id(id.clone());
        if queued {
            task.origin = Some("queue".into());
        }
        std::fs::write(w.running(), serde_json::to_vec(&task).unwrap()).unwrap();
        let mut r = conductor::TaskResult::failed(id.clone(), conductor::Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.worker = Some(0);
        std::fs::create_dir_all(w.results_dir()).unwrap();
        std::fs::write(w.result_for(&id), serde_json::to_vec(&r).unwrap()).unwrap();
        if queued {
            std::fs::hard_link(
                w.result_for(&id),
                root.queue_results().join(format!("{id}.json")),
            )
            .unwrap();
        }
        runtime().block_on(async {
            let mcp = connect(&t, &[]).await;
            let got = ok(&call(&mcp, "result", json!({"id": id.to_string()})).await);
            assert_eq!(got["state"], "done", "{got}");
            assert_eq!(got["result"]["success"], true, "{got}");
            let e = tool_error(&call(&mcp, "cancel", json!({"id": id.to_string()})).await);
            assert!(e.contains("already finished"), "{e}");
            close(mcp).await;
        });
        assert!(!w.cancel().exists(), "no cancel was requested for {id}");
    }
    assert_nothing_left(t.path());
}

/// Issue 25 items 11 and 12 over MCP: `submit` and `send` take `env` and `labels`,
/// `tasks` filters by `labels`, `edit` changes a queued task and refuses a finished one.
#[test]
fn env_labels_and_edit_over_mcp() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let submitted = ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "first", "id": "m-e1", "env": {"FOO": "one"}, "labels": ["blue"]}),
        )
        .await);
        assert_eq!(submitted["id"], "m-e1");
        ok(&call(&mcp, "submit", json!({"prompt": "other", "id": "m-e2"})).await);
        let e = tool_error(
            &call(
                &mcp,
                "submit",
                json!({"prompt": "x", "env": {"CONDUCTOR_HOME": "/"}}),
            )
            .await,
        );
        assert!(e.contains("reserved"), "{e}");
        let edited = ok(&call(
            &mcp,
            "edit",
            json!({"id": "m-e1", "prompt": "second", "priority": 8, "env": {"FOO": "two"}}),
        )
        .await);
        assert_eq!(edited["task"]["prompt"], "second", "{edited}");
        assert_eq!(edited["task"]["labels"], json!(["blue"]), "{edited}");
        let listed = ok(&call(&mcp, "tasks", json!({"labels": ["blue"]})).await);
        let ids: Vec<&Value> = listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["id"])
            .collect();
        assert_eq!(ids, [&json!("m-e1")], "{listed}");
        assert_eq!(listed["tasks"][0]["env"], json!({"FOO": "two"}));

        let w = WorkerProc::start(&t, S0, "sh -c 'p=$(cat); echo \"$p FOO=$FOO\"'", &[], &[]);
        let waited = ok(&call(
            &mcp,
            "wait",
            json!({"ids": ["m-e1", "m-e2"], "timeoutSecs": 50}),
        )
        .await);
        assert_eq!(waited["allFinished"], true, "{waited}");
        let out = waited["tasks"][0]["result"]["output"].as_str().unwrap();
        assert_eq!(out.trim(), "second FOO=two");
        let e = tool_error(&call(&mcp, "edit", json!({"id": "m-e1", "prompt": "late"})).await);
        assert!(e.contains("cannot edit task m-e1: it has finished"), "{e}");
        close(mcp).await;
        drop(w);
    });
    assert_nothing_left(t.path());
}

/// Issue 25, items 10 and 13 over MCP: `submit` with a group (an unknown one refused by
/// name), `tasks` by group, `pause`/`resume` of a group and a slot, with `queue` saying
/// why a task waits.
#[test]
fn pause_resume_and_groups_over_mcp() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let refused =
            tool_error(&call(&mcp, "submit", json!({"prompt": "x", "group": "nightly"})).await);
        assert!(
            refused.contains("no group nightly") && refused.contains("known groups: none"),
            "{refused}"
        );
        conductor::queue::groups::add(t.client.root(), "nightly", 1).unwrap();
        let sent = ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "x", "group": "nightly", "id": "g-1"}),
        )
        .await);
        assert_eq!(sent["id"], "g-1");
        let listed = ok(&call(&mcp, "tasks", json!({"group": "nightly"})).await);
        assert_eq!(listed["tasks"][0]["id"], "g-1", "{listed}");
        assert_eq!(listed["tasks"][0]["group"], "nightly", "{listed}");

        let paused = ok(&call(&mcp, "pause", json!({"group": "nightly"})).await);
        assert_eq!(
            paused["paused"],
            json!({"kind": "group", "name": "nightly"})
        );
        assert!(t.path().join("paused/group-nightly").is_file());
        let queue = ok(&call(&mcp, "queue", json!({})).await);
        assert_eq!(
            queue["pending"][0]["waiting"], "paused (group nightly)",
            "{queue}"
        );
        let listed = ok(&call(&mcp, "tasks", json!({"group": "nightly"})).await);
        assert_eq!(listed["tasks"][0]["waiting"], "paused (group nightly)");
        let waited = ok(&call(&mcp, "wait", json!({"ids": ["g-1"], "timeoutSecs": 0.1})).await);
        assert_eq!(
            waited["tasks"][0]["note"], "queued and waits: paused (group nightly)",
            "{waited}"
        );
        let both = tool_error(&call(&mcp, "pause", json!({"slot": 0, "all": true})).await);
        assert!(both.contains("exactly one"), "{both}");
        let no_slot = tool_error(&call(&mcp, "pause", json!({"slot": 7})).await);
        assert!(no_slot.contains('7'), "{no_slot}");
        ok(&call(&mcp, "pause", json!({"slot": 0, "now": true})).await);
        let status = ok(&call(&mcp, "status", json!({})).await);
        assert_eq!(
            status["paused"],
            json!(["group nightly", "slot 0"]),
            "{status}"
        );
        let resumed = ok(&call(&mcp, "resume", json!({"group": "nightly"})).await);
        assert_eq!(resumed["wasPaused"], true);
        let now = tool_error(&call(&mcp, "resume", json!({"slot": 0, "now": true})).await);
        assert!(now.contains("pause only"), "{now}");
        ok(&call(&mcp, "resume", json!({"slot": 0})).await);
        assert!(!t.path().join("paused/slot-0").exists());
        close(mcp).await;
    });
    crate::harness::assert_nothing_left(t.path());
}
