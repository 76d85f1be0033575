//! What the MCP tools answer: library calls turned into JSON for a model to read (blocking; run off the async thread).

use serde_json::{json, Map, Value};

use crate::tasks::TaskState;
use crate::verbs::cancel::Done;
use crate::verbs::result::{result, ResultAnswer, ResultRequest};
use crate::{Client, Error, TaskId, TaskResult};

/// How much of a result's output a reply carries by default, in characters: the end
/// of it (where agents put their conclusions); `logs` reads more.
pub const DEFAULT_OUTPUT_CHARS: usize = 20_000;

/// How much of a result's stderr a reply carries, in characters (its end).
const STDERR_CHARS: usize = 4_000;

pub fn no_such_task(client: &Client, id: &TaskId) -> Error {
    Error::NoSuchTask {
        id: id.to_string(),
        root: client.root().path().to_path_buf(),
    }
}

/// Keep the last `max` characters of string field `name` of `m`, saying so beside it.
fn keep_tail(m: &mut Map<String, Value>, name: &str, max: usize) {
    let Some(Value::String(s)) = m.get_mut(name) else {
        return;
    };
    let total = s.chars().count();
    if total <= max {
        return;
    }
    let cut = s.char_indices().nth(total - max).map_or(0, |(i, _)| i);
    s.replace_range(..cut, "");
    m.insert(
        format!("{name}Shown"),
        json!(format!(
            "the last {max} of {total} characters (the `logs` tool reads more of the output)"
        )),
    );
}

/// A result as a reply: the protocol's fields, its output cut to its last
/// `output_chars` characters.
pub fn result_view(r: &TaskResult, output_chars: usize) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("schema");
        keep_tail(m, "output", output_chars);
        keep_tail(m, "stderr", STDERR_CHARS);
    }
    v
}

/// Where a task is, as a reply: the view every verb gives.
pub use crate::verbs::view::location_view;

/// Task `id`: its state and, when it has finished, its result.
pub fn task_result(client: &Client, id: &TaskId, output_chars: usize) -> crate::Result<Value> {
    match result(client, &ResultRequest::Task(id.clone()))? {
        ResultAnswer::Finished(r) => Ok(finished(id, &r, output_chars)),
        ResultAnswer::NotYet(None) => Err(no_such_task(client, id)),
        ResultAnswer::NotYet(Some(loc)) => Ok(location_view(
            &loc,
            (!loc.state.is_finished())
                .then(|| "it has no result yet; the `wait` tool waits for it".to_string()),
        )),
    }
}

pub fn finished(id: &TaskId, r: &TaskResult, output_chars: usize) -> Value {
    json!({
        "id": id,
        "state": TaskState::of_result(r),
        "finished": true,
        "result": result_view(r, output_chars),
    })
}

/// What cancelling task `id` did (the `cancel` verb's answer, as the tool tells it);
/// `Err` (a tool error) when nothing could be done.
pub fn cancel(client: &Client, id: &TaskId) -> crate::Result<std::result::Result<Value, String>> {
    let reply = |what: &str, message: String| json!({ "id": id, "done": what, "message": message });
    Ok(match crate::verbs::cancel::task(client, id)?.done {
        Done::Withdrawn { slot } => Ok(reply(
            "withdrawn",
            match slot {
                Some(s) => format!("task {id} was withdrawn from worker {s}'s inbox before it started; its result says cancelled"),
                None => format!("task {id} was withdrawn from the queue before it started; its result says cancelled"),
            },
        )),
        Done::Requested { slot } => Ok(reply(
            "requested",
            format!("task {id} runs on worker {slot}, which has been asked to stop it; its result (cancelled) follows shortly"),
        )),
        Done::NoLiveWorker { slot } => Err(format!(
            "task {id} was left running on worker {slot}, which no live worker serves, so nobody can stop it; `conductor recover {slot}` finishes it as interrupted"
        )),
        Done::Finished { state } => Err(format!(
            "task {id} has already finished ({state}); nothing cancelled"
        )),
    })
}

/// Task `id`'s log, its last `tail` bytes: the `logs` verb's answer.
pub fn logs(client: &Client, id: &TaskId, tail: u64) -> crate::Result<Value> {
    let request = crate::verbs::logs::LogsRequest::Task(id.clone());
    crate::verbs::logs::logs(client, &request)?.to_json(tail)
}

/// The end of a log as text: the one reading every view shares.
pub use crate::verbs::logs::read_tail;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_output_keeps_its_end_and_says_so() {
        let mut m = Map::new();
        m.insert("output".into(), json!("ab€defg"));
        keep_tail(&mut m, "output", 3);
        assert_eq!(m["output"], "efg");
        assert!(m["outputShown"].as_str().unwrap().contains("last 3 of 7"));
        let mut short = Map::new();
        short.insert("output".into(), json!("abc"));
        keep_tail(&mut short, "output", 3);
        assert!(!short.contains_key("outputShown"));
    }

    #[test]
    fn a_tail_starts_at_a_character_boundary() {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, "x€y".as_bytes()).unwrap();
        // "€" is 3 bytes: a tail of 3 starts inside it.
        let (text, total, from) = read_tail(&f, 3).unwrap();
        assert_eq!((text.as_str(), total, from), ("y", 5, 4));
        let (all, _, from) = read_tail(&f, 100).unwrap();
        assert_eq!((all.as_str(), from), ("x€y", 0));
    }
}
