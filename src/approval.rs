//! Approvals: an agent asks a person to allow a tool call; `approve`/`deny` answer it, a timeout denies it.
//!
//! The question is a file in the asking task's slot (`approval.json`, see
//! [`crate::protocol::approval`]). [`ask`] writes it and waits — on file events, with the
//! root's usual safety-net re-reads — for the answer file named after it; [`answer`] is
//! what `conductor approve|deny`, the dashboard and the MCP tools call. Whoever writes
//! the answer first wins (it is created without replacing): a person answering at the
//! very moment the question times out gets "already answered", never a second verdict.

use std::collections::HashSet;
use std::io;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, select, Receiver};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::layout::{Root, Slot};
use crate::protocol::approval::{answer_path, question_of, question_path, read_answer};
use crate::protocol::{rfc3339, TaskId, SCHEMA};
use crate::tasks::TaskState;
use crate::wait::{names_interest, Awaited, OnDeath, Step, Vigil, Wait};
use crate::watch::{DirWatcher, WatchMode};

pub use crate::protocol::approval::{Answer, Decision, Question};

/// What a denial without a reason tells the agent.
pub const DEFAULT_DENIAL: &str = "a person denied this tool call (conductor deny)";

/// Who "answered" a question nobody answered in time.
pub const BY_TIMEOUT: &str = "timeout";

/// What an agent asks to do.
#[derive(Debug, Clone)]
pub struct Asking {
    pub task_id: TaskId,
    pub tool_name: String,
    pub input: Value,
    pub tool_use_id: Option<String>,
}

/// Ask a person, through slot `slot` of `root`, to allow `asking`; wait at most
/// `timeout` for the answer. Nobody answering in time is a denial saying so. `gone`
/// says the asker's agent went away (its end of the conversation closed): the question
/// is withdrawn, answered as a denial nobody reads. Either way the question and its
/// answer file are gone when this returns.
pub fn ask(
    root: &Root,
    slot: Slot,
    asking: Asking,
    timeout: Duration,
    gone: &Receiver<()>,
) -> Result<Answer> {
    let dir = root.worker(slot).dir;
    let now = SystemTime::now();
    let q = Question {
        schema: SCHEMA,
        id: fsio::nonce(),
        task_id: asking.task_id,
        tool_name: asking.tool_name,
        input: asking.input,
        tool_use_id: asking.tool_use_id,
        asked_at: rfc3339(now),
        deadline: rfc3339(now + timeout),
        pid: std::process::id(),
    };
    fsio::write_json(&question_path(&dir), &q, Durability::Atomic)?;
    crate::hooks::approval::asked(root, slot, &q);
    tracing::info!(
        "task {} asks to use {} · `conductor approve {}` or `conductor deny {} --reason …`",
        q.task_id,
        q.summary(),
        q.task_id,
        q.task_id
    );
    let settled = match wait_for_answer(root, slot, &q, timeout, gone) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => settle(&dir, &q, Some("the agent went away".into()), "agent"),
        Err(Error::Timeout { .. }) => settle(&dir, &q, Some(timed_out(timeout)), BY_TIMEOUT),
        Err(e) => Err(e),
    };
    withdraw(&dir, &q);
    settled
}

/// The reason a question nobody answered is denied with.
pub fn timed_out(timeout: Duration) -> String {
    format!(
        "nobody answered within {} (approvalTimeoutSecs in config.json), so it is denied",
        humantime::format_duration(timeout)
    )
}

