//! `conductor merge`'s report: each task merged, conflicting, check failed or left, with the next step for every dead end; or one JSON document.

use std::path::Path;

use crate::cli::common::exit;
use crate::protocol::TaskId;
use crate::review::{MergeOutcome, MergeReport, MergeResult};

/// Print `report` (as text, or JSON with `json`); the exit code: 0 when every task
/// taken was merged, else 1.
pub fn print(report: &MergeReport, all: bool, json: bool) -> anyhow::Result<i32> {
    let code = if report.all_merged() {
        exit::OK
    } else {
        exit::FAILURE
    };
    if json {
        super::output::emit_json(&serde_json::json!({
            "allMerged": report.all_merged(),
            "tasks": report.tasks,
        }))?;
        return Ok(code);
    }
    if report.tasks.is_empty() {
        eprintln!("no finished task has a branch left to merge");
        return Ok(exit::OK);
    }
    for t in &report.tasks {
        match &t.result {
            MergeResult::Merged { into, head } => super::output::emit(&format!(
                "merged task {} ({}, {}) into {into} of {}: now at {}\n",
                t.id,
                t.branch,
                t.diffstat,
                t.repo.display(),
                &head[..head.len().min(12)]
            ))?,
            _ => eprintln!("{}", dead_end(t)),
        }
    }
    if all && !report.all_merged() {
        let count =
            |f: fn(&MergeResult) -> bool| report.tasks.iter().filter(|t| f(&t.result)).count();
        eprintln!(
            "merged {}, {} conflicting, {} check failed, {} left of {} tasks",
            count(|r| matches!(r, MergeResult::Merged { .. })),
            count(|r| matches!(r, MergeResult::Conflict { .. })),
            count(|r| matches!(r, MergeResult::CheckFailed { .. })),
            count(|r| matches!(r, MergeResult::Left { .. })),
            report.tasks.len()
        );
    }
    Ok(code)
}

/// What became of a task not merged, and what to do next.
fn dead_end(t: &MergeOutcome) -> String {
    match &t.result {
        MergeResult::Conflict { into, files } => format!(
            "error: task {}: merging {} into {into} of {} conflicts in {}; nothing was \
             merged and the repository is as it was\n  next: {}",
            t.id,
            t.branch,
            t.repo.display(),
            files.join(", "),
            next_steps(&t.id, &t.branch, &t.repo)
        ),
        MergeResult::CheckFailed {
            into,
            exit,
            output_tail,
        } => format!(
            "error: task {} ({}) merged onto {into} fails the check ({}); not merged.\n\
             --- the check's output (its end) ---\n{}\n---\n  next: {}",
            t.id,
            t.branch,
            exit.map_or_else(|| "killed".to_string(), |c| format!("exit {c}")),
            output_tail.trim_end(),
            next_steps(&t.id, &t.branch, &t.repo)
        ),
        MergeResult::Left { reason } => format!("error: task {} was not merged: {reason}", t.id),
        MergeResult::Merged { .. } => String::new(),
    }
}

/// The ways on from a task that could not be merged.
fn next_steps(id: &TaskId, branch: &str, repo: &Path) -> String {
    format!(
        "redo it on top (conductor retry {id} --rebase), merge by hand (cd {} && git merge \
         {branch}), or throw it away (conductor discard {id} --force)",
        repo.display()
    )
}
