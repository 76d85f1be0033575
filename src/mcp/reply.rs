//! What the MCP tools answer: library calls turned into JSON for a model to read (blocking; run off the async thread).

use std::fs::File;
use std::os::unix::fs::FileExt;

use serde_json::{json, Map, Value};

use crate::queue::Queue;
use crate::tasks::{TaskLocation, TaskState};
use crate::verbs::cancel::Done;
use crate::verbs::result::{result, ResultAnswer, ResultRequest};
use crate::{inspect, Client, Error, TaskId, TaskResult};

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

/// Where a task is, as a reply (`note`: why it is not moving, when known).
pub fn location_view(loc: &TaskLocation, note: Option<String>) -> Value {
    let mut v = json!({
        "id": loc.id,
        "state": loc.state,
        "finished": loc.state.is_finished(),
        "queued": loc.queued,
        "slot": loc.slot.map(|s| s.0),
    });
    if let Some(n) = note {
        v["note"] = json!(n);
    }
    asking(loc, &mut v);
    v
}

/// A running task whose agent waits for a person's answer: its state says so
/// (`needs approval`, as `tasks` has it) and `approval` is the question.
fn asking(loc: &TaskLocation, v: &mut Value) {
    let (TaskState::Running, Some(file)) = (loc.state, &loc.file) else {
        return;
    };
    let Some(q) = file
        .parent()
        .and_then(|dir| crate::protocol::approval::question_of(dir, &loc.id))
    else {
        return;
    };
    v["state"] = json!(TaskState::NeedsApproval);
    v["note"] = json!(format!(
        "its agent asks to use {}: answer with the `approve` or `deny` tool",
        q.summary()
    ));
    v["approval"] = json!(q);
}

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

/// The last `tail` bytes of task `id`'s output: the live log while it runs, the kept
/// log once it has ended.
pub fn logs(client: &Client, id: &TaskId, tail: u64) -> crate::Result<Value> {
    let root = client.root();
    let loc = client
        .find_task(id)?
        .ok_or_else(|| no_such_task(client, id))?;
    let path = match (loc.state, loc.slot) {
        (TaskState::Waiting | TaskState::Queued, _) | (_, None) => {
            return Ok(location_view(
                &loc,
                Some("it has not started, so it has no output yet".into()),
            ))
        }
        (TaskState::Running, Some(slot)) => root.worker(slot).output_log(),
        (_, Some(slot)) => root.worker(slot).task_log(id),
    };
    let Some(file) = inspect::open_log(&path)? else {
        let note = format!(
            "{} is missing (the task never started, or gc collected its log)",
            path.display()
        );
        return Ok(location_view(&loc, Some(note)));
    };
    let (text, total, from) = read_tail(&file, tail).map_err(|e| Error::io("read", &path, e))?;
    let mut v = location_view(&loc, None);
    v["logBytes"] = json!(total);
    v["shownFromByte"] = json!(from);
    v["text"] = json!(text);
    Ok(v)
}

/// The last `tail` bytes of `file` as text (starting at a character boundary), its
/// length, and where the text starts.
pub fn read_tail(file: &File, tail: u64) -> std::io::Result<(String, u64, u64)> {
    let total = file.metadata()?.len();
    let mut from = total.saturating_sub(tail);
    let mut buf = vec![0u8; usize::try_from(total - from).unwrap_or(usize::MAX)];
    let mut got = 0;
    while got < buf.len() {
        let n = file.read_at(&mut buf[got..], from + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    // Do not start in the middle of a character.
    let skip = if from > 0 {
        buf.iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count()
    } else {
        0
    };
    from += skip as u64;
    Ok((
        String::from_utf8_lossy(&buf[skip..]).into_owned(),
        total,
        from,
    ))
}

/// Every slot and the queue's capacity, as `conductor status --json` shows them.
pub fn status(client: &Client) -> crate::Result<Value> {
    let root = client.root();
    let reports = inspect::slot_reports(root, None)?;
    let mut doc = json!({ "root": root.path(), "workers": reports });
    match Queue::new(root.clone()).capacity() {
        Ok(c) => {
            if let (Some(doc), Ok(Value::Object(cap))) =
                (doc.as_object_mut(), serde_json::to_value(c))
            {
                doc.extend(cap);
            }
        }
        Err(e) => doc["capacityError"] = e.to_string().into(),
    }
    doc["servedByLiveWorker"] = json!(crate::wait::root_served(root).ok());
    Ok(doc)
}

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
