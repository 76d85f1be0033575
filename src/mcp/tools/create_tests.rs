use super::{SendArgs, SubmitArgs};
use serde_json::json;

fn properties<T: rmcp::schemars::JsonSchema>() -> serde_json::Value {
    let schema = rmcp::schemars::schema_for!(T);
    serde_json::to_value(&schema).unwrap()
}

/// `submit` and `send` take the task's fields from one struct (`verbs::spec::TaskSpec`):
/// each field is in both schemas, described the same, and unknown fields are still
/// refused.
#[test]
fn submit_and_send_describe_a_tasks_fields_once() {
    let submit = properties::<SubmitArgs>();
    let send = properties::<SendArgs>();
    for field in [
        "prompt",
        "id",
        "timeoutSecs",
        "dir",
        "context",
        "agent",
        "model",
        "allowedTools",
        "permissionMode",
        "env",
        "labels",
    ] {
        let a = &submit["properties"][field];
        assert!(
            a["description"].is_string(),
            "submit lacks {field}: {submit}"
        );
        assert_eq!(a, &send["properties"][field], "{field} differs");
    }
    assert_eq!(submit["required"], json!(["prompt"]));
    assert_eq!(send["required"], json!(["slot", "prompt"]));
    assert!(send["properties"]["key"].is_null(), "send takes no key");
    for schema in [&submit, &send] {
        assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
    }

    let sent: SendArgs =
        serde_json::from_value(json!({"slot": 1, "prompt": "hi", "timeoutSecs": 5})).unwrap();
    assert_eq!((sent.slot, sent.task.options.timeout_secs), (1, Some(5)));
    let submitted: SubmitArgs =
        serde_json::from_value(json!({"prompt": "hi", "key": "k", "labels": ["a"]})).unwrap();
    assert_eq!(submitted.task.options.labels, ["a"]);
    assert_eq!(submitted.queue.key.as_deref(), Some("k"));
    for bad in [
        json!({"slot": 1, "prompt": "hi", "key": "k"}),
        json!({"slot": 1, "prompt": "hi", "bogus": 1}),
    ] {
        // Refused by the check every call's arguments pass before serde reads them.
        let err = crate::mcp::schema::check(&send, &bad).unwrap_err();
        assert!(err.contains("unknown argument"), "{err}");
    }
}
