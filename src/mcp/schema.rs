//! The tools' JSON Schemas as clients need them, and the check of a call's arguments against them.
//!
//! schemars writes an optional field as `type: ["integer", "null"]`; older clients (the
//! MCP Inspector 0.15) then send its value as a string. [`plain_optionals`] leaves such a
//! field a plain type that is simply not required. [`check`] refuses a call whose
//! arguments do not fit the input schema, naming the field, as a tool error the model can
//! read (rmcp's own refusal is a JSON-RPC error most clients hide). [`output`] is each
//! tool's `outputSchema`, the shape of its `structuredContent`.

use serde_json::{json, Map, Value};

/// Drop `"null"` from every `type` list and every `{"type": "null"}` from `anyOf`/`oneOf`,
/// all through `schema`.
pub fn plain_optionals(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let only = types.remove(0);
                    m.insert("type".into(), only);
                }
            }
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(alts)) = m.get_mut(key) {
                    alts.retain(|a| a.get("type") != Some(&json!("null")));
                    if alts.len() == 1 {
                        let only = alts.remove(0);
                        m.remove(key);
                        if let Value::Object(o) = only {
                            for (k, v) in o {
                                m.entry(k).or_insert(v);
                            }
                        }
                    }
                }
            }
            // A null default says nothing a missing field does not.
            if m.get("default") == Some(&Value::Null) {
                m.remove("default");
            }
            for v in m.values_mut() {
                plain_optionals(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(plain_optionals),
        _ => {}
    }
}

/// Whether `v` fits `schema` (the subset of JSON Schema the tools use: type, required,
/// properties, additionalProperties, items, anyOf, minimum, maximum, minLength,
/// minItems, enum,
/// `$ref` to `$defs`); else what is wrong, naming the field by its path (`ids[1]`).
pub fn check(schema: &Value, v: &Value) -> Result<(), String> {
    check_at(schema, schema, v, "")
}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

fn type_fits(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        _ => true,
    }
}

fn field(at: &str) -> &str {
    if at.is_empty() {
        "the arguments"
    } else {
        at
    }
}

fn check_at(root: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let Value::Object(s) = schema else {
        return Ok(()); // `true`: anything
    };
    if let Some(Value::String(r)) = s.get("$ref") {
        let name = r.rsplit('/').next().unwrap_or("");
        if let Some(def) = root.get("$defs").and_then(|d| d.get(name)) {
            return check_at(root, def, v, at);
        }
    }
    if let Some(Value::Array(alts)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        if !alts.iter().any(|a| check_at(root, a, v, at).is_ok()) {
            let kinds: Vec<String> = alts
                .iter()
                .filter_map(|a| a.get("type").map(|t| t.to_string().replace('"', "")))
                .collect();
            return Err(format!(
                "`{}` must be one of: {}; got {}",
                field(at),
                kinds.join(", "),
                describe(v)
            ));
        }
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() && !types.iter().any(|t| type_fits(t, v)) {
        return Err(format!(
            "`{}` must be {} {}; got {}",
            field(at),
            if types[0] == "integer" || types[0] == "array" || types[0] == "object" {
                "an"
            } else {
                "a"
            },
            types.join(" or "),
            describe(v)
        ));
    }
    if let Some(Value::Array(allowed)) = s.get("enum") {
        if !allowed.contains(v) {
            return Err(format!(
                "`{}` must be one of {}; got {}",
                field(at),
                Value::Array(allowed.clone()),
                describe(v)
            ));
        }
    }
    check_bounds(s, v, at)?;
    if let (Some(items), Value::Array(list)) = (s.get("items"), v) {
        for (i, item) in list.iter().enumerate() {
            check_at(root, items, item, &format!("{at}[{i}]"))?;
        }
    }
    if let Value::Object(obj) = v {
        check_object(root, s, obj, at)?;
    }
    Ok(())
}

/// `v`'s bounds (minimum, maximum, minLength, minItems) as `s` sets them.
fn check_bounds(s: &Map<String, Value>, v: &Value, at: &str) -> Result<(), String> {
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if n < min {
            return Err(format!("`{}` must be at least {min}; got {n}", field(at)));
        }
    }
    if let (Some(max), Some(n)) = (s.get("maximum").and_then(Value::as_f64), v.as_f64()) {
        if n > max {
            return Err(format!("`{}` must be at most {max}; got {n}", field(at)));
        }
    }
    if let (Some(min), Some(text)) = (s.get("minLength").and_then(Value::as_u64), v.as_str()) {
        if (text.chars().count() as u64) < min {
            return Err(format!("`{}` must not be empty", field(at)));
        }
    }
    if let (Some(min), Value::Array(list)) = (s.get("minItems").and_then(Value::as_u64), v) {
        if (list.len() as u64) < min {
            return Err(format!("`{}` must not be empty", field(at)));
        }
    }
    Ok(())
}

