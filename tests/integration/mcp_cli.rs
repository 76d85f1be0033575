//! What the CLI can do, done over MCP: retry (afresh, resumed, with a new prompt), continue_from (a finished task's output passed on as `run --chain` does), cost totals (the numbers of `tasks --summary`), every task field submit takes, submit with wait, and the Tasks extension's handles.

use std::process::Command;
use std::time::{Duration, Instant};

use conductor::{Slot, TaskId};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, ProtocolVersion, TaskStatus,
};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};

use crate::harness::{agent, assert_nothing_left, bin, TestRoot, WorkerProc};
use crate::mcp::{call, close, connect, ok, runtime, tool_error};
use crate::mcp_push::Raw;
use crate::prereq::require;

const S0: Slot = Slot(0);

/// A worker on slot 0 running the fake Claude Code (claude preset: sessions, costs).
fn claude_worker(t: &TestRoot) -> WorkerProc {
    t.client.create_worker(S0).unwrap();
    let fake = agent("fake_claude.sh").display().to_string();
    WorkerProc::start(t, S0, &fake, &["--preset", "claude"], &[])
}

/// A worker on slot 0 whose agent answers with its prompt, unchanged.
fn echo_worker(t: &TestRoot) -> WorkerProc {
    t.client.create_worker(S0).unwrap();
    WorkerProc::start(t, S0, &agent("record.sh").display().to_string(), &[], &[])
}

/// `wait` for one task until it has finished (bounded by the tool's own cap); its result.
async fn finished(mcp: &crate::mcp::Mcp, id: &str) -> Value {
    let w = ok(&call(mcp, "wait", json!({"ids": [id], "timeoutSecs": 50})).await);
    assert_eq!(w["allFinished"], true, "{w}");
    w["tasks"][0]["result"].clone()
}

