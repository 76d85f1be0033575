//! Approvals: a real Claude Code agent asks for a tool its worker does not pre-approve, and `conductor approve|deny` (or nobody, until the timeout) answers it.

use std::fs;

use serde_json::{json, Value};

use crate::harness::{assert_nothing_left, run_conductor, wait_until, TestRoot};
use crate::mcp::{call, close, connect, runtime, tool_error};
use crate::real_agents::{
    claude_env, conversation_text, need_agent, result_of, submit, task_dir, ModelServer,
    RealWorker, BOUND,
};

/// `conductor tasks --json`'s entry for `id`.
fn listed(t: &TestRoot, id: &str) -> Value {
    let out = run_conductor(t, &["tasks", "--json"], 0);
    let all: Value = serde_json::from_str(&out.stdout).expect("tasks --json");
    let list = all
        .as_array()
        .cloned()
        .or_else(|| all["tasks"].as_array().cloned());
    list.unwrap_or_default()
        .into_iter()
        .find(|x| x["id"] == id)
        .unwrap_or(Value::Null)
}

/// Task `id` as the library lists it (what `tasks --json` prints), cheaply.
fn summary(t: &TestRoot, id: &str) -> Value {
    let all = t
        .client
        .list_tasks(&conductor::tasks::ListOptions::default())
        .expect("list tasks");
    all.into_iter()
        .find(|s| s.id.to_string() == id)
        .map_or(Value::Null, |s| serde_json::to_value(s).unwrap())
}

/// Wait until task `id` needs approval for a command containing `needle`.
fn asked(t: &TestRoot, w: &RealWorker, id: &str, needle: &str) -> Value {
    let mut seen = Value::Null;
    wait_until(BOUND, &format!("task {id} to ask about {needle}"), || {
        seen = summary(t, id);
        if seen["state"] == "done" || seen["state"] == "failed" {
            panic!("the task ended without asking: {seen}\n{}", w.stderr());
        }
        seen["state"] == "needs approval"
            && seen["approval"]["input"]["command"]
                .as_str()
                .is_some_and(|c| c.contains(needle))
    });
    seen
}

