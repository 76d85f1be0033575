//! `conductor submit --attempts N`: best of N, one prompt run in N worktrees, each checked.

use crate::cli::common::exit;
use crate::protocol::TaskId;
use crate::queue::Queue;

use super::submit::Args;
use super::usage::CliError;

/// The most attempts one `submit --attempts` makes.
pub const MAX_ATTEMPTS: u32 = 20;

/// `submit --attempts N`: N tasks of one prompt, each in its own worktree (each with
/// the same check), labelled `attempts:<first id's handle>` (or `attempts:<--id>`, their
/// ids `<--id>-1` … `<--id>-N`). Prints their ids; with --wait, waits for all and says
/// which passed their check (exit 0 when at least one did).
pub fn run(args: &Args) -> anyhow::Result<i32> {
    let n = args.attempts.unwrap_or(1);
    if n == 0 || n > MAX_ATTEMPTS {
        anyhow::bail!(CliError::Usage(format!(
            "--attempts {n} is out of range 1-{MAX_ATTEMPTS}"
        )));
    }
    if args.task.options.no_worktree {
        anyhow::bail!(CliError::Usage(
            "--attempts runs each attempt in a worktree of its own: drop --no-worktree".into()
        ));
    }
    let client = args.root.client()?;
    let mut task = crate::verbs::submit::task_of(&super::submit::request(args)?)?;
    task.worktree = Some(true);
    for dep in &mut task.after {
        *dep = crate::ids::resolve(client.root(), dep)?;
    }
    crate::verbs::submit::check_worktree_dir(&task)?;
    let ids = attempt_ids(client.root(), task.id.take(), n)?;
    let label = attempts_label(&ids[0])?;
    task.labels.push(label.clone());
    let queue = Queue::new(client.root().clone());
    for id in &ids {
        let mut t = task.clone();
        t.id = Some(id.clone());
        queue.submit(&t)?;
        if args.json {
            super::output::emit(&format!(
                "{}\n",
                serde_json::json!({ "id": id, "label": label })
            ))?;
        } else {
            super::output::emit(&format!("{id}\n"))?;
        }
    }
    eprintln!("{n} attempts labelled {label}: `conductor tasks --review --label {label}`");
    if !args.wait {
        super::waiting::warn_if_unserved_queue(client.root());
        return Ok(exit::OK);
    }
    super::wait::wait_tasks(&client, &ids, args.wait_timeout, args.json)?;
    summarize(client.root(), &ids, &label)
}

/// The attempts' ids: `<given>-1` … `<given>-N`, else N fresh ones.
fn attempt_ids(root: &crate::Root, given: Option<TaskId>, n: u32) -> anyhow::Result<Vec<TaskId>> {
    (1..=n)
        .map(|k| match &given {
            Some(id) => {
                let id = TaskId::Text(format!("{id}-{k}"));
                id.validate()
                    .map_err(|reason| crate::Error::InvalidTask { reason })?;
                Ok(id)
            }
            None => Ok(crate::ids::fresh(root)?),
        })
        .collect()
}

/// `attempts:<the first attempt's handle>`, or `attempts:<--id>` (its `-1` cut off).
fn attempts_label(first: &TaskId) -> anyhow::Result<String> {
    let text = first.to_string();
    let base = match text.strip_suffix("-1") {
        Some(b) if !crate::protocol::id_gen::is_generated(&text) => b.to_string(),
        _ => super::target::handle_of(first),
    };
    let label = format!("attempts:{base}");
    if label.len() > 64 {
        anyhow::bail!(CliError::Usage(format!(
            "--id {base} is too long to label the attempts (at most 55 characters)"
        )));
    }
    Ok(label)
}

/// Say which attempts passed their check; exit 0 when one did.
fn summarize(root: &crate::Root, ids: &[TaskId], label: &str) -> anyhow::Result<i32> {
    let mut passed = Vec::new();
    for id in ids {
        let r = crate::tasks::result_of(root, id)?;
        let ok = r.is_some_and(|r| r.success && r.until.check.as_ref().is_none_or(|c| c.passed));
        if ok {
            passed.push(id.to_string());
        }
    }
    eprintln!(
        "{} of {} attempts passed{}: `conductor tasks --review --label {label}`",
        passed.len(),
        ids.len(),
        if passed.is_empty() {
            String::new()
        } else {
            format!(" ({})", passed.join(", "))
        }
    );
    Ok(if passed.is_empty() {
        exit::FAILURE
    } else {
        exit::OK
    })
}