/// Block until question `q`'s answer comes (`Some`), `gone` fires (`None`), or
/// [`Error::Timeout`] after `timeout`.
fn wait_for_answer(
    root: &Root,
    slot: Slot,
    q: &Question,
    timeout: Duration,
    gone: &Receiver<()>,
) -> Result<Option<Answer>> {
    let dir = root.worker(slot).dir;
    let path = answer_path(&dir, &q.id);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let wanted: HashSet<&str> = [name.as_str()].into();
    let interest = names_interest(wanted);
    // Nobody serving the slot does not end the wait: its deadline does.
    let vigil = Vigil::new(root.clone(), Awaited::Slot(slot), None, OnDeath::Fail)
        .with_grace(Duration::MAX);
    let (answer_dir, qid) = (dir.clone(), q.id.clone());
    let mut wait = Wait::new(
        vec![dir.clone()],
        WatchMode::Auto,
        interest.clone(),
        timeout,
        format!("an answer to task {}'s question", q.task_id),
        vigil,
        move || read_answer(&answer_dir, &qid),
    );
    let (tx, woken) = bounded(1);
    let _watcher = DirWatcher::new(&[dir], WatchMode::Auto, interest, tx)?;
    loop {
        match wait.step()? {
            Step::Ready(a) => return Ok(Some(a)),
            Step::Sleep(d) => select! {
                recv(woken) -> _ => {}
                recv(gone) -> _ => return Ok(None),
                default(d) => {}
            },
        }
    }
}

/// Deny `q` ourselves, unless someone's answer came first: then that one stands.
fn settle(dir: &std::path::Path, q: &Question, reason: Option<String>, by: &str) -> Result<Answer> {
    let mine = Answer::new(q, Decision::Deny, reason, by);
    let path = answer_path(dir, &q.id);
    match fsio::write_new(&path, &fsio::to_json_bytes(&mine), Durability::Atomic) {
        Ok(()) => Ok(mine),
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
            Ok(read_answer(dir, &q.id)?.unwrap_or(mine))
        }
        Err(e) => Err(e),
    }
}

/// Remove question `q` (if it is still the one asked) and its answer.
fn withdraw(dir: &std::path::Path, q: &Question) {
    if question_of(dir, &q.task_id).is_some_and(|now| now.id == q.id) {
        if let Err(e) = fsio::remove_file_if_exists(&question_path(dir)) {
            tracing::warn!("{e}");
        }
    }
    if let Err(e) = fsio::remove_file_if_exists(&answer_path(dir, &q.id)) {
        tracing::warn!("{e}");
    }
}

/// The question task `id`'s agent waits on, and its slot; `None` when it asks nothing.
#[cfg(test)]
fn pending(root: &Root, id: &TaskId) -> Result<Option<(Slot, Question)>> {
    let Some(slot) = crate::tasks::running_slot(root, id)? else {
        return Ok(None);
    };
    Ok(question_of(&root.worker(slot).dir, id).map(|q| (slot, q)))
}

