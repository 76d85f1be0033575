//! Doctor checks that every task, status and result file under `workers/` parses, and
//! that the id registry and the queue's results are whole.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsio::{self, RESULT_SIZE_LIMIT, SMALL_FILE_LIMIT, TASK_SIZE_LIMIT};
use crate::fsio::{is_temp_name, regular_files};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{parse_result, parse_status, Task};

use super::check::Check;

/// What a JSON file under `workers/` should parse as.
#[derive(Debug, Clone, Copy)]
enum JsonKind {
    Status,
    Result,
    Task,
}

impl JsonKind {
    fn parse(self, path: &Path, bytes: &[u8]) -> Result<()> {
        match self {
            JsonKind::Status => parse_status(path, bytes).map(drop),
            JsonKind::Result => parse_result(path, bytes).map(drop),
            JsonKind::Task => Task::from_bytes(path, bytes).map(drop),
        }
    }

    fn size_limit(self) -> u64 {
        match self {
            JsonKind::Status => SMALL_FILE_LIMIT,
            JsonKind::Result => RESULT_SIZE_LIMIT,
            JsonKind::Task => TASK_SIZE_LIMIT,
        }
    }
}

/// What is wrong with the file, if it exists and is wrong; counts the files read.
fn problem_with(path: &Path, kind: JsonKind, count: &mut usize) -> Option<String> {
    let bytes = match fsio::read_bounded(path, kind.size_limit()) {
        Ok(None) => return None,
        Ok(Some(bytes)) => bytes,
        Err(e) => {
            *count += 1;
            return Some(e.to_string());
        }
    };
    *count += 1;
    kind.parse(path, &bytes).err().map(|e| e.to_string())
}

/// A slot's JSON files, but for its inbox, with what each should parse as.
fn slot_files(w: &WorkerPaths) -> Vec<(PathBuf, JsonKind)> {
    let mut files = vec![
        (w.status(), JsonKind::Status),
        (w.result(), JsonKind::Result),
        (w.running(), JsonKind::Task),
    ];
    for (dir, kind) in [
        (w.results_dir(), JsonKind::Result),
        (w.tasks_dir(), JsonKind::Task),
    ] {
        if let Ok(list) = regular_files(&dir) {
            files.extend(
                list.into_iter()
                    .filter(|(n, _, _)| n.ends_with(".json") && !is_temp_name(n))
                    .map(|(_, p, _)| (p, kind)),
            );
        }
    }
    files
}

/// The first five problems, and how many more there are.
fn summary(problems: &[String]) -> String {
    let mut s = problems
        .iter()
        .take(5)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > 5 {
        s.push_str(&format!("; and {} more", problems.len() - 5));
    }
    s
}

/// Every JSON file under `workers/` parses as what it claims to be. An inbox task
/// that does not is only a warning: the worker rejects it with a reason.
pub(super) fn check_json_files(root: &Root) -> Check {
    let slots = match root.slots() {
        Ok(s) => s,
        Err(e) => return Check::fail("json", e.to_string(), "check the root's permissions"),
    };
    let mut bad = Vec::new();
    let mut inbox_bad = Vec::new();
    let mut count = 0usize;
    for slot in slots {
        let w = root.worker(slot);
        for (path, kind) in slot_files(&w) {
            bad.extend(problem_with(&path, kind, &mut count));
        }
        inbox_bad.extend(problem_with(&w.task(), JsonKind::Task, &mut count));
    }
    if !bad.is_empty() {
        Check::fail(
            "json",
            format!(
                "{} of {count} files do not parse: {}",
                bad.len(),
                summary(&bad)
            ),
            "move the named files aside (a worker restarted on the slot recovers what it can); \
             a result or status written by a newer conductor needs that conductor",
        )
    } else if !inbox_bad.is_empty() {
        Check::warn(
            "json",
            format!("an inbox task does not parse: {}", summary(&inbox_bad)),
            "if it is not being written right now, the worker moves it to rejected/ with a reason; \
             fix the sender",
        )
    } else {
        Check::ok(
            "json",
            format!("all {count} task, status and result files parse"),
        )
    }
}

/// Every entry of the id registry (`ids/`) and every queue result parses; damaged files
/// set aside earlier (`.damaged-*`) are listed. A damaged entry is only an index: the
/// next lookup of its id rebuilds it from where the task is.
pub(super) fn check_index(root: &Root) -> Check {
    let mut bad = Vec::new();
    let mut aside = Vec::new();
    let mut count = 0usize;
    let mut dirs = vec![root.ids_dir(), root.queue_results()];
    if let Ok(slots) = root.slots() {
        dirs.extend(slots.into_iter().map(|s| root.worker(s).results_dir()));
    }
    for (i, dir) in dirs.iter().enumerate() {
        for (name, path, _) in regular_files(dir).unwrap_or_default() {
            if name.starts_with(fsio::DAMAGED_PREFIX) {
                aside.push(path.display().to_string());
            } else if i == 0 && !name.starts_with('.') {
                count += 1;
                let id = crate::protocol::TaskId::from(name.as_str());
                if let Err(e) = crate::ids::check_entry(&path) {
                    bad.push(format!("{e} (task {id})"));
                }
            } else if i == 1 && name.ends_with(".json") && !is_temp_name(&name) {
                bad.extend(problem_with(&path, JsonKind::Result, &mut count));
            }
        }
    }
    if !bad.is_empty() {
        Check::fail(
            "index",
            format!(
                "{} of {count} registry entries and queue results are damaged: {}",
                bad.len(),
                summary(&bad)
            ),
            "a damaged registry entry is rebuilt from the task's files at its next lookup \
             (`conductor tasks` looks up every id); a damaged queue result means the task's \
             answer was lost: `conductor retry ID` runs it again",
        )
    } else if !aside.is_empty() {
        Check::warn(
            "index",
            format!(
                "{} set aside: {}",
                crate::text::count(aside.len(), "damaged file was", "damaged files were"),
                summary(&aside)
            ),
            "they are no longer read; look at them if you want, then remove them",
        )
    } else {
        Check::ok(
            "index",
            format!("all {count} registry entries and queue results parse"),
        )
    }
}
