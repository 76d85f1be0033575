//! `conductor submit --batch -f FILE`: many tasks from one process, one task a line.
//!
//! A start of the binary per task is most of what 200 `submit`s cost; one process reading
//! a file of them pays it once. Every line is checked before any is submitted, so a typo
//! on line 150 does not leave 149 tasks queued and the rest not.

use std::path::Path;

use serde_json::Value;

use super::submit::Args;
use super::usage::CliError;
use crate::cli::common::exit;
use crate::{Task, TaskId};

/// One task of the batch, with the line it came from.
struct Line {
    number: usize,
    task: Task,
}

pub fn run(args: &Args) -> anyhow::Result<i32> {
    let file = args.task.file.as_ref().expect("clap: --batch requires -f");
    let client = args.root.client()?;
    let text = super::send::read_prompt(None, Some(file))?;
    let name = if file.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        file.display().to_string()
    };
    let base = base_task(args)?;
    let lines = parse(&text, &name, &base)?;
    if lines.is_empty() {
        anyhow::bail!(CliError::Usage(format!("{name} holds no task")));
    }
    // The lines' new names are made durable together, by one commit at the end, and
    // only then is any id printed: an id on the output is a task accepted for good.
    let (submitted, committed) = crate::fsio::in_one_commit(|| submit_all(&client, lines));
    let (ids, failed) = submitted;
    if let Err(e) = committed {
        // Not printed as accepted, but named: they are queued and may run, so a
        // resubmission would run them twice; `conductor tasks` shows what is left.
        let named: Vec<String> = ids.iter().map(|(id, _)| id.to_string()).collect();
        let e = anyhow::Error::from(e).context(format!(
            "{name}: the {} tasks submitted ({}) are queued but not known to be on disk: \
             they may run, or be lost if the machine fails; see `conductor tasks` before \
             submitting them again",
            ids.len(),
            named.join(" ")
        ));
        return Err(match failed {
            Some((number, first)) => e.context(format!("{name}:{number}: {first:#}")),
            None => e,
        });
    }
    for (id, number) in &ids {
        if args.json {
            let line_json = serde_json::json!({ "id": id, "line": number });
            super::output::emit(&format!("{line_json}\n"))?;
        } else {
            super::output::emit(&format!("{id}\n"))?;
        }
    }
    if let Some((number, e)) = failed {
        let done = if ids.is_empty() {
            "none was submitted".to_string()
        } else {
            format!("the {} before it were (their ids are above)", ids.len())
        };
        return Err(e.context(format!(
            "{name}:{number}: not submitted, nor the lines after it; {done}"
        )));
    }
    let ids: Vec<TaskId> = ids.into_iter().map(|(id, _)| id).collect();
    if !args.wait {
        super::waiting::warn_if_unserved_queue(client.root());
        return Ok(exit::OK);
    }
    super::wait::wait_tasks(&client, &ids, args.wait_timeout, args.json)
}

/// The task every line starts from: the options given, with a stand-in prompt (the
/// prompt comes from the line).
fn base_task(args: &Args) -> anyhow::Result<Task> {
    let mut flags = args.task.clone();
    flags.prompt = Some("(from the batch file)".into());
    flags.file = None;
    let mut task = flags.into_task()?;
    args.queue.apply(&mut task)?;
    Ok(task)
}

/// Every task of `text`, each checked as the queue will check it.
fn parse(text: &str, name: &str, base: &Task) -> anyhow::Result<Vec<Line>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let task = task_of(line, base)
            .map_err(|why| CliError::Usage(format!("{name}:{number}: {why}")))?;
        out.push(Line { number, task });
    }
    Ok(out)
}

/// The task one line describes: a prompt as it is, or a JSON object of task.json's
/// fields laid over `base`.
fn task_of(line: &str, base: &Task) -> Result<Task, String> {
    if !line.trim_start().starts_with('{') {
        let mut task = base.clone();
        task.prompt = line.to_string();
        task.validate()?;
        return Ok(task);
    }
    let given: serde_json::Map<String, Value> =
        serde_json::from_str(line).map_err(|e| format!("not a JSON task object: {e}"))?;
    if !given.get("prompt").is_some_and(Value::is_string) {
        return Err("a task line needs a \"prompt\" string".into());
    }
    let mut merged = match serde_json::to_value(base) {
        Ok(Value::Object(m)) => m,
        _ => return Err("cannot build the task".into()),
    };
    merged.extend(given);
    let bytes = serde_json::to_vec(&Value::Object(merged)).map_err(|e| e.to_string())?;
    let task = Task::from_bytes(Path::new("the line"), &bytes).map_err(|e| e.to_string())?;
    task.validate()?;
    Ok(task)
}

/// The ids submitted, with their line numbers; and the first line that failed, with why.
type Submitted = (Vec<(TaskId, usize)>, Option<(usize, anyhow::Error)>);

/// Submit every line in turn, stopping at the first that fails. The root is checked
/// once for them all ([`crate::queue::Submitter`]); a root that fails it fails the
/// first line.
fn submit_all(client: &crate::Client, lines: Vec<Line>) -> Submitted {
    let mut ids = Vec::with_capacity(lines.len());
    let mut submitter = None;
    for line in lines {
        match submit_line(client, &mut submitter, line.task) {
            Ok(id) => ids.push((id, line.number)),
            Err(e) => return (ids, Some((line.number, e))),
        }
    }
    (ids, None)
}

/// Submit one task as `conductor submit` does: its dependencies resolved now (an
/// earlier line's id is on the root by then), its depth stamped. `submitter` is opened
/// by the first line.
fn submit_line(
    client: &crate::Client,
    submitter: &mut Option<crate::queue::Submitter>,
    mut task: Task,
) -> anyhow::Result<TaskId> {
    crate::env::stamp_depth(&mut task)?;
    let submitter = match submitter {
        Some(s) => s,
        None => submitter.insert(crate::queue::Submitter::open(client.root().clone())?),
    };
    Ok(crate::verbs::submit::submit_one_of_many(
        client, submitter, task,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Client, Root};

    fn lines(n: usize) -> Vec<Line> {
        (1..=n)
            .map(|number| Line {
                number,
                task: Task::new(format!("task {number}")),
            })
            .collect()
    }

    /// The root's trust check (~17 `stat`s) does not depend on the task: a batch makes
    /// it once, not once a line (issue 39.3), and still queues every line.
    #[test]
    fn a_batch_checks_the_root_once_for_all_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::new(Root::new(dir.path().join("root")));
        client.init_queue().unwrap();
        let before = crate::trust::shared_checks();
        let (ids, failed) = submit_all(&client, lines(5));
        assert!(failed.is_none(), "{:?}", failed.map(|(_, e)| e));
        assert_eq!(crate::trust::shared_checks() - before, 1);
        assert_eq!(ids.len(), 5);
        let pending = crate::Queue::new(client.root().clone()).scan().unwrap();
        assert_eq!(pending.len(), 5);
    }

    /// A root that is not there fails the batch's first line, naming it, and nothing
    /// is made (the check once a batch is still made before any line is written).
    #[test]
    fn a_batch_into_a_missing_root_fails_its_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let client = Client::new(Root::new(&gone));
        let (ids, failed) = submit_all(&client, lines(3));
        assert!(ids.is_empty());
        let (number, e) = failed.expect("refused");
        assert_eq!(number, 1);
        assert!(
            matches!(
                e.downcast_ref::<crate::Error>(),
                Some(crate::Error::NoRoot { .. })
            ),
            "{e:#}"
        );
        assert!(!gone.exists());
    }
}