/// Answer the question task `id`'s agent waits on: `decision`, with `reason` (what the
/// agent is told of a denial), by `by` (`conductor approve`, `dashboard`, `mcp` …).
/// Returns the question answered. [`Error::NoQuestion`] when the task asks nothing (it
/// is not running, or runs without a question) or its question was already answered;
/// [`Error::NoSuchTask`] when nothing knows the id.
pub fn answer(
    root: &Root,
    id: &TaskId,
    decision: Decision,
    reason: Option<String>,
    by: &str,
) -> Result<Question> {
    let loc = crate::tasks::find(root, id)?.ok_or_else(|| crate::tasks::no_such_task(root, id))?;
    let refuse = |why: String| Error::NoQuestion {
        id: id.to_string(),
        why,
    };
    let slot = match (loc.state, loc.slot) {
        (TaskState::Running, Some(slot)) => slot,
        (state, _) => {
            return Err(refuse(format!(
                "it is {state}; only a running task's agent asks for one"
            )))
        }
    };
    let dir = root.worker(slot).dir;
    let Some(q) = question_of(&dir, id) else {
        return Err(refuse(format!(
            "it runs on worker {slot} without waiting for an answer"
        )));
    };
    let a = Answer::new(&q, decision, reason, by);
    match fsio::write_new(
        &answer_path(&dir, &q.id),
        &fsio::to_json_bytes(&a),
        Durability::Atomic,
    ) {
        Ok(()) => Ok(q),
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => Err(refuse(
            "its question was already answered (by a person, or denied as it timed out)".into(),
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Task;

    /// A root whose slot 0 runs task `id` (its `running.json`, registered there).
    fn running(id: &str) -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        let w = root.worker(Slot(0));
        w.create_files().unwrap();
        crate::queue::init_root(&root).unwrap();
        let task = Task::new("do it").with_id(id);
        crate::ids::reserve(&root, &TaskId::from(id), crate::ids::Place::Worker(Slot(0))).unwrap();
        fsio::write_json(&w.running(), &task, Durability::Atomic).unwrap();
        (dir, root)
    }

    fn asking(id: &str) -> Asking {
        Asking {
            task_id: TaskId::from(id),
            tool_name: "Bash".into(),
            input: serde_json::json!({"command": "make deploy"}),
            tool_use_id: Some("toolu_1".into()),
        }
    }

    #[test]
    fn a_question_nobody_answers_is_denied_when_it_times_out() {
        let (_d, root) = running("t1");
        let (_keep, gone) = bounded::<()>(1);
        let a = ask(
            &root,
            Slot(0),
            asking("t1"),
            Duration::from_millis(300),
            &gone,
        )
        .unwrap();
        assert_eq!(a.decision, Decision::Deny);
        assert_eq!(a.by, BY_TIMEOUT);
        assert!(
            a.reason
                .as_deref()
                .unwrap()
                .starts_with("nobody answered within 300ms"),
            "{a:?}"
        );
        // Nothing is left in the slot, and nothing more can be answered.
        let dir = root.worker(Slot(0)).dir;
        assert!(!question_path(&dir).exists());
        assert!(!answer_path(&dir, &a.question_id).exists());
        let e = answer(&root, &TaskId::from("t1"), Decision::Allow, None, "test").unwrap_err();
        assert!(
            matches!(&e, Error::NoQuestion { why, .. } if why.contains("without waiting")),
            "{e}"
        );
    }

    #[test]
    fn a_persons_answer_reaches_the_asker_and_a_second_one_is_refused() {
        let (_d, root) = running("t2");
        let (_keep, gone) = bounded::<()>(1);
        let asker = {
            let root = root.clone();
            std::thread::spawn(move || {
                ask(&root, Slot(0), asking("t2"), Duration::from_secs(60), &gone)
            })
        };
        let id = TaskId::from("t2");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let q = loop {
            if let Some((slot, q)) = pending(&root, &id).unwrap() {
                assert_eq!(slot, Slot(0));
                break q;
            }
            assert!(std::time::Instant::now() < deadline, "no question asked");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(q.summary(), "Bash: make deploy");
        let reason = Some("not on a Friday".to_string());
        answer(&root, &id, Decision::Deny, reason.clone(), "test").unwrap();
        let second = answer(&root, &id, Decision::Allow, None, "test");
        // Refused whether the asker has taken the first answer yet or not.
        assert!(
            matches!(second, Err(Error::NoQuestion { .. })),
            "{second:?}"
        );
        let a = asker.join().unwrap().unwrap();
        assert_eq!(
            (a.decision, a.reason, a.by.as_str()),
            (Decision::Deny, reason, "test")
        );
        assert!(pending(&root, &id).unwrap().is_none());
    }

    #[test]
    fn a_task_that_is_not_running_has_no_question_to_answer() {
        let (_d, root) = running("t3");
        let e = answer(&root, &TaskId::from("t3"), Decision::Allow, None, "test").unwrap_err();
        assert!(matches!(e, Error::NoQuestion { .. }), "{e}");
        let e = answer(&root, &TaskId::from("nope"), Decision::Allow, None, "test").unwrap_err();
        assert!(matches!(e, Error::NoSuchTask { .. }), "{e}");
        // A leftover question of another task is not this task's.
        let (_keep, gone) = bounded::<()>(1);
        drop(_keep);
        let a = ask(&root, Slot(0), asking("t3"), Duration::from_secs(60), &gone).unwrap();
        assert_eq!(a.reason.as_deref(), Some("the agent went away"));
    }
}