#[test]
fn claude_asks_for_bash_it_may_not_use_and_a_person_approves_one_call_and_denies_another() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Bash", "input": {"command": "sh -c 'echo yes > approved.txt'",
                                                  "description": "make a file"}}]},
            {"tools": [{"name": "Bash", "input": {"command": "sh -c 'echo no > denied.txt'",
                                                  "description": "make another"}}]},
            {"text": "One ran, one was denied."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    // Bash is not among the tools this worker pre-approves: its agent asks for it.
    let w = RealWorker::start(
        &t,
        &["--preset", "claude", "--allowed-tools", "Read,Edit,Write"],
        &env,
    );
    let id = submit(&t, "ask1", "make the files", &dir);

    asked(&t, &w, "ask1", "approved.txt");
    let first = listed(&t, "ask1");
    assert_eq!(first["state"], "needs approval", "{first}");
    assert_eq!(first["approval"]["toolName"], "Bash", "{first}");
    let status = run_conductor(&t, &["status"], 0).stdout;
    assert!(status.contains("needs approval"), "{status}");
    assert!(
        status.contains("conductor approve ask1"),
        "status says how to answer: {status}"
    );
    let json = run_conductor(&t, &["status", "--json"], 0).stdout;
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["workers"][0]["approval"]["toolName"], "Bash", "{json}");
    assert!(
        !dir.join("approved.txt").exists(),
        "nothing runs before the answer"
    );
    let out = run_conductor(&t, &["approve", "ask1"], 0).stdout;
    assert_eq!(
        out,
        "approved task ask1's Bash: sh -c 'echo yes > approved.txt'\n"
    );

    asked(&t, &w, "ask1", "denied.txt");
    run_conductor(&t, &["deny", "ask1", "--reason", "not on a Friday"], 0);

    let r = result_of(&t, &id, &w);
    // (Whether a task with a refused call counts as a success is issue 35.2's to say.)
    assert_eq!(
        r.output,
        "One ran, one was denied.",
        "{r:?}\n{}",
        w.stderr()
    );
    assert_eq!(
        fs::read_to_string(dir.join("approved.txt")).unwrap(),
        "yes\n",
        "the approved call ran"
    );
    assert!(!dir.join("denied.txt").exists(), "the denied call did not");
    // The model was told why, in the denied call's tool result.
    let sent = server.scripted();
    assert_eq!(sent.len(), 3, "{sent:?}");
    let told = conversation_text(&sent[2]);
    assert!(told.contains("not on a Friday"), "{told}");
    // Nothing is left to answer, and saying so is a clear refusal (exit 3).
    let again = run_conductor(&t, &["approve", "ask1"], 3);
    assert!(
        again
            .stderr
            .contains("task ask1 asks no approval: it is done"),
        "{}",
        again.stderr
    );
    let slot_dir = t.path().join("workers/0");
    assert!(!slot_dir.join("approval.json").exists());
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn claude_is_denied_what_nobody_approves_within_the_approval_timeout() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    // The approvalCallback hook is told of the question as it is asked.
    let told_json = t.dir.path().join("told.json");
    let told_env = t.dir.path().join("told.env");
    let hook = format!(
        "cat > {}; echo \"$CONDUCTOR_EVENT $CONDUCTOR_TASK_ID $CONDUCTOR_SLOT $CONDUCTOR_ASKS\" > {}",
        told_json.display(),
        told_env.display()
    );
    let config = json!({"approvalTimeoutSecs": 2, "approvalCallback": hook});
    fs::write(t.path().join("config.json"), config.to_string()).unwrap();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Bash", "input": {"command": "sh -c 'echo x > late.txt'"}}]},
            {"text": "Nobody answered."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    // Bash is not pre-approved: the agent asks, and nobody answers.
    let w = RealWorker::start(&t, &["--preset", "claude", "--allowed-tools", "Read"], &env);
    let id = submit(&t, "late1", "try", &dir);
    let r = result_of(&t, &id, &w);
    assert_eq!(r.output, "Nobody answered.", "{r:?}\n{}", w.stderr());
    assert!(!dir.join("late.txt").exists());
    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let told = conversation_text(&sent[1]);
    assert!(
        told.contains("nobody answered within 2s (approvalTimeoutSecs in config.json)"),
        "{told}"
    );
    wait_until(BOUND, "the approval hook to have run", || told_env.exists());
    let env = fs::read_to_string(&told_env).unwrap();
    assert!(
        env.starts_with("needsApproval late1 0 Bash: sh -c 'echo x > late.txt'"),
        "{env}"
    );
    let event: Value = serde_json::from_slice(&fs::read(&told_json).unwrap()).unwrap();
    assert_eq!(event["event"], "needsApproval", "{event}");
    assert_eq!(event["taskId"], "late1", "{event}");
    assert_eq!(event["slot"], 0, "{event}");
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn a_task_cancelled_while_its_agent_asks_ends_cancelled_leaving_no_question_and_no_process() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Bash", "input": {"command": "sh -c 'echo x > never.txt'"}}]},
            {"text": "unreachable"},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude", "--allowed-tools", "Read"], &env);
    let id = submit(&t, "stop1", "try", &dir);
    asked(&t, &w, "stop1", "never.txt");
    run_conductor(&t, &["cancel", "stop1"], 0);
    let r = result_of(&t, &id, &w);
    assert_eq!(r.outcome, Some(conductor::Outcome::Cancelled), "{r:?}");
    assert!(!dir.join("never.txt").exists());
    let slot_dir = t.path().join("workers/0");
    let left: Vec<String> = fs::read_dir(&slot_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("approval"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let e = run_conductor(&t, &["approve", "stop1"], 3).stderr;
    assert!(e.contains("it is cancelled"), "{e}");
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn approving_or_denying_a_task_that_asks_nothing_is_refused_saying_why() {
    let t = TestRoot::new();
    run_conductor(&t, &["submit", "later", "--id", "q1"], 0);
    let e = run_conductor(&t, &["approve", "q1"], 3).stderr;
    assert!(e.contains("task q1 asks no approval: it is queued"), "{e}");
    let e = run_conductor(&t, &["deny", "q1", "--reason", "no"], 3).stderr;
    assert!(e.contains("asks no approval"), "{e}");
    let e = run_conductor(&t, &["approve", "nope"], 2).stderr;
    assert!(e.contains("nope"), "{e}");
    // The MCP tools say the same, as tool errors.
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let r = call(&mcp, "approve", json!({"id": "q1"})).await;
        assert!(tool_error(&r).contains("asks no approval: it is queued"));
        let r = call(&mcp, "deny", json!({"id": "q1", "reason": "no"})).await;
        assert!(tool_error(&r).contains("asks no approval"));
        close(mcp).await;
    });
    assert_nothing_left(t.path());
}

#[test]
fn a_question_is_answered_over_mcp_and_listed_as_needing_approval() {
    // The question as an asking agent leaves it (no agent needed to read or answer it).
    let t = TestRoot::new();
    let w = t.client.worker(conductor::Slot(0));
    w.create_files().unwrap();
    let task = conductor::Task::new("asks").with_id("m1");
    let id = t.client.write_task(conductor::Slot(0), &task).unwrap();
    fs::rename(w.task(), w.running()).unwrap();
    let q = json!({"schema": 1, "id": "qq1", "taskId": "m1", "toolName": "Bash",
                   "input": {"command": "make deploy"}, "askedAt": "2026-01-01T00:00:00Z",
                   "deadline": "2026-01-01T00:10:00Z", "pid": 1});
    fs::write(w.dir.join("approval.json"), q.to_string()).unwrap();
    let listed = listed(&t, "m1");
    assert_eq!(listed["state"], "needs approval", "{listed}");
    let table = run_conductor(&t, &["tasks"], 0).stdout;
    assert!(table.contains("needs approval"), "{table}");
    let only = run_conductor(&t, &["tasks", "--state", "needs-approval"], 0).stdout;
    assert!(only.contains("m1"), "{only}");
    let running = run_conductor(&t, &["tasks", "--state", "running"], 0).stdout;
    assert!(running.contains("m1"), "still running: {running}");
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        // `result` (and `wait`) on the unfinished task say what it waits for.
        let v = crate::mcp::ok(&call(&mcp, "result", json!({"id": "m1"})).await);
        assert_eq!(v["state"], "needs approval", "{v}");
        assert_eq!(v["approval"]["input"]["command"], "make deploy", "{v}");
        let v = crate::mcp::ok(&call(&mcp, "tasks", json!({})).await);
        assert_eq!(v["tasks"][0]["state"], "needs approval", "{v}");
        let r = call(&mcp, "deny", json!({"id": "m1", "reason": "too late"})).await;
        let v = crate::mcp::ok(&r);
        assert_eq!(v["decision"], "deny", "{v}");
        assert_eq!(v["question"]["toolName"], "Bash", "{v}");
        let r = call(&mcp, "approve", json!({"id": "m1"})).await;
        assert!(tool_error(&r).contains("already answered"));
        close(mcp).await;
    });
    let answer: Value =
        serde_json::from_slice(&fs::read(w.dir.join("approval.qq1.answer.json")).unwrap()).unwrap();
    assert_eq!(answer["decision"], "deny");
    assert_eq!(answer["reason"], "too late");
    assert_eq!(answer["taskId"], id.to_string());
    assert_nothing_left(t.path());
}
