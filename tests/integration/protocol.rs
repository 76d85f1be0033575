//! The on-disk protocol types: round trips, the original clients' shapes, schema and id rules.

use std::path::Path;

use conductor::fsio;
use conductor::protocol::{self, parse_result, parse_status, SCHEMA};
use conductor::{Error, FileProblem, Outcome, Status, Task, TaskId, TaskResult, WorkerState};
use serde_json::{json, Value};

const TASK_PATH: &str = "/conductor-test/workers/3/task.json";
const STATUS_PATH: &str = "/conductor-test/workers/3/status.json";
const RESULT_PATH: &str = "/conductor-test/workers/3/result.json";

fn task_path() -> &'static Path {
    Path::new(TASK_PATH)
}

/// Parse a task the way a worker does, panicking with the library's message on failure.
fn parse_task(bytes: &[u8]) -> Task {
    Task::from_bytes(task_path(), bytes)
        .unwrap_or_else(|e| panic!("{} should parse, got: {e}", String::from_utf8_lossy(bytes)))
}

/// What we write for a value, re-read as generic JSON (what another client sees).
fn written_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::from_slice(&fsio::to_json_bytes(value)).expect("we write valid JSON")
}

fn full_task() -> Task {
    let mut t = Task::new("refactor the parser\nand \"quote\" things: ünïcode ✓")
        .with_id("task-42.b_c")
        .with_context(json!({"user": "ada", "files": ["a.rs", "b.rs"], "depth": 3}))
        .with_timeout_secs(600);
    t.timestamp = Some(json!("2024-01-14T12:34:56.789Z"));
    t.key = Some("project-x".into());
    t.priority = Some(7);
    t.max_attempts = Some(3);
    t.attempt = Some(2);
    t
}

fn full_status() -> Status {
    let mut s = Status::new(WorkerState::Working);
    s.task_id = Some(TaskId::Number(1705234567890));
    s.started_at = Some("2024-01-14T12:34:56.789Z".into());
    s.heartbeat_at = Some("2024-01-14T12:35:06.789Z".into());
    s.agent_pid = Some(4711);
    s.agent_start_time = Some(123_456);
    s.worker_pid = Some(812);
    s.host = Some("build-box".into());
    s.attempt = Some(1);
    s.output_bytes = Some(12_345);
    s
}

fn full_result() -> TaskResult {
    let mut r = TaskResult::failed(
        TaskId::from("task-42"),
        Outcome::Failure,
        "exit status 3: boom",
    );
    r.output = "partial output\nline 2\n".into();
    r.exit_code = Some(3);
    r.signal = None;
    r.stderr = Some("warning\nboom\n".into());
    r.duration_ms = Some(1234);
    r.started_at = Some("2024-01-14T12:34:56.789Z".into());
    r.attempt = Some(1);
    r.worker = Some(3);
    r.output_truncated = true;
    r.output_file = Some("results/task-42.out".into());
    r
}

#[test]
fn task_round_trips_with_every_field() {
    let task = full_task();
    let bytes = fsio::to_json_bytes(&task);
    assert_eq!(parse_task(&bytes), task);

    let v = written_json(&task);
    assert_eq!(v["schema"], json!(SCHEMA), "we write schema 1: {v}");
    assert_eq!(v["id"], json!("task-42.b_c"));
    assert_eq!(v["timeoutSecs"], json!(600), "fields are camelCase: {v}");
    assert_eq!(v["maxAttempts"], json!(3), "fields are camelCase: {v}");
    assert_eq!(v["context"]["files"], json!(["a.rs", "b.rs"]));
}

#[test]
fn minimal_task_round_trips() {
    let task = Task::new("hi");
    assert_eq!(parse_task(&fsio::to_json_bytes(&task)), task);
    let v = written_json(&task);
    assert_eq!(
        v,
        json!({"schema": 1, "prompt": "hi"}),
        "absent options are not written"
    );
}

#[test]
fn status_round_trips_with_every_field() {
    let status = full_status();
    let bytes = fsio::to_json_bytes(&status);
    let back = parse_status(Path::new(STATUS_PATH), &bytes).expect("parse our own status");
    assert_eq!(back, status);

    let v = written_json(&status);
    assert_eq!(v["status"], json!("working"));
    assert_eq!(
        v["taskId"],
        json!(1705234567890u64),
        "numeric task id stays a number: {v}"
    );
    assert_eq!(v["agentPid"], json!(4711));
    assert!(
        protocol::parse_rfc3339(v["timestamp"].as_str().expect("timestamp is a string")).is_some(),
        "status timestamp is RFC 3339: {v}"
    );
}

