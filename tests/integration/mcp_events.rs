//! `conductor mcp` pushes what needs a person (issue 37, item 7): `notifications/message` for a task needing approval and for a daily budget spent, for the whole session.

use std::fs;

use conductor::{Slot, TaskId};
use serde_json::{json, Value};

use crate::harness::TestRoot;
use crate::mcp_push::Raw;

fn told(v: &Value, event: &str) -> bool {
    v["method"] == "notifications/message" && v["params"]["data"]["event"] == event
}

#[test]
fn the_mcp_server_tells_of_a_question_waiting_and_of_a_budget_spent() {
    let t = TestRoot::new();
    let w = t.client.worker(Slot(0));
    w.create_files().unwrap();
    let q = json!({"schema": 1, "id": "qm1", "taskId": "asker", "toolName": "Bash",
                   "input": {"command": "make deploy"}, "askedAt": "2026-01-01T00:00:00Z",
                   "deadline": "2099-01-01T00:10:00Z", "pid": 1});
    fs::write(w.dir.join("approval.json"), q.to_string()).unwrap();
    let mut mcp = Raw::start(&t);
    // The question waiting when the session began is told: it still waits for a person.
    let note = mcp.expect("a needsApproval message", |v| told(v, "needsApproval"));
    let p = &note["params"];
    assert_eq!(p["level"], "warning", "{note}");
    assert_eq!(p["logger"], "conductor", "{note}");
    assert_eq!(p["data"]["taskId"], "asker", "{note}");
    assert_eq!(p["data"]["asks"], "Bash: make deploy", "{note}");
    assert!(
        p["data"]["message"]
            .as_str()
            .unwrap()
            .contains("conductor approve asker"),
        "{note}"
    );

    // A budget spent while the session runs: its mark is made as a worker makes it.
    fs::write(t.path().join("config.json"), r#"{"dailyBudgetUsd": 0.01}"#).unwrap();
    let root = t.client.root();
    conductor::budget::record(root, &TaskId::from("paid"), None, 0.02).unwrap();
    let slot = root.worker(conductor::Slot(0));
    conductor::hooks::budget::after_spend(root, &slot, &TaskId::from("paid"), None);
    let note = mcp.expect("a budgetReached message", |v| told(v, "budgetReached"));
    let d = &note["params"]["data"];
    assert_eq!(d["budget"], "root", "{note}");
    assert_eq!(d["taskId"], "paid", "{note}");
    assert_eq!(d["spentUsd"], 0.02, "{note}");
    // Each told once.
    let n = |e: &str| mcp.seen.iter().filter(|v| told(v, e)).count();
    assert_eq!((n("needsApproval"), n("budgetReached")), (1, 1));
}
