//! Tests of the one task description: each field is a CLI flag, an MCP argument with a description, and a task.json field that round-trips.

use std::collections::BTreeSet;

use clap::Args as _;
use serde_json::{json, Map, Value};

use super::*;

/// The spec's JSON Schema properties (`TaskSpec` and `QueueSpec` together).
fn properties() -> Map<String, Value> {
    let mut all = Map::new();
    for schema in [
        schemars::schema_for!(TaskSpec),
        schemars::schema_for!(QueueSpec),
    ] {
        let v = serde_json::to_value(&schema).unwrap();
        all.extend(v["properties"].as_object().unwrap().clone());
    }
    all
}

/// `timeoutSecs` → `timeout_secs`: the Rust field, which clap names the argument by.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A valid value of the property's JSON type; the few fields whose values are checked
/// for more than a type get a value that passes.
fn sample(name: &str, schema: &Value) -> Value {
    match name {
        "agent" => return json!("claude"),
        "permissionMode" => return json!("plan"),
        "dir" => return json!(std::env::temp_dir()),
        "id" => return json!("spec-t1"),
        "allowedTools" => return json!(["Read"]),
        "after" => return json!(["spec-t0"]),
        _ => {}
    }
    let ty = schema["type"].clone();
    let ty = ty
        .as_array()
        .and_then(|a| a.iter().find(|t| *t != "null").cloned())
        .unwrap_or(ty);
    match ty.as_str() {
        Some("string") => json!("x"),
        Some("integer") => json!(3),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        Some("array") => json!(["a"]),
        Some("object") => json!({"A": "b"}),
        // Any JSON (`context`).
        _ => json!({"any": [1]}),
    }
}

/// Adding a task field is one change: a field of `TaskOptions`, `TaskSpec` or
/// `QueueSpec` (with its doc and `apply` line) is at once a command-line flag of
/// `submit` (clap), an MCP argument with a description (schemars, serde), and a field
/// of task.json that survives a write and a read. A field forgotten in `apply` or
/// missing a name on one surface fails here, naming it.
#[test]
fn every_field_is_a_flag_an_mcp_argument_and_a_task_json_field() {
    let props = properties();
    assert!(props.len() >= 20, "{props:?}");
    let cli = QueueSpec::augment_args(TaskSpec::augment_args(clap::Command::new("t")));
    let flags: BTreeSet<String> = cli
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    // Command-line only: how the prompt is read, and the negation of `worktree`.
    let cli_only = ["file", "no_worktree"];
    let from_schema: BTreeSet<String> = props
        .keys()
        .map(|k| snake(k))
        .chain(cli_only.map(String::from))
        .collect();
    assert_eq!(flags, from_schema, "a field is missing from the CLI or MCP");

    let mut given = Map::new();
    for (name, schema) in &props {
        let has_doc = schema["description"].is_string() || schema["title"].is_string();
        assert!(has_doc, "`{name}` has no description: {schema}");
        given.insert(name.clone(), sample(name, schema));
    }
    #[derive(Deserialize)]
    struct Both {
        #[serde(flatten)]
        task: TaskSpec,
        #[serde(flatten)]
        queue: QueueSpec,
    }
    let both: Both = serde_json::from_value(Value::Object(given.clone())).unwrap();
    let mut task = both.task.into_task().unwrap();
    both.queue.apply(&mut task).unwrap();
    let written = serde_json::to_value(&task).unwrap();
    let read = Task::from_bytes(
        std::path::Path::new("task.json"),
        &serde_json::to_vec(&written).unwrap(),
    )
    .unwrap();
    assert_eq!(serde_json::to_value(&read).unwrap(), written);
    // Where a field lands in task.json when it is not a field of the same name.
    let nested = |name: &str| match name {
        "until" => "/until/check".to_string(),
        "untilRounds" => "/until/rounds".to_string(),
        _ => format!("/{name}"),
    };
    for name in given.keys() {
        assert!(
            written.pointer(&nested(name)).is_some_and(|v| !v.is_null()),
            "`{name}` does not reach task.json (a line missing in `apply`?): {written}"
        );
    }
}

/// The same field given on the command line and over MCP makes the same task.
#[test]
fn the_command_line_and_mcp_make_the_same_task() {
    use clap::FromArgMatches as _;
    let line = [
        "t",
        "do it",
        "--id",
        "42",
        "--timeout",
        "90s",
        "--agent-preset",
        "claude",
        "--allowed-tools",
        "Read,Edit",
        "--env",
        "A=b",
        "--label",
        "l1",
        "--label",
        "l1",
        "--worktree",
        "--base",
        "main",
        "--include-uncommitted",
        "--context",
        r#"{"k":1}"#,
        "--key",
        "k",
        "--priority",
        "7",
        "--after",
        "a1,a2",
    ];
    let cmd = QueueSpec::augment_args(TaskSpec::augment_args(clap::Command::new("t")));
    let m = cmd.try_get_matches_from(line).unwrap();
    let (spec, queue) = (
        TaskSpec::from_arg_matches(&m).unwrap(),
        QueueSpec::from_arg_matches(&m).unwrap(),
    );
    let mut from_cli = spec.into_task().unwrap();
    queue.apply(&mut from_cli).unwrap();

    let args = json!({
        "prompt": "do it", "id": 42, "timeoutSecs": 90, "agent": "claude",
        "allowedTools": ["Read", "Edit"], "env": {"A": "b"}, "labels": ["l1"],
        "worktree": true, "base": "main", "includeUncommitted": true, "context": {"k": 1},
        "key": "k", "priority": 7, "after": ["a1", "a2"],
    });
    let spec: TaskSpec = serde_json::from_value(args.clone()).unwrap();
    let queue: QueueSpec = serde_json::from_value(args).unwrap();
    let mut from_mcp = spec.into_task().unwrap();
    queue.apply(&mut from_mcp).unwrap();
    assert_eq!(
        serde_json::to_value(&from_cli).unwrap(),
        serde_json::to_value(&from_mcp).unwrap()
    );
    // No flag given: the worktree left to the root's default; --no-worktree: off.
    let m = cmd_spec().try_get_matches_from(["t", "x"]).unwrap();
    let t = TaskSpec::from_arg_matches(&m).unwrap().into_task().unwrap();
    assert_eq!((t.worktree, t.include_uncommitted), (None, None));
    let m = cmd_spec()
        .try_get_matches_from(["t", "x", "--no-worktree"])
        .unwrap();
    let t = TaskSpec::from_arg_matches(&m).unwrap().into_task().unwrap();
    assert_eq!(t.worktree, Some(false));
}

fn cmd_spec() -> clap::Command {
    TaskSpec::augment_args(clap::Command::new("t"))
}