#[test]
fn every_worker_state_round_trips() {
    for (state, name) in [
        (WorkerState::Idle, "idle"),
        (WorkerState::Working, "working"),
        (WorkerState::Done, "done"),
        (WorkerState::Error, "error"),
    ] {
        let status = Status::new(state);
        let v = written_json(&status);
        assert_eq!(v["status"], json!(name));
        let back = parse_status(Path::new(STATUS_PATH), &fsio::to_json_bytes(&status)).unwrap();
        assert_eq!(back, status);
        assert_eq!(state.to_string(), name);
    }
}

#[test]
fn result_round_trips_with_every_field() {
    let result = full_result();
    let bytes = fsio::to_json_bytes(&result);
    let back = parse_result(Path::new(RESULT_PATH), &bytes).expect("parse our own result");
    assert_eq!(back, result);

    let v = written_json(&result);
    assert_eq!(v["taskId"], json!("task-42"));
    assert_eq!(v["success"], json!(false));
    assert_eq!(v["error"], json!("exit status 3: boom"));
    assert_eq!(v["outcome"], json!("failure"));
    assert_eq!(v["exitCode"], json!(3));
    assert_eq!(v["outputTruncated"], json!(true));
    assert_eq!(v["outputFile"], json!("results/task-42.out"));
}

#[test]
fn successful_result_writes_error_as_null() {
    let mut r = TaskResult::failed(TaskId::Number(1705234567890), Outcome::Success, "x");
    r.success = true;
    r.error = None;
    r.output = "all done\n".into();

    let v = written_json(&r);
    let obj = v.as_object().expect("result is an object");
    // The original clients read exactly these keys.
    for key in ["taskId", "output", "success", "error", "timestamp"] {
        assert!(obj.contains_key(key), "result.json lacks {key:?}: {v}");
    }
    assert_eq!(
        v["error"],
        Value::Null,
        "error must be present and null on success: {v}"
    );
    assert_eq!(v["success"], json!(true));
    assert_eq!(v["taskId"], json!(1705234567890u64));
    assert!(
        !obj.contains_key("outputTruncated"),
        "false flag not written: {v}"
    );

    let back = parse_result(Path::new(RESULT_PATH), &fsio::to_json_bytes(&r)).unwrap();
    assert_eq!(back, r);
    assert_eq!(back.error, None);
}

#[test]
fn failed_result_carries_a_one_line_reason() {
    let r = TaskResult::failed(
        TaskId::from("t1"),
        Outcome::Interrupted,
        "interrupted: worker pid 812 died",
    );
    let v = written_json(&r);
    assert_eq!(v["success"], json!(false));
    assert_eq!(v["error"], json!("interrupted: worker pid 812 died"));
    assert_eq!(v["outcome"], json!("interrupted"));
}

#[test]
fn js_client_task_keeps_numeric_id_and_context() {
    let original = br#"{"id": 1705234567890, "prompt": "hi", "context": {"a": 1}, "timestamp": "2024-01-14T12:34:56.789Z"}"#;
    let task = parse_task(original);
    assert_eq!(task.id, Some(TaskId::Number(1705234567890)));
    assert_eq!(task.prompt, "hi");
    assert_eq!(task.context, Some(json!({"a": 1})));
    assert_eq!(task.schema, 1, "a file without schema is schema 1");
    assert_eq!(task.id.as_ref().unwrap().to_string(), "1705234567890");

    let bytes = fsio::to_json_bytes(&task);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        v["id"],
        json!(1705234567890u64),
        "id is written back as a number: {v}"
    );
    assert!(
        v["id"].is_u64(),
        "id is written back as a number, not a string: {v}"
    );
    assert!(
        String::from_utf8_lossy(&bytes).contains("\"id\": 1705234567890"),
        "id is written in decimal: {}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(v["context"], json!({"a": 1}));
    assert_eq!(parse_task(&bytes), task, "round trip");
}

#[test]
fn python_client_task_with_float_timestamp_parses() {
    let original = br#"{"id": 1705234567890, "prompt": "hi", "timestamp": 1705234567.89}"#;
    let task = parse_task(original);
    assert_eq!(task.id, Some(TaskId::Number(1705234567890)));
    assert_eq!(task.prompt, "hi");
    assert_eq!(task.context, None);

    let v = written_json(&task);
    assert!(v["id"].is_u64(), "id is written back as a number: {v}");
    assert_eq!(v["id"], json!(1705234567890u64));
    assert_eq!(parse_task(&fsio::to_json_bytes(&task)), task, "round trip");
}

