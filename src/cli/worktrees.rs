//! `conductor diff ID`, `conductor merge ID|--all`, `conductor discard ID`: the change a
//! task made in its own worktree (`--worktree`), reviewed, taken in, or thrown away.

use std::path::PathBuf;
use std::process::Command;

use super::worktrees_repo::locate;
use super::RootArg;
use crate::cli::common::exit;
use crate::protocol::TaskId;
use crate::review::{self, MergeRequest, MergeResult, MergeTarget};
use crate::worktree::{self, MergeHow};
use crate::Error;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Shows `git diff BASE...BRANCH` in the task's repository: what the task changed since its \
branch was made, whatever happened to the checked-out branch since. Paged like git when \
stdout is a terminal.")]
pub struct DiffArgs {
    /// The task's id.
    #[arg(value_parser = super::task_id_arg)]
    pub id: TaskId,
    /// Only the diffstat.
    #[arg(long)]
    pub stat: bool,
    /// The repository to look in for branch `conductor/ID` when no conductor root knows
    /// the task (after `run --worktree`; default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Merges a finished task's branch (conductor/ID) into the branch checked out in its \
repository, then removes the task's worktree and branch. The checkout must be clean (no \
uncommitted changes to tracked files) and on a branch. On a conflict nothing changes: the \
merge is aborted, the repository is exactly as it was, the conflicting files are listed and \
the exit code is 1. With --all, every finished task whose branch is still there is taken in \
the order the tasks finished (oldest first), and a conflict does not stop the rest: each task \
is reported merged, conflicting (its files; the merge aborted, its branch kept) or left (not \
merged, with the reason: uncommitted changes, a detached HEAD, git failing).

Exit codes: 0 merged (with --all: every task), 1 a conflict (or git failed; with --all: any \
task not merged), 2 usage (no such task, not finished, no worktree, branch gone), 3 refused \
(uncommitted changes, detached HEAD)")]
pub struct MergeArgs {
    /// The task's id.
    #[arg(value_parser = super::task_id_arg, required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<TaskId>,
    /// Merge every finished task whose branch is still there, in the order they finished,
    /// going on past a conflict.
    #[arg(long)]
    pub all: bool,
    /// Rebase the task's branch onto the checked-out branch, then fast-forward.
    #[arg(long, conflicts_with = "squash")]
    pub rebase: bool,
    /// Take the task's whole change as one new commit.
    #[arg(long)]
    pub squash: bool,
    /// The repository to look in for branch `conductor/ID` when no conductor root knows
    /// the task (after `run --worktree`; default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Removes the task's worktree and deletes its branch (conductor/ID); \
its result stays, recording the commits it had."
)]
pub struct DiscardArgs {
    /// The task's id.
    #[arg(value_parser = super::task_id_arg)]
    pub id: TaskId,
    /// The repository to look in for branch `conductor/ID` when no conductor root knows
    /// the task (after `run --worktree`; default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run_diff(mut args: DiffArgs) -> anyhow::Result<i32> {
    let (id, change) = locate(&args.root, &args.id, args.dir.as_deref())?;
    args.id = id;
    if !change.kept {
        super::emit(&format!("task {} changed nothing\n", args.id))?;
        return Ok(exit::OK);
    }
    // git itself shows it, paged and coloured as the user has git set up.
    let range = worktree::diff_range(&change)?;
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(&change.repo).arg("diff");
    if args.stat {
        cmd.arg("--stat");
    }
    cmd.arg(&range);
    let status = cmd
        .status()
        .map_err(|e| Error::io("run", PathBuf::from("git"), e))?;
    Ok(if status.success() {
        exit::OK
    } else {
        exit::FAILURE
    })
}

pub fn run_merge(args: MergeArgs) -> anyhow::Result<i32> {
    let how = if args.rebase {
        MergeHow::Rebase
    } else if args.squash {
        MergeHow::Squash
    } else {
        MergeHow::Merge
    };
    let all = args.id.is_none();
    let report = match &args.id {
        Some(id) => {
            let (id, change) = locate(&args.root, id, args.dir.as_deref())?;
            review::merge_of(&id, &change, how)?
        }
        None => review::merge(
            &args.root.client()?,
            &MergeRequest {
                target: MergeTarget::All,
                how,
            },
        )?,
    };
    if report.tasks.is_empty() {
        eprintln!("no finished task has a branch left to merge");
        return Ok(exit::OK);
    }
    for t in &report.tasks {
        match &t.result {
            MergeResult::Merged { into, head } => super::emit(&format!(
                "merged task {} ({}, {}) into {into} of {}: now at {}\n",
                t.id,
                t.branch,
                t.diffstat,
                t.repo.display(),
                &head[..head.len().min(12)]
            ))?,
            MergeResult::Conflict { into, files } => {
                let e = Error::MergeConflict {
                    id: t.id.to_string(),
                    branch: t.branch.clone(),
                    into: into.clone(),
                    repo: t.repo.clone(),
                    files: files.clone(),
                };
                if !all {
                    return Err(e.into());
                }
                eprintln!("error: {e}");
            }
            MergeResult::Left { reason } => {
                eprintln!("error: task {} was not merged: {reason}", t.id)
            }
        }
    }
    if all && !report.all_merged() {
        let count =
            |f: fn(&MergeResult) -> bool| report.tasks.iter().filter(|t| f(&t.result)).count();
        eprintln!(
            "merged {}, {} conflicting, {} left of {} tasks",
            count(|r| matches!(r, MergeResult::Merged { .. })),
            count(|r| matches!(r, MergeResult::Conflict { .. })),
            count(|r| matches!(r, MergeResult::Left { .. })),
            report.tasks.len()
        );
    }
    Ok(if report.all_merged() {
        exit::OK
    } else {
        exit::FAILURE
    })
}

pub fn run_discard(mut args: DiscardArgs) -> anyhow::Result<i32> {
    let (id, change) = locate(&args.root, &args.id, args.dir.as_deref())?;
    args.id = id;
    let done = review::discard_of(&args.id, change)?;
    super::emit(&if done.already_gone {
        format!(
            "task {}: {} and its worktree are gone already\n",
            done.id, done.branch
        )
    } else {
        format!(
            "discarded task {}: removed {} and its worktree {}\n",
            done.id,
            done.branch,
            done.path.display()
        )
    })?;
    Ok(exit::OK)
}