#[test]
fn retry_runs_a_finished_task_again_resumed_or_afresh_and_refuses_an_unfinished_one() {
    let t = TestRoot::new();
    let w = claude_worker(&t);
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "review the diff", "id": "rev1"}),
        )
        .await);
        let first = finished(&mcp, "rev1").await;
        assert_eq!(first["output"], "answer to: review the diff", "{first}");
        let session = first["sessionId"].as_str().expect("a session").to_string();

        // Resumed in its session, with what to do next.
        let r = ok(&call(
            &mcp,
            "retry",
            json!({"id": "rev1", "resume": true, "prompt": "now fix it"}),
        )
        .await);
        assert_eq!(r["id"], "rev1-r1", "{r}");
        assert_eq!(r["retried"], "rev1", "{r}");
        let resumed = finished(&mcp, "rev1-r1").await;
        assert_eq!(
            resumed["output"], "resumed answer to: now fix it",
            "{resumed}"
        );
        assert_eq!(resumed["sessionId"], session.as_str());

        // Afresh, under an id of our choosing (a number comes back a number).
        let r = ok(&call(&mcp, "retry", json!({"id": "rev1", "newId": 4711})).await);
        assert_eq!(r["id"], 4711, "{r}");
        let again = finished(&mcp, "4711").await;
        assert_eq!(again["output"], "answer to: review the diff", "{again}");
        assert_ne!(again["sessionId"], session.as_str());

        // Not finished: refused, as `conductor retry` refuses it. (No worker serves
        // codex here, so it stays queued.)
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "p", "id": "held", "agent": "codex"}),
        )
        .await);
        let msg = tool_error(&call(&mcp, "retry", json!({"id": "held"})).await);
        assert!(msg.contains("task held is queued"), "{msg}");
        let msg = tool_error(&call(&mcp, "retry", json!({"id": "nope"})).await);
        assert!(msg.contains("nope"), "{msg}");
        ok(&call(&mcp, "cancel", json!({"id": "held"})).await);
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn continue_from_passes_a_finished_tasks_output_as_run_chain_does_and_refuses_an_unfinished_one() {
    let t = TestRoot::new();
    let w = echo_worker(&t);
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "step one says 42", "id": "s1"}),
        )
        .await);
        finished(&mcp, "s1").await;
        let s1 = t.client.result_of(&TaskId::from("s1")).unwrap().unwrap();
        let done = ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "step two", "id": "s2", "continueFrom": "s1", "wait": true,
                   "waitSecs": 50}),
        )
        .await);
        assert_eq!(done["continuedFrom"], "s1", "{done}");
        assert_eq!(done["state"], "done", "{done}");
        // The agent (which answers with its prompt) was given exactly what `run --chain`
        // gives a step.
        let got = done["wait"]["tasks"][0]["result"]["output"]
            .as_str()
            .unwrap();
        assert_eq!(
            got,
            conductor::verbs::chain::chained_prompt("step two", Some(&s1)),
            "{done}"
        );
        assert!(got.ends_with("Output of the previous step:\nstep one says 42"));

        // Not finished yet: refused, naming the field; nothing is submitted.
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "p", "id": "held", "agent": "codex"}),
        )
        .await);
        let msg = tool_error(
            &call(
                &mcp,
                "submit",
                json!({"prompt": "next", "id": "s3", "continueFrom": "held"}),
            )
            .await,
        );
        assert!(msg.contains("`continueFrom`: task held is queued"), "{msg}");
        assert!(t.client.find_task(&TaskId::from("s3")).unwrap().is_none());
        let msg = tool_error(
            &call(
                &mcp,
                "submit",
                json!({"prompt": "next", "continueFrom": "a/b"}),
            )
            .await,
        );
        assert!(msg.contains("`continueFrom`"), "{msg}");
        ok(&call(&mcp, "cancel", json!({"id": "held"})).await);
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn submit_gives_the_task_every_field_it_takes_and_totals_are_tasks_summarys_numbers() {
    let t = TestRoot::new();
    let w = claude_worker(&t);
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "a", "id": "a", "key": "k1"}),
        )
        .await);
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "b", "id": "b", "key": "k2", "priority": 7, "after": ["a"],
                   "dir": dir.path(), "agent": "claude", "model": "opus-x",
                   "maxBudgetUsd": 0.25, "until": "test -d .", "untilRounds": 2}),
        )
        .await);
        let b = finished(&mcp, "b").await;
        assert_eq!(b["success"], true, "{b}");
        // What the worker ran is what was asked for.
        let record = t.client.worker(S0).task_record(&TaskId::from("b"));
        let ran: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        assert_eq!(ran["key"], "k2", "{ran}");
        assert_eq!(ran["priority"], 7, "{ran}");
        assert_eq!(ran["after"], json!(["a"]), "{ran}");
        assert_eq!(ran["dir"], dir.path().display().to_string(), "{ran}");
        assert_eq!(ran["agent"], "claude", "{ran}");
        assert_eq!(ran["model"], "opus-x", "{ran}");
        assert_eq!(ran["maxBudgetUsd"], 0.25, "{ran}");
        assert_eq!(
            ran["until"],
            json!({"check": "test -d .", "rounds": 2}),
            "{ran}"
        );
        assert_eq!(b["rounds"], 1, "{b}");
        assert_eq!(b["check"]["passed"], true, "{b}");
        // `b` ran after `a` had finished.
        let a = t.client.result_of(&TaskId::from("a")).unwrap().unwrap();
        let b = t.client.result_of(&TaskId::from("b")).unwrap().unwrap();
        assert!(a.finished_at <= b.started_at, "{a:?} {b:?}");
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "fail now", "id": "c", "key": "k1"}),
        )
        .await);
        finished(&mcp, "c").await;

        let totals = ok(&call(&mcp, "totals", json!({})).await);
        let cli = Command::new(bin("conductor"))
            .args(["tasks", "--summary", "--json", "--root"])
            .arg(t.path())
            .env("CONDUCTOR_HOME", t.path())
            .output()
            .unwrap();
        assert!(
            cli.status.success(),
            "{}",
            String::from_utf8_lossy(&cli.stderr)
        );
        let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
        assert_eq!(totals, cli);
        assert_eq!(totals["total"]["tasks"], 3, "{totals}");
        assert_eq!(totals["total"]["failed"], 1, "{totals}");
        let cost = totals["total"]["costUsd"].as_f64().unwrap();
        assert!((cost - 3.0 * 0.0042).abs() < 1e-9, "{totals}");
        let k1 = &totals["byKey"].as_array().unwrap()[0];
        assert_eq!(
            (k1["name"].as_str(), k1["tasks"].as_u64()),
            (Some("k1"), Some(2))
        );
        // Filtered as `tasks` is.
        let only = ok(&call(&mcp, "totals", json!({"key": "k2"})).await);
        assert_eq!(only["total"]["tasks"], 1, "{only}");
        let msg = tool_error(&call(&mcp, "totals", json!({"states": ["sleepy"]})).await);
        assert!(msg.contains("sleepy"), "{msg}");
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn submit_with_wait_answers_with_the_result_and_tells_progress_on_the_way() {
    let t = TestRoot::new();
    let w = echo_worker(&t);
    let mut raw = Raw::start(&t);
    raw.send(
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "submit", "_meta": {"progressToken": "p7"},
        "arguments": {"prompt": "hello there", "id": 99, "wait": true, "waitSecs": 50}}}),
    );
    let r = raw.answer(&json!(7))["result"].clone();
    assert_eq!(r["isError"], false, "{r}");
    let v = &r["structuredContent"];
    assert_eq!(v["id"], 99, "{v}");
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["wait"]["allFinished"], true, "{v}");
    assert_eq!(v["wait"]["tasks"][0]["id"], 99, "{v}");
    assert_eq!(
        v["wait"]["tasks"][0]["result"]["output"], "hello there",
        "{v}"
    );
    let told: Vec<&Value> = raw
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == "p7")
        .collect();
    assert!(
        told.iter()
            .any(|m| m["params"]["message"].as_str().unwrap_or("").contains("99")),
        "progress told of task 99: {:?}",
        raw.seen
    );
    // A wait that ends first: the task is still submitted and runs on.
    let r = raw.call(
        json!(8),
        "submit",
        json!({"prompt": "x", "id": "w0", "wait": true, "waitSecs": 0, "agent": "codex"}),
    );
    assert_eq!(r["structuredContent"]["state"], "queued", "{r}");
    assert_eq!(r["structuredContent"]["wait"]["allFinished"], false, "{r}");
    let r = raw.call(json!(9), "submit", json!({"prompt": "x", "waitSecs": -1}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`waitSecs`"),
        "{r}"
    );
    raw.call(json!(10), "cancel", json!({"id": "w0"}));
    drop(raw);
    drop(w);
    assert_nothing_left(t.path());
}

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";