#[test]
fn string_ids_stay_strings() {
    for id in ["task-1", "123", "0", "a.b_c-D"] {
        let bytes = format!(r#"{{"id": "{id}", "prompt": "p"}}"#);
        let task = parse_task(bytes.as_bytes());
        assert_eq!(task.id, Some(TaskId::Text(id.to_string())));
        let v = written_json(&task);
        assert_eq!(
            v["id"],
            json!(id),
            "string id {id:?} must be written back as a string: {v}"
        );
    }
}

#[test]
fn original_status_shapes_parse() {
    let path = Path::new(STATUS_PATH);
    let s = parse_status(
        path,
        br#"{"status":"idle","timestamp":"2024-01-14T12:34:56.789Z"}"#,
    )
    .expect("original idle status");
    assert_eq!(s.status, WorkerState::Idle);
    assert_eq!(s.task_id, None);
    assert_eq!(s.timestamp, "2024-01-14T12:34:56.789Z");

    let s = parse_status(
        path,
        br#"{"status":"working","taskId":1705234567890,"timestamp":"2024-01-14T12:34:56.789Z"}"#,
    )
    .expect("original working status");
    assert_eq!(s.status, WorkerState::Working);
    assert_eq!(s.task_id, Some(TaskId::Number(1705234567890)));

    let s = parse_status(
        path,
        br#"{"status":"done","taskId":"t-1","timestamp":1705234567.89}"#,
    )
    .expect("status with a Python float timestamp");
    assert_eq!(s.status, WorkerState::Done);
    assert_eq!(s.task_id, Some(TaskId::from("t-1")));

    let err = parse_status(path, br#"{"status":"sleeping","timestamp":"x"}"#)
        .expect_err("an unknown state must be refused");
    let msg = err.to_string();
    assert!(msg.contains(STATUS_PATH), "message names the file: {msg}");
}

#[test]
fn original_result_shape_parses() {
    let r = parse_result(
        Path::new(RESULT_PATH),
        br#"{"taskId": 1705234567890, "output": "hello\n", "success": true, "error": null, "timestamp": "2024-01-14T12:34:56.789Z"}"#,
    )
    .expect("original result");
    assert_eq!(r.task_id, TaskId::Number(1705234567890));
    assert!(r.success);
    assert_eq!(r.error, None);
    assert_eq!(r.output, "hello\n");
}

#[test]
fn unknown_fields_are_ignored() {
    let task = parse_task(
        br#"{"prompt": "hi", "id": "x1", "futureField": {"deep": [1, 2]}, "another": null, "priority": 2}"#,
    );
    assert_eq!(task.prompt, "hi");
    assert_eq!(task.id, Some(TaskId::from("x1")));
    assert_eq!(task.priority, Some(2));

    let s = parse_status(
        Path::new(STATUS_PATH),
        br#"{"status":"done","timestamp":"2024-01-14T12:34:56.789Z","gpu":"A100","extra":[1]}"#,
    )
    .expect("status with unknown fields");
    assert_eq!(s.status, WorkerState::Done);

    let r = parse_result(
        Path::new(RESULT_PATH),
        br#"{"taskId":"x1","output":"o","success":true,"error":null,"timestamp":"t","costUsd":0.12,"tokens":{"in":1}}"#,
    )
    .expect("result with unknown fields");
    assert_eq!(r.task_id, TaskId::from("x1"));
    assert!(r.success);
}

/// An error that names `path` and mentions the schema.
fn assert_schema_refusal(err: Error, path: &str) {
    let msg = err.to_string();
    assert!(msg.contains(path), "message names the file {path}: {msg}");
    assert!(
        msg.to_lowercase().contains("schema"),
        "message says schema: {msg}"
    );
    assert!(
        matches!(
            err,
            Error::BadFile {
                problem: FileProblem::Schema { found: 2, .. },
                ..
            }
        ),
        "expected a schema refusal, got {err:?}"
    );
}

#[test]
fn newer_schema_is_refused_with_a_clear_error() {
    let err = Task::from_bytes(task_path(), br#"{"schema": 2, "prompt": "hi", "id": "a"}"#)
        .expect_err("schema 2 task must be refused");
    assert_schema_refusal(err, TASK_PATH);

    let err = parse_status(
        Path::new(STATUS_PATH),
        br#"{"schema": 2, "status": "idle", "timestamp": "2024-01-14T12:34:56.789Z"}"#,
    )
    .expect_err("schema 2 status must be refused");
    assert_schema_refusal(err, STATUS_PATH);

    let err = parse_result(
        Path::new(RESULT_PATH),
        br#"{"schema": 2, "taskId": "a", "output": "", "success": true, "error": null, "timestamp": ""}"#,
    )
    .expect_err("schema 2 result must be refused");
    assert_schema_refusal(err, RESULT_PATH);

    // Schema 1, written explicitly, is ours.
    parse_task(br#"{"schema": 1, "prompt": "hi"}"#);
}

#[test]
fn invalid_ids_are_rejected_with_a_reason() {
    let too_long = "a".repeat(129);
    let cases: [(&str, &str); 6] = [
        ("a/b", "'/'"),
        ("../../etc/passwd", "dot"),
        (".hidden", "dot"),
        (&too_long, "128"),
        ("", "128"),
        ("sp ace", "' '"),
    ];
    for (id, hint) in cases {
        let bytes = serde_json::to_vec(&json!({"id": id, "prompt": "p"})).unwrap();
        let err = Task::from_bytes(task_path(), &bytes)
            .expect_err(&format!("id {id:?} must be rejected"));
        let msg = err.to_string();
        assert!(msg.contains(TASK_PATH), "message names the file: {msg}");
        assert!(
            msg.contains("task id"),
            "message says it is the task id: {msg}"
        );
        assert!(
            msg.contains(hint),
            "message for {id:?} explains ({hint}): {msg}"
        );

        let reason = TaskId::from(id)
            .validate()
            .expect_err("validate rejects it too");
        assert!(reason.contains("task id"), "{reason}");
        assert!(
            TaskId::parse(id).is_err(),
            "TaskId::parse({id:?}) must fail"
        );
    }

    // Boundaries that are fine.
    let longest = "b".repeat(128);
    for ok in ["a", "x.", "a..b", "A-Z_a-z.0-9", longest.as_str()] {
        TaskId::from(ok)
            .validate()
            .unwrap_or_else(|e| panic!("id {ok:?} is valid: {e}"));
    }
}

#[test]
fn ids_that_are_not_strings_or_whole_numbers_are_rejected() {
    for bad in [r#"-1"#, r#"1.5"#, r#"true"#, r#"[1]"#, r#"{"a":1}"#] {
        let bytes = format!(r#"{{"id": {bad}, "prompt": "p"}}"#);
        let err = Task::from_bytes(task_path(), bytes.as_bytes())
            .expect_err(&format!("id {bad} must be rejected"));
        let msg = err.to_string();
        assert!(msg.contains(TASK_PATH), "message names the file: {msg}");
        assert!(msg.contains("task id"), "message says what is wrong: {msg}");
    }
}

#[test]
fn task_without_prompt_is_rejected() {
    let err = Task::from_bytes(task_path(), br#"{"id": "a"}"#).expect_err("prompt is required");
    let msg = err.to_string();
    assert!(msg.contains(TASK_PATH), "{msg}");
    assert!(
        msg.contains("prompt"),
        "message names the missing field: {msg}"
    );
}

#[test]
fn out_of_range_options_are_rejected() {
    for (bytes, hint) in [
        (r#"{"prompt": "p", "priority": 10}"#, "priority"),
        (r#"{"prompt": "p", "maxAttempts": 0}"#, "maxAttempts"),
        (r#"{"prompt": "p", "timeoutSecs": 0}"#, "timeoutSecs"),
        (r#"{"prompt": "p", "key": "../other"}"#, "key"),
    ] {
        let err = Task::from_bytes(task_path(), bytes.as_bytes())
            .expect_err(&format!("{bytes} must be rejected"));
        let msg = err.to_string();
        assert!(
            msg.contains(TASK_PATH) && msg.contains(hint),
            "{bytes}: {msg}"
        );
    }
}

#[test]
fn numeric_ids_parse_from_the_command_line_as_numbers() {
    assert_eq!(
        TaskId::parse("1705234567890"),
        Ok(TaskId::Number(1705234567890))
    );
    assert_eq!(
        TaskId::parse("007"),
        Ok(TaskId::Text("007".into())),
        "leading zeros stay text"
    );
    assert_eq!(TaskId::parse("job-1"), Ok(TaskId::Text("job-1".into())));
}

#[test]
fn generated_ids_are_valid_and_distinct() {
    let ids: Vec<TaskId> = (0..100).map(|_| TaskId::generate()).collect();
    for id in &ids {
        id.validate()
            .unwrap_or_else(|e| panic!("generated id {id} is invalid: {e}"));
    }
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "generated ids repeat");
}

#[test]
fn timestamps_are_rfc3339_with_milliseconds() {
    let now = protocol::now_rfc3339();
    assert!(
        now.ends_with('Z') && now.len() == "2024-01-14T12:34:56.789Z".len(),
        "{now}"
    );
    let t = protocol::parse_rfc3339("2024-01-14T12:34:56.789Z").expect("JS toISOString parses");
    assert_eq!(protocol::rfc3339(t), "2024-01-14T12:34:56.789Z");
    assert!(protocol::parse_rfc3339(&now).is_some());
}

// ------------------------------------------------------------------ property tests

mod properties {
    use conductor::queue::PendingName;
    use conductor::{Task, TaskId};
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::task_path;

    /// Few cases each: these run with the whole suite on a busy two-core machine.
    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 200,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Any JSON value, a few levels deep.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// An object with the task's own keys, each holding any JSON value (or absent).
    fn task_shaped() -> impl Strategy<Value = Value> {
        let keys = [
            "schema",
            "id",
            "prompt",
            "context",
            "timestamp",
            "timeoutSecs",
            "key",
            "priority",
            "maxAttempts",
            "attempt",
            "resume",
            "origin",
        ];
        prop::collection::vec(prop::option::of(json_value()), keys.len()).prop_map(move |values| {
            let mut m = Map::new();
            for (k, v) in keys.iter().zip(values) {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Value::Object(m)
        })
    }

    fn id_text() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_-][A-Za-z0-9._-]{0,30}"
    }

    /// A task id as it comes back from a file name: digits are a number.
    fn task_id() -> impl Strategy<Value = TaskId> {
        prop_oneof![
            any::<u64>().prop_map(TaskId::Number),
            id_text().prop_map(|s| TaskId::parse(&s).expect("valid by construction")),
        ]
    }

    fn valid_task() -> impl Strategy<Value = Task> {
        (
            // `"context": null` is read as no context: generate one or the other.
            (
                task_id(),
                any::<String>(),
                prop::option::of(json_value().prop_filter("not null", |v| !v.is_null())),
            ),
            (
                prop::option::of(1u64..=conductor::protocol::MAX_TIMEOUT_SECS),
                prop::option::of(id_text()),
                prop::option::of(0u8..=9),
            ),
            (
                prop::option::of(1u32..),
                prop::option::of(1u32..),
                prop::option::of("[A-Za-z0-9][A-Za-z0-9-]{0,40}"),
            ),
        )
            .prop_map(
                |((id, prompt, context), (timeout, key, priority), (max, attempt, resume))| {
                    let mut t = Task::new(prompt).with_id(id);
                    t.context = context;
                    t.timeout_secs = timeout;
                    t.key = key;
                    t.priority = priority;
                    t.max_attempts = max;
                    t.attempt = attempt;
                    t.resume = resume;
                    t
                },
            )
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn the_task_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = Task::from_bytes(task_path(), &bytes);
            let _ = Task::salvage_id(&bytes);
        }

        #[test]
        fn the_task_parser_never_panics_on_json(v in prop_oneof![json_value(), task_shaped()]) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(t) = Task::from_bytes(task_path(), &bytes) {
                // Whatever it accepts is a task a worker can rely on.
                prop_assert_eq!(t.validate(), Ok(()));
            }
            let _ = Task::salvage_id(&bytes);
        }

        #[test]
        fn valid_tasks_round_trip(task in valid_task()) {
            let bytes = task.to_bytes_checked(u64::MAX).expect("valid by construction");
            let back = Task::from_bytes(task_path(), &bytes).expect("what we write parses");
            prop_assert_eq!(back, task);
        }

        #[test]
        fn pending_names_round_trip(
            priority in 0u8..=9,
            submitted_ns in any::<u64>(),
            key in prop::option::of(id_text()),
            id in task_id(),
        ) {
            let name = PendingName { priority, submitted_ns, key, id };
            let file = name.file_name();
            prop_assert_eq!(PendingName::parse(&file), Some(name));
        }

        #[test]
        fn pending_names_sort_by_priority_then_submit_time(
            a in (0u8..=9, any::<u64>(), id_text()),
            b in (0u8..=9, any::<u64>(), id_text()),
        ) {
            let name = |(p, ns, id): &(u8, u64, String)| PendingName {
                priority: *p,
                submitted_ns: *ns,
                key: None,
                id: TaskId::Text(id.clone()),
            }
            .file_name();
            if a.0 != b.0 || a.1 != b.1 {
                let want = (b.0, a.1).cmp(&(a.0, b.1));
                prop_assert_eq!(name(&a).cmp(&name(&b)), want);
            }
        }

        #[test]
        fn the_pending_name_parser_never_panics(s in ".{0,80}", t in "[0-9~a-z.]{0,40}(\\.json)?") {
            let _ = PendingName::parse(&s);
            if let Some(n) = PendingName::parse(&t) {
                prop_assert!(n.priority <= 9);
            }
        }
    }
}
