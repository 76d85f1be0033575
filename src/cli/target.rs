//! What `wait`, `result`, `logs`, `cancel` and `retry` are about: tasks by id, or a worker slot (the older, lower-level form).

use crate::cli::usage::CliError;
use crate::{Root, Slot, TaskId};

use super::{args::parse_slot, args::task_id_arg};

/// The rule, for each command's `--help`.
pub const TARGET_HELP: &str = "\
Tasks are named by id, wherever they are (an inbox, the queue, working, finished). A worker \
slot is named with --slot N: the arguments are then task ids on slot N (none: its current \
or newest task). A bare first argument is a task id; only when no task has that id or \
prefix and it is the number of an existing slot (workers/N/) is it taken as that slot. A \
number that names both a slot and a task is refused, showing both commands (--slot N, \
--task ID). A task id may be shortened to any prefix of at \
least 4 characters that starts no other id (as `tasks`, `status` and `queue` show it on a \
terminal): a generated id's first 6 characters always do. A prefix of a task and its \
retries names the task; PREFIX-rN names its retry N.";

/// `[ARGS…] [--slot N] [--task ID]…`, shared by the task commands.
#[derive(Debug, Clone, clap::Args)]
pub struct Targets {
    /// Task ids; or a slot number, then task ids on that slot (the slot forms).
    #[arg(value_name = "TASK_ID")]
    pub args: Vec<String>,
    /// The slot form, explicitly: the arguments are task ids on worker slot N.
    #[arg(long, value_name = "N", value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// A task id, even one that is also the number of a slot (repeatable).
    #[arg(long = "task", value_name = "TASK_ID")]
    pub task: Vec<String>,
}

/// What the arguments name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A worker slot, and task ids on it (maybe none: its current or newest task).
    Slot { slot: Slot, ids: Vec<TaskId> },
    /// Tasks by id, wherever they are (at least one).
    Tasks(Vec<TaskId>),
}

impl Targets {
    /// Apply the rule in [`TARGET_HELP`] on `root`, for `conductor {command}`.
    pub fn resolve(&self, root: &Root, command: &str) -> anyhow::Result<Target> {
        let mut args = self.args.as_slice();
        let mut slot = self.slot;
        if slot.is_none() {
            if let Some(s) = bare_slot(root, args.first(), command)? {
                slot = Some(s);
                args = &args[1..];
            }
        }
        let ids = args
            .iter()
            .chain(&self.task)
            .map(|a| id_on(root, a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        match slot {
            Some(slot) => Ok(Target::Slot { slot, ids }),
            None if ids.is_empty() => Err(CliError::Usage(
                "name a task id (or a worker slot: --slot N)".to_string(),
            )
            .into()),
            None => Ok(Target::Tasks(ids)),
        }
    }
}

/// The slot a bare first argument names: one that is the number of an existing slot and
/// names no task (a task id or prefix wins; both at once is refused, naming both forms, so
/// `conductor wait 3` never silently means the other thing).
fn bare_slot(root: &Root, first: Option<&String>, command: &str) -> anyhow::Result<Option<Slot>> {
    let Some(first) = first else { return Ok(None) };
    let Ok(slot) = first.parse::<Slot>() else {
        return Ok(None);
    };
    if !root.worker(slot).dir.is_dir() {
        return Ok(None);
    }
    let task = match crate::ids::resolve(root, &task_id_arg(first)?) {
        // `resolve` hands an unknown id back as given: a task only if registered.
        Ok(id) => crate::ids::lookup(root, &id)?.map(|_| id.to_string()),
        // A prefix of several ids names tasks too.
        Err(crate::Error::AmbiguousId { count, .. }) => Some(format!("{first}… ({count} ids)")),
        Err(e) => return Err(e.into()),
    };
    match task {
        None => Ok(Some(slot)),
        Some(task) => Err(CliError::Usage(format!(
            "{first:?} names both worker slot {slot} and task {task}: say which, \
             `conductor {command} --slot {slot}` or `conductor {command} --task {first}`"
        ))
        .into()),
    }
}

/// A task id from the command line on `root`: a registered id, or any unique prefix of
/// one at least 4 characters long (as git takes a short hash).
pub fn id_on(root: &Root, given: &str) -> anyhow::Result<TaskId> {
    let id = task_id_arg(given)?;
    Ok(crate::ids::resolve(root, &id)?)
}

/// The shortest a view shows a shortened id (what [`id_on`] takes back).
pub const SHOWN_PREFIX: usize = crate::protocol::id_gen::HANDLE_LEN;

/// Task ids as a view on a screen `width` wide shows them: whole when unbounded (a
/// pipe, a script), else each cut to the shortest prefix of at least [`SHOWN_PREFIX`]
/// characters that starts no other id on the root — the handle kept when columns go.
pub fn shown_ids(root: &Root, ids: &[String], width: Option<usize>) -> Vec<String> {
    if width.is_none() {
        return ids.to_vec();
    }
    match crate::ids::all(root) {
        Ok(all) => crate::ids::short_forms(&all, ids, SHOWN_PREFIX),
        Err(_) => ids.to_vec(),
    }
}

/// A task id as a view with no room to spare names it without reading the root: a
/// generated id by its handle (unique on its root by construction; a retry's with its
/// `-rN`), any other whole.
pub fn handle_of(id: &TaskId) -> String {
    let text = id.to_string();
    let len = crate::protocol::id_gen::HANDLE_LEN;
    if !crate::protocol::id_gen::is_generated(&text) {
        return text;
    }
    match text.rsplit_once("-r") {
        Some((_, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{}-r{n}", &text[..len])
        }
        _ => text[..len].to_string(),
    }
}

/// The one task id of a command that takes one.
pub fn single(ids: Vec<TaskId>, command: &str) -> anyhow::Result<TaskId> {
    let mut ids = ids.into_iter();
    match (ids.next(), ids.next()) {
        (Some(id), None) => Ok(id),
        _ => Err(CliError::Usage(format!("`conductor {command}` takes one task id")).into()),
    }
}

/// At most one task id on a slot.
pub fn at_most_one(ids: Vec<TaskId>, command: &str) -> anyhow::Result<Option<TaskId>> {
    if ids.len() > 1 {
        return Err(CliError::Usage(format!(
            "`conductor {command} N` takes at most one task id on the slot"
        ))
        .into());
    }
    Ok(ids.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_id_is_named_by_its_handle_and_others_whole() {
        let id = |s: &str| TaskId::parse(s).unwrap();
        assert_eq!(handle_of(&id("kq3x9a-1795439873131-4242-0")), "kq3x9a");
        assert_eq!(
            handle_of(&id("kq3x9a-1795439873131-4242-0-r2")),
            "kq3x9a-r2"
        );
        assert_eq!(
            handle_of(&id("1795439873131-4242-0")),
            "1795439873131-4242-0"
        );
        assert_eq!(handle_of(&id("my-task")), "my-task");
    }
}
