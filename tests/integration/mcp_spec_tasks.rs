//! The MCP spec's Tasks utility in its 2025-11-25 form (`params.task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`), as raw JSON-RPC over `conductor mcp`'s stdio: a conductor task is the MCP task.

use std::process::Command;
use std::time::Duration;

use conductor::{Slot, Task, TaskId};
use serde_json::{json, Value};

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot, WorkerProc};
use crate::mcp_push::Raw;

/// What a client of the 2025-11-25 form declares.
fn tasks_client() -> Value {
    json!({"tasks": {"list": {}, "cancel": {}}})
}

fn request(raw: &mut Raw, id: &str, method: &str, params: Value) -> Value {
    raw.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    raw.answer(&json!(id))
}

/// `tools/call` of `tool` with `params.task`.
fn call_as_task(raw: &mut Raw, id: &str, tool: &str, args: Value) -> Value {
    request(
        raw,
        id,
        "tools/call",
        json!({"name": tool, "arguments": args, "task": {"ttl": 60000}}),
    )
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

/// A conforming spec `Task` for `id`.
fn assert_task(t: &Value, id: &str, status: &str) {
    assert_eq!(
        (&t["taskId"], &t["status"]),
        (&json!(id), &json!(status)),
        "{t}"
    );
    assert!(
        t["createdAt"].is_string() && t["lastUpdatedAt"].is_string(),
        "{t}"
    );
    assert!(
        t.get("ttl").is_some_and(Value::is_null),
        "ttl: unlimited: {t}"
    );
    assert!(t["pollInterval"].is_u64(), "{t}");
}

/// `conductor tasks --json`'s state of task `id`.
fn cli_state(t: &TestRoot, id: &str) -> Value {
    let out = Command::new(bin("conductor"))
        .args(["tasks", "--json", "--all", "--root"])
        .arg(t.path())
        .env("CONDUCTOR_HOME", t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id)
        .map(|x| x["state"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_tasks_client_submits_as_a_task_polls_it_fetches_its_result_later_lists_and_cancels() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    // The agent prints a line, then waits until the file its prompt names exists.
    let w = WorkerProc::start(
        &t,
        Slot(0),
        &agent("step.sh").display().to_string(),
        &[],
        &[],
    );
    let hold = t.dir.path().join("hold");
    let mut raw = Raw::start_with(&t, tasks_client());
    let init = raw.seen[0].clone();
    assert_eq!(
        init["result"]["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    let tools = request(&mut raw, "l", "tools/list", json!({}));
    for tool in tools["result"]["tools"].as_array().unwrap() {
        let support = &tool["execution"]["taskSupport"];
        match tool["name"].as_str().unwrap() {
            "submit" | "wait" => assert_eq!(support, "optional", "{tool}"),
            _ => assert!(tool.get("execution").is_none(), "{tool}"),
        }
    }

    // submit as a task: a CreateTaskResult at once, the conductor id its taskId.
    let created = call_as_task(
        &mut raw,
        "c1",
        "submit",
        json!({"prompt": hold.display().to_string(), "id": "st-1", "wait": true}),
    );
    let task = created["result"]["task"].clone();
    assert_task(&task, "st-1", "working");
    assert!(
        created["result"]["_meta"]["io.modelcontextprotocol/model-immediate-response"]
            .as_str()
            .is_some_and(|m| m.contains("st-1")),
        "{created}"
    );
    assert!(created["result"].get("content").is_none(), "{created}");
    let got = request(&mut raw, "g1", "tasks/get", json!({"taskId": "st-1"}));
    assert_task(&got["result"], "st-1", "working");

    // tasks/result blocks until the task has finished: the agent waits for `hold`.
    raw.send(
        json!({"jsonrpc": "2.0", "id": "r1", "method": "tasks/result",
        "params": {"taskId": "st-1"}}),
    );
    let running = "working on worker slot 0";
    if task["statusMessage"] != running {
        // The worker took it after the answer: the client is told.
        raw.expect("told it runs", |m| {
            m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == "st-1"
                && m["params"]["statusMessage"] == running
        });
    }
    let got = request(&mut raw, "g2", "tasks/get", json!({"taskId": "st-1"}));
    assert_task(&got["result"], "st-1", "working");
    assert!(
        !raw.seen.iter().any(|m| m["id"] == "r1"),
        "tasks/result answered before the task finished"
    );
    std::fs::write(&hold, "").unwrap();
    let result = raw.answer(&json!("r1"))["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": "st-1"}),
        "{result}"
    );
    // What submit with wait would have answered.
    let answer = &result["structuredContent"];
    assert_eq!(
        (&answer["id"], &answer["state"]),
        (&json!("st-1"), &json!("done")),
        "{result}"
    );
    assert_eq!(answer["wait"]["allFinished"], true, "{result}");
    assert_eq!(
        answer["wait"]["tasks"][0]["result"]["output"], "working on it\nfinished\n",
        "{result}"
    );
    raw.expect("told it completed", |m| {
        m["method"] == "notifications/tasks/status"
            && m["params"]["taskId"] == "st-1"
            && m["params"]["status"] == "completed"
    });
    let got = request(&mut raw, "g3", "tasks/get", json!({"taskId": "st-1"}));
    assert_task(&got["result"], "st-1", "completed");
    let listed = request(&mut raw, "ls", "tasks/list", json!({}));
    let st1 = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["taskId"] == "st-1")
        .cloned()
        .unwrap_or_else(|| panic!("st-1 not listed: {listed}"));
    assert_task(&st1, "st-1", "completed");
    assert!(listed["result"].get("nextCursor").is_none(), "{listed}");

    // A running task cancelled: the answer comes once its worker has stopped it.
    let never = t.dir.path().join("never");
    // Its progressToken stays valid for the task's lifetime: each change is progress.
    let created = request(
        &mut raw,
        "c3",
        "tools/call",
        json!({"name": "submit", "arguments": {"prompt": never.display().to_string(), "id": "st-3"},
            "task": {}, "_meta": {"progressToken": "tok3"}}),
    );
    assert_task(&created["result"]["task"], "st-3", "working");
    if created["result"]["task"]["statusMessage"] != running {
        raw.expect("told st-3 runs", |m| {
            m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == "st-3"
                && m["params"]["statusMessage"] == running
        });
    }
    let cancelled = request(&mut raw, "x3", "tasks/cancel", json!({"taskId": "st-3"}));
    assert_task(&cancelled["result"], "st-3", "cancelled");
    assert_eq!(cli_state(&t, "st-3"), "cancelled");
    raw.expect("progress: st-3 cancelled", |m| {
        m["method"] == "notifications/progress"
            && m["params"]["progressToken"] == "tok3"
            && m["params"]["message"]
                .as_str()
                .is_some_and(|s| s.starts_with("task st-3: cancelled"))
    });

    // wait for one task, as a task; tasks/cancel cancels the conductor task. No worker
    // runs codex here, so it stays queued.
    let r = raw.call(
        json!("s2"),
        "submit",
        json!({"prompt": "p", "id": "st-2", "agent": "codex"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    let created = call_as_task(&mut raw, "c2", "wait", json!({"ids": ["st-2"]}));
    assert_task(&created["result"]["task"], "st-2", "working");
    assert_eq!(
        created["result"]["task"]["statusMessage"], "queued",
        "{created}"
    );
    let cancelled = request(&mut raw, "x1", "tasks/cancel", json!({"taskId": "st-2"}));
    assert_task(&cancelled["result"], "st-2", "cancelled");
    assert_eq!(cli_state(&t, "st-2"), "cancelled");
    // Its result is what the wait would have answered.
    let result = request(&mut raw, "r2", "tasks/result", json!({"taskId": "st-2"}));
    assert_eq!(
        result["result"]["structuredContent"]["tasks"][0]["state"], "cancelled",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], "st-2",
        "{result}"
    );
    // A task already ended cannot be cancelled.
    let again = request(&mut raw, "x2", "tasks/cancel", json!({"taskId": "st-2"}));
    assert_eq!(error_code(&again), -32602, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("terminal status 'cancelled'"),
        "{again}"
    );

    // Unknown tasks and bad requests: the spec's errors.
    for (i, method) in ["tasks/get", "tasks/result", "tasks/cancel"]
        .iter()
        .enumerate()
    {
        let e = request(
            &mut raw,
            &format!("u{i}"),
            method,
            json!({"taskId": "nope"}),
        );
        assert_eq!(error_code(&e), -32602, "{method}: {e}");
    }
    let e = request(
        &mut raw,
        "u9",
        "tasks/list",
        json!({"cursor": "not-a-cursor"}),
    );
    assert_eq!(error_code(&e), -32602, "{e}");
    let e = call_as_task(&mut raw, "f1", "status", json!({}));
    assert_eq!(error_code(&e), -32601, "a tool without task support: {e}");
    let e = call_as_task(&mut raw, "f2", "wait", json!({"ids": ["st-1", "st-2"]}));
    assert_eq!(error_code(&e), -32602, "{e}");
    let e = call_as_task(&mut raw, "f3", "submit", json!({"prompt": ""}));
    assert_eq!(error_code(&e), -32602, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("prompt"),
        "{e}"
    );
    let e = call_as_task(&mut raw, "f4", "wait", json!({"ids": ["nope"]}));
    assert_eq!(error_code(&e), -32602, "{e}");
    drop(raw);

    // Another session (the server restarted) finds the tasks on the root.
    let mut again = Raw::start_with(&t, tasks_client());
    let got = request(&mut again, "g", "tasks/get", json!({"taskId": "st-1"}));
    assert_task(&got["result"], "st-1", "completed");
    let result = request(&mut again, "r", "tasks/result", json!({"taskId": "st-1"}));
    assert_eq!(
        result["result"]["structuredContent"]["tasks"][0]["result"]["output"],
        "working on it\nfinished\n",
        "{result}"
    );
    drop(again);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn tasks_list_pages_through_every_task_on_the_root_once() {
    let t = TestRoot::new();
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let n = conductor::tasks::list::DEFAULT_LIMIT + 7;
    for i in 0..n {
        let mut task = Task::new(format!("p{i}"));
        task.id = Some(TaskId::from(format!("pg-{i}").as_str()));
        queue.submit(&task).unwrap();
    }
    let mut raw = Raw::start_with(&t, tasks_client());
    let mut seen = Vec::new();
    let mut cursor: Option<Value> = None;
    for page in 0.. {
        assert!(page < 3, "more pages than tasks: {seen:?}");
        let params = cursor.take().map_or(json!({}), |c| json!({"cursor": c}));
        let listed = request(&mut raw, &format!("p{page}"), "tasks/list", params);
        for task in listed["result"]["tasks"].as_array().unwrap() {
            assert_eq!(task["status"], "working", "{task}");
            seen.push(task["taskId"].as_str().unwrap().to_string());
        }
        match listed["result"].get("nextCursor") {
            Some(c) => cursor = Some(c.clone()),
            None => break,
        }
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((seen.len(), unique.len()), (n, n), "{seen:?}");
    drop(raw);
    assert_nothing_left(t.path());
}

#[test]
fn a_client_that_declares_no_tasks_gets_none_and_its_task_field_is_ignored() {
    let t = TestRoot::new();
    for caps in [
        json!({}),
        // The SEP-2663 extension's clients are served by rmcp's form, not this one.
        json!({"tasks": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}),
    ] {
        let mut raw = Raw::start_with(&t, caps.clone());
        let init = raw.seen[0].clone();
        assert!(
            init["result"]["capabilities"].get("tasks").is_none(),
            "{caps}: {init}"
        );
        let tools = request(&mut raw, "l", "tools/list", json!({}));
        assert!(
            tools["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t.get("execution").is_none()),
            "{tools}"
        );
        // Not declared, so the call runs as usual (the spec has a receiver without the
        // capability ignore `task`).
        let id = format!("plain-{}", caps.as_object().unwrap().len());
        let r = call_as_task(&mut raw, "c", "submit", json!({"prompt": "p", "id": id}));
        assert_eq!(
            r["result"]["structuredContent"]["id"],
            json!(id),
            "{caps}: {r}"
        );
        assert!(r["result"].get("task").is_none(), "{r}");
        let e = request(&mut raw, "ls", "tasks/list", json!({}));
        assert!(e.get("error").is_some(), "{caps}: {e}");
        drop(raw);
    }
    assert_nothing_left(t.path());
}

#[test]
fn a_pending_tasks_result_holds_one_subscription_on_the_shared_watcher_until_cancelled() {
    let t = TestRoot::new();
    let mut raw = Raw::start_with(&t, tasks_client());
    // No worker: the task stays queued, so its result is waited for.
    let r = raw.call(json!("s"), "submit", json!({"prompt": "p", "id": "pend-1"}));
    assert_eq!(r["isError"], false, "{r}");
    let mut q = 0;
    let mut subscriptions = |raw: &mut Raw| {
        q += 1;
        raw.server_status(q)["watcherSubscriptions"].clone()
    };
    assert_eq!(subscriptions(&mut raw), 0);
    raw.send(
        json!({"jsonrpc": "2.0", "id": "r", "method": "tasks/result",
        "params": {"taskId": "pend-1"}}),
    );
    wait_until(
        Duration::from_secs(30),
        "the result's wait subscribed",
        || subscriptions(&mut raw) == 1,
    );
    raw.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "r", "reason": "test"}}),
    );
    wait_until(Duration::from_secs(5), "the cancelled wait freed", || {
        subscriptions(&mut raw) == 0
    });
    // Cancelled requests are not answered; the server serves on.
    let got = request(&mut raw, "g", "tasks/get", json!({"taskId": "pend-1"}));
    assert_task(&got["result"], "pend-1", "working");
    assert!(!raw.seen.iter().any(|m| m["id"] == "r"), "{:?}", raw.seen);
    drop(raw);
    assert_nothing_left(t.path());
}