/// An object's fields: none unknown where the schema is closed, the required ones
/// present, each known one fitting its own schema.
fn check_object(
    root: &Value,
    s: &Map<String, Value>,
    obj: &Map<String, Value>,
    at: &str,
) -> Result<(), String> {
    let props = s.get("properties").and_then(Value::as_object);
    // An unknown argument first: it is often a required one misspelt.
    let closed = s.get("additionalProperties") == Some(&Value::Bool(false));
    if let Some(k) = obj
        .keys()
        .find(|k| closed && props.is_none_or(|p| !p.contains_key(*k)))
    {
        let known: Vec<&str> = props
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        return Err(if known.is_empty() {
            format!("unknown argument `{}`: it takes no arguments", join(at, k))
        } else {
            format!(
                "unknown argument `{}`; the arguments are: {}",
                join(at, k),
                known.join(", ")
            )
        });
    }
    if let Some(Value::Array(required)) = s.get("required") {
        for r in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                return Err(format!("`{}` is required", join(at, r)));
            }
        }
    }
    for (k, val) in obj {
        if let Some(sub) = props.and_then(|p| p.get(k)) {
            check_at(root, sub, val, &join(at, k))?;
        }
    }
    Ok(())
}

fn join(at: &str, k: &str) -> String {
    if at.is_empty() {
        k.to_string()
    } else {
        format!("{at}.{k}")
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A task as `result`/`wait` show it: where it is, or its result.
fn task_view() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": ["string", "integer"]},
            "state": {"type": "string"},
            "finished": {"type": "boolean"},
            "queued": {"type": "boolean"},
            "slot": {"type": ["integer", "null"]},
            "note": {"type": "string"},
            "result": {"type": "object"},
        },
        "required": ["id", "state", "finished"],
    })
}

/// Tool `name`'s `outputSchema`: the shape of its `structuredContent`.
pub fn output(name: &str) -> Option<Map<String, Value>> {
    let id = json!({"type": ["string", "integer"]});
    let schema = match name {
        "submit" => json!({
            "type": "object",
            "properties": {
                "id": id, "state": {"type": "string"}, "depth": {"type": "integer"},
                "warning": {"type": "string"}, "after": {"type": "array"},
                "prompt": {"type": "string"},
                "continuedFrom": id,
                "wait": {"type": "object"},
            },
            "required": ["id", "state"],
        }),
        "send" => json!({
            "type": "object",
            "properties": {
                "id": id, "slot": {"type": "integer"}, "state": {"type": "string"},
                "warning": {"type": "string"},
            },
            "required": ["id", "slot", "state"],
        }),
        "wait" => json!({
            "type": "object",
            "properties": {
                "allFinished": {"type": "boolean"},
                "waitedSecs": {"type": "number"},
                "tasks": {"type": "array", "items": task_view()},
            },
            "required": ["allFinished", "tasks"],
        }),
        "result" => task_view(),
        "retry" => json!({
            "type": "object",
            "properties": {
                "id": id, "retried": id, "state": {"type": ["string", "null"]},
                "slot": {"type": ["integer", "null"]},
            },
            "required": ["id", "retried"],
        }),
        "totals" | "tasks" | "status" | "queue" => root_output(name, id),
        "edit" => json!({
            "type": "object",
            "properties": {"id": id, "state": {"type": "string"}, "task": {"type": "object"}},
            "required": ["id", "state", "task"],
        }),
        "cancel" => json!({
            "type": "object",
            "properties": {"id": id, "done": {"type": "string"}, "message": {"type": "string"}},
            "required": ["id", "done", "message"],
        }),
        "pause" | "resume" => pause_output(name),
        "logs" => json!({
            "type": "object",
            "properties": {
                "id": id, "state": {"type": "string"}, "finished": {"type": "boolean"},
                "logBytes": {"type": "integer"}, "shownFromByte": {"type": "integer"},
                "text": {"type": "string"}, "note": {"type": "string"},
            },
            "required": ["id", "state"],
        }),
        "diff" | "merge" | "discard" => review_output(name, id),
        "approve" | "deny" => json!({
            "type": "object",
            "properties": {
                "id": id, "decision": {"type": "string", "enum": ["allow", "deny"]},
                "reason": {}, "question": {"type": "object"},
            },
            "required": ["id", "decision", "question"],
        }),
        _ => return None,
    };
    Some(obj(schema))
}

/// The `outputSchema` of `pause` and `resume`.
fn pause_output(name: &str) -> Value {
    match name {
        "pause" => json!({
            "type": "object",
            "properties": {
                "paused": {}, "already": {"type": "boolean"}, "now": {"type": "boolean"},
                "file": {"type": "string"},
            },
            "required": ["paused", "already", "now", "file"],
        }),
        _ => json!({
            "type": "object",
            "properties": {"resumed": {}, "wasPaused": {"type": "boolean"}},
            "required": ["resumed", "wasPaused"],
        }),
    }
}

