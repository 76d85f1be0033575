//! Arguments `conductor mcp` refuses at the call, as tool errors naming the field, before anything is queued: unknown arguments to any tool, a blank prompt, `worktree: true` outside git, an unknown permission mode; and a `tools/call` without a tool name (-32602).

use serde_json::{json, Value};

use crate::harness::{assert_nothing_left, TestRoot};
use crate::mcp_push::Raw;

#[track_caller]
fn refused(r: &Value, want: &[&str]) {
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    for w in want {
        assert!(text.contains(w), "{text:?} lacks {w:?}");
    }
}

#[test]
fn every_tool_refuses_an_unknown_argument_and_submit_refuses_what_would_fail_later() {
    let t = TestRoot::new();
    t.client.create_worker(conductor::Slot(0)).unwrap();
    let mut raw = Raw::start(&t);
    raw.send(json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}));
    let tools = raw.answer(&json!("list"))["result"]["tools"].clone();
    let names: Vec<String> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.len() >= 17, "{names:?}");
    for (i, name) in names.iter().enumerate() {
        let r = raw.call(json!(100 + i), name, json!({"bogus": 1}));
        refused(&r, &[name, "unknown argument `bogus`"]);
    }
    let not_git = t.dir.path().join("plain");
    std::fs::create_dir(&not_git).unwrap();
    let cases = [
        (
            "submit",
            json!({"prompt": " \n\t "}),
            vec!["`prompt` is blank"],
        ),
        (
            "send",
            json!({"slot": 0, "prompt": "   "}),
            vec!["`prompt` is blank"],
        ),
        (
            "submit",
            json!({"prompt": "x", "worktree": true, "dir": not_git}),
            vec!["`dir`", "git repository"],
        ),
        (
            "submit",
            json!({"prompt": "x", "permissionMode": "godmode"}),
            vec!["`permissionMode`", "godmode"],
        ),
        (
            "send",
            json!({"slot": 0, "prompt": "x", "permissionMode": "godmode"}),
            vec!["`permissionMode`", "godmode"],
        ),
        (
            "submit",
            json!({"prompt": "x", "agent": "gemini", "permissionMode": "acceptEdits"}),
            vec!["`permissionMode`", "gemini"],
        ),
    ];
    for (i, (tool, args, want)) in cases.into_iter().enumerate() {
        let r = raw.call(json!(200 + i), tool, args);
        refused(&r, &want);
    }
    // Nothing was queued or delivered.
    let r = raw.call(json!(300), "tasks", json!({}));
    assert_eq!(r["structuredContent"]["tasks"], json!([]), "{r}");
    // Good arguments still pass.
    let r = raw.call(
        json!(301),
        "submit",
        json!({"prompt": "x", "permissionMode": "plan", "agent": "claude"}),
    );
    assert_eq!(r["isError"], false, "{r}");

    // A call naming no tool is invalid params, not an unknown method.
    for (id, params) in [
        (400, json!({"arguments": {}})),
        (401, json!({"name": 5})),
        (402, json!(null)),
    ] {
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call"});
        if !params.is_null() {
            msg["params"] = params;
        }
        raw.send(msg);
        let e = raw.answer(&json!(id));
        assert_eq!(e["error"]["code"], -32602, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("params.name"),
            "{e}"
        );
    }
    let r = raw.call(json!(500), "status", json!({}));
    assert_eq!(r["isError"], false, "the server reads on: {r}");
    drop(raw);
    assert_nothing_left(t.path());
}