#[test]
fn a_tasks_extension_client_gets_a_handle_is_told_when_it_finishes_and_can_cancel_it() {
    let t = TestRoot::new();
    let w = echo_worker(&t);
    let mut raw = Raw::start_with(&t, json!({"extensions": {TASKS_EXT: {}}}));
    let init = raw.seen[0].clone();
    assert!(
        init["result"]["capabilities"]["extensions"][TASKS_EXT].is_object(),
        "the server declares the extension: {init}"
    );
    // submit with wait: a handle at once, the conductor task's id its taskId.
    let r = raw.call(
        json!(1),
        "submit",
        json!({"prompt": "handled", "id": "h1", "wait": true}),
    );
    assert_eq!(r["resultType"], "task", "{r}");
    assert_eq!(r["taskId"], "h1", "{r}");
    assert!(
        r["createdAt"].is_string() && r["pollIntervalMs"].is_u64(),
        "{r}"
    );
    let told = raw.expect("h1 completed", |m| {
        m["method"] == "notifications/tasks"
            && m["params"]["taskId"] == "h1"
            && m["params"]["status"] == "completed"
    });
    let answer = &told["params"]["result"]["structuredContent"];
    assert_eq!(answer["id"], "h1", "{told}");
    assert_eq!(
        answer["wait"]["tasks"][0]["result"]["output"], "handled",
        "{told}"
    );
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
        "params": {"taskId": "h1"}}));
    let got = raw.answer(&json!(2))["result"].clone();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"], told["params"]["result"], "{got}");

    // wait for one task: a handle on it; tasks/cancel cancels the conductor task.
    let r = raw.call(
        json!(3),
        "submit",
        json!({"prompt": "p", "id": "h2", "agent": "codex"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let r = raw.call(json!(4), "wait", json!({"ids": ["h2"]}));
    assert_eq!(
        (&r["taskId"], &r["status"]),
        (&json!("h2"), &json!("working")),
        "{r}"
    );
    assert_eq!(r["statusMessage"], "queued", "{r}");
    raw.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/cancel",
        "params": {"taskId": "h2"}}));
    let ack = raw.answer(&json!(5));
    assert!(ack.get("result").is_some(), "{ack}");
    raw.expect("h2 cancelled", |m| {
        m["method"] == "notifications/tasks"
            && m["params"]["taskId"] == "h2"
            && m["params"]["status"] == "cancelled"
    });
    let r = raw.call(json!(6), "result", json!({"id": "h2"}));
    assert_eq!(r["structuredContent"]["state"], "cancelled", "{r}");
    // A task the root does not have.
    raw.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
        "params": {"taskId": "nope"}}));
    let e = raw.answer(&json!(7));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    // A wait for an unknown id stays the plain tool error.
    let r = raw.call(json!(8), "wait", json!({"ids": ["nope"]}));
    assert_eq!(r["isError"], true, "{r}");
    drop(raw);

    // A client without the extension is answered as always (a wait), and may not poll.
    let mut plain = Raw::start(&t);
    let r = plain.call(json!(1), "wait", json!({"ids": ["h1"]}));
    assert_eq!(r["structuredContent"]["allFinished"], true, "{r}");
    plain.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
        "params": {"taskId": "h1"}}));
    assert!(plain.answer(&json!(2)).get("error").is_some());
    drop(plain);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn rmcps_own_client_takes_the_handle_and_polls_it_to_the_result() {
    let t = TestRoot::new();
    // The agent holds the task until the test opens its gate: a task that finished
    // before the handle was made is answered at once, as a plain result (by design),
    // and with a fast pickup an echo could finish first.
    t.client.create_worker(S0).unwrap();
    let w = WorkerProc::start(&t, S0, &agent("step.sh").display().to_string(), &[], &[]);
    let gate = t.path().join("gate");
    runtime().block_on(async {
        let mut cmd = tokio::process::Command::new(bin("conductor"));
        cmd.arg("mcp")
            .arg("--root")
            .arg(t.path())
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("CONDUCTOR_DEPTH");
        let (transport, _) = TokioChildProcess::builder(cmd).spawn().unwrap();
        let hello = ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("conductor-test", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        let mcp = hello.serve(transport).await.expect("initialize");
        let Value::Object(args) =
            json!({"prompt": gate.display().to_string(), "id": "p1", "wait": true})
        else {
            unreachable!()
        };
        let params = CallToolRequestParams::new("submit").with_arguments(args);
        let CallToolResponse::Task(handle) = mcp.call_tool_once(params).await.unwrap() else {
            panic!("a task handle")
        };
        assert_eq!(handle.task.task_id, "p1");
        std::fs::write(&gate, "").unwrap();
        // Polled as the extension says, at most every pollIntervalMs, within the bound.
        let every = Duration::from_millis(handle.task.poll_interval_ms.unwrap_or(1000));
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            let got = mcp.get_task(GetTaskParams::new("p1")).await.unwrap();
            if got.task.status().is_terminal() {
                break got;
            }
            assert_eq!(got.task.status(), TaskStatus::Working, "{got:?}");
            assert!(Instant::now() < deadline, "p1 did not finish in time");
            tokio::time::sleep(every).await;
        };
        assert_eq!(got.task.status(), TaskStatus::Completed);
        let rmcp::model::TaskPayload::Completed { result } = &got.task.payload else {
            panic!("completed: {got:?}")
        };
        assert_eq!(
            result["structuredContent"]["wait"]["tasks"][0]["result"]["output"],
            "working on it\nfinished\n"
        );
        let _ = mcp.cancel().await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn the_words_an_agent_searches_for_find_conductors_tools() {
    let t = TestRoot::new();
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let info = mcp.peer_info().unwrap();
        let instructions = info.instructions.clone().unwrap_or_default().to_lowercase();
        let tools = mcp.list_all_tools().await.unwrap();
        let submit = tools.iter().find(|t| t.name == "submit").unwrap();
        let described = submit.description.as_deref().unwrap_or("").to_lowercase();
        for word in ["parallel", "delegate", "background task", "subagent"] {
            assert!(instructions.contains(word), "instructions lack {word:?}");
            assert!(
                described.contains(word),
                "submit's description lacks {word:?}"
            );
        }
        close(mcp).await;
    });
    assert_nothing_left(t.path());
}

#[test]
fn the_python_sdk_drives_the_new_tools_and_finds_every_answer_fits_its_output_schema() {
    require!(crate::prereq::python_mcp());
    let t = TestRoot::new();
    let w = echo_worker(&t);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_sdk/session.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(bin("conductor"))
        .arg(t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python SDK's session failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["protocol"], "2025-11-25", "{seen}");
    for tool in ["retry", "totals", "submit"] {
        assert!(
            seen["tools"].as_array().unwrap().contains(&json!(tool)),
            "{seen}"
        );
    }
    let s1 = t.client.result_of(&TaskId::from("s1")).unwrap().unwrap();
    let waited = &seen["submitWait"]["wait"]["tasks"][0];
    assert_eq!(
        waited["result"]["output"],
        conductor::verbs::chain::chained_prompt("second", Some(&s1)),
        "{seen}"
    );
    let told = seen["progress"].as_array().unwrap();
    assert!(
        told.iter().any(|m| m.as_str().unwrap_or("").contains("s2")),
        "progress of s2 reached the SDK's callback: {seen}"
    );
    assert_eq!(seen["retry"]["id"], "s1-r1", "{seen}");
    assert_eq!(seen["totals"]["total"]["tasks"], 3, "{seen}");
    assert_eq!(seen["totals"]["total"]["done"], 3, "{seen}");
    drop(w);
    assert_nothing_left(t.path());
}