/// The `outputSchema` of the tools that tell of a root as a whole (`totals`, `tasks`,
/// `status`, `queue`).
fn root_output(name: &str, id: Value) -> Value {
    match name {
        "totals" => {
            let totals = json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"}, "tasks": {"type": "integer"},
                    "done": {"type": "integer"}, "failed": {"type": "integer"},
                    "unfinished": {"type": "integer"}, "costUsd": {"type": "number"},
                    "turns": {"type": "integer"}, "runMs": {"type": "integer"},
                },
                "required": ["tasks", "done", "failed", "unfinished", "costUsd"],
            });
            let list = json!({"type": "array", "items": totals});
            json!({
                "type": "object",
                "properties": {
                    "root": {"type": "string"}, "total": totals,
                    "byKey": list, "byGroup": list, "byAgent": list, "byDay": list,
                },
                "required": ["root", "total", "byKey", "byAgent", "byDay"],
            })
        }
        "tasks" => json!({
            "type": "object",
            "properties": {
                "root": {"type": "string"},
                "tasks": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"id": id, "state": {"type": "string"}},
                    "required": ["id", "state"],
                }},
                "nextCursor": {"type": "string"},
            },
            "required": ["root", "tasks"],
        }),
        "status" => json!({
            "type": "object",
            "properties": {
                "root": {"type": "string"},
                "workers": {"type": "array"},
                "servedByLiveWorker": {"type": ["boolean", "null"]},
                "server": {"type": "object"},
            },
            "required": ["root", "workers"],
        }),
        // `queue`
        _ => json!({
            "type": "object",
            "properties": {
                "root": {"type": "string"},
                "pending": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"position": {"type": "integer"}, "waiting": {"type": ["string", "null"]}},
                    "required": ["position"],
                }},
            },
            "required": ["root", "pending"],
        }),
    }
}

/// The `outputSchema` of the review tools (`diff`, `merge`, `discard`).
fn review_output(name: &str, id: Value) -> Value {
    let s = json!({"type": "string"});
    let n = json!({"type": "integer"});
    match name {
        "diff" => json!({
            "type": "object",
            "properties": {
                "id": id, "repo": s, "branch": s, "base": s, "head": s,
                "branchExists": {"type": "boolean"}, "kept": {"type": "boolean"},
                "filesChanged": n, "insertions": n, "deletions": n,
                "diffstat": s, "stat": s, "patch": s, "patchBytes": n,
                "truncated": {"type": "boolean"},
            },
            "required": ["id", "repo", "branch", "base", "head", "kept", "diffstat", "stat",
                "patch", "patchBytes", "truncated"],
        }),
        "merge" => {
            let ids = json!({"type": "array", "items": id});
            json!({
                "type": "object",
                "properties": {
                    "allMerged": {"type": "boolean"},
                    "merged": ids, "conflicts": ids, "left": ids,
                    "tasks": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "id": id, "repo": s, "branch": s, "diffstat": s,
                            "outcome": {"enum": ["merged", "conflict", "left"]},
                            "into": s, "head": s,
                            "files": {"type": "array", "items": s},
                            "reason": s,
                        },
                        "required": ["id", "repo", "branch", "outcome"],
                    }},
                },
                "required": ["allMerged", "merged", "conflicts", "left", "tasks"],
            })
        }
        _ => json!({
            "type": "object",
            "properties": {
                "id": id, "repo": s, "branch": s, "path": s,
                "alreadyGone": {"type": "boolean"},
            },
            "required": ["id", "repo", "branch", "path", "alreadyGone"],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_fields_become_plain_types() {
        let mut s = json!({"properties": {
            "a": {"type": ["integer", "null"], "default": null},
            "b": {"anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]},
        }});
        plain_optionals(&mut s);
        assert_eq!(s["properties"]["a"], json!({"type": "integer"}));
        assert_eq!(s["properties"]["b"], json!({"$ref": "#/$defs/X"}));
    }

    #[test]
    fn a_bad_argument_is_named() {
        let s = json!({"type": "object", "additionalProperties": false, "required": ["p"],
            "properties": {"p": {"type": "string", "minLength": 1},
                "t": {"type": "number", "minimum": 0},
                "ids": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}});
        assert!(check(&s, &json!({"p": "x", "ids": ["a", 1]})).is_ok());
        let e = |v| check(&s, &v).unwrap_err();
        assert!(e(json!({"p": ""})).contains("`p` must not be empty"));
        assert!(e(json!({"p": "x", "t": -1})).contains("`t` must be at least 0"));
        assert!(e(json!({"p": "x", "zz": 1})).contains("unknown argument `zz`"));
        assert!(e(json!({})).contains("`p` is required"));
        assert!(e(json!({"p": "x", "ids": [true]})).contains("`ids[0]`"));
        assert!(e(json!({"p": 3})).contains("`p` must be a string"));
    }
}
