//! `conductor diff ID`, `conductor merge ID|--all`, `conductor discard ID`: the change a
//! task made in its own worktree (`--worktree`), reviewed, taken in, or thrown away.

use std::path::PathBuf;
use std::process::Command;

use super::worktrees_repo::locate;
use super::RootArg;
use crate::cli::common::exit;
use crate::protocol::{TaskId, WorktreeChange};
use crate::tasks::{ListOptions, TaskState};
use crate::worktree::{self, MergeHow, Repo};
use crate::{Client, Error};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
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
#[command(after_help = "\
Merges a finished task's branch (conductor/ID) into the branch checked out in its \
repository, then removes the task's worktree and branch. The checkout must be clean (no \
uncommitted changes to tracked files) and on a branch. On a conflict nothing changes: the \
merge is aborted, the repository is exactly as it was, the conflicting files are listed and \
the exit code is 1. With --all, every finished task whose branch is still there is merged, \
oldest first, stopping at the first conflict.

Exit codes: 0 merged, 1 a conflict (or git failed), 2 usage (no such task, no worktree, \
branch gone), 3 refused (uncommitted changes, detached HEAD)")]
pub struct MergeArgs {
    /// The task's id.
    #[arg(value_parser = super::task_id_arg, required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<TaskId>,
    /// Merge every finished task whose branch is still there, oldest first.
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
    after_help = "Removes the task's worktree and deletes its branch (conductor/ID); \
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

/// The worktree change task `id`'s result records.
pub(super) fn change_of(client: &Client, id: &TaskId) -> anyhow::Result<WorktreeChange> {
    let Some(r) = client.result_of(id)? else {
        return Err(match client.find_task(id)? {
            Some(loc) => anyhow::anyhow!(
                "task {id} has not finished (it is {}); `conductor wait {id}` waits for it",
                loc.state
            ),
            None => Error::NoSuchTask {
                id: id.to_string(),
                root: client.root().path().to_path_buf(),
            }
            .into(),
        });
    };
    Ok(r.worktree
        .ok_or_else(|| Error::NoWorktree { id: id.to_string() })?)
}

pub fn run_diff(mut args: DiffArgs) -> anyhow::Result<i32> {
    let (id, change) = locate(&args.root, &args.id, args.dir.as_deref())?;
    args.id = id;
    if !change.kept {
        super::emit(&format!("task {} changed nothing\n", args.id))?;
        return Ok(exit::OK);
    }
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
    let todo: Vec<(TaskId, WorktreeChange)> = match &args.id {
        Some(id) => vec![locate(&args.root, id, args.dir.as_deref())?],
        None => mergeable(&args.root.client()?)?,
    };
    if todo.is_empty() {
        eprintln!("no finished task has a branch left to merge");
        return Ok(exit::OK);
    }
    for (id, change) in todo {
        let message = merge_message(&id, &change, how);
        let head = worktree::merge(&id, &change, how, &message)?;
        let into = Repo::of(&change.repo)
            .and_then(|r| r.current_branch())
            .ok()
            .flatten()
            .unwrap_or_else(|| "HEAD".into());
        super::emit(&format!(
            "merged task {id} ({}, {}) into {into} of {}: now at {}\n",
            change.branch,
            change.diffstat(),
            change.repo.display(),
            &head[..head.len().min(12)]
        ))?;
    }
    Ok(exit::OK)
}

/// Finished, successful tasks whose branch is still there, oldest first.
fn mergeable(client: &Client) -> anyhow::Result<Vec<(TaskId, WorktreeChange)>> {
    let opts = ListOptions {
        states: vec![TaskState::Done],
        limit: None,
        ..ListOptions::default()
    };
    let mut found: Vec<_> = client
        .list_tasks(&opts)?
        .into_iter()
        .filter_map(|t| {
            let w = t.worktree.filter(|w| w.kept)?;
            Some((t.finished_at.unwrap_or_default(), t.id, w))
        })
        .filter(|(_, _, w)| {
            Repo::of(&w.repo)
                .and_then(|r| r.branch_exists(&w.branch))
                .unwrap_or(false)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found.into_iter().map(|(_, id, w)| (id, w)).collect())
}

/// `Merge conductor/t1 (task t1): <the branch's first line>`.
fn merge_message(id: &TaskId, change: &WorktreeChange, how: MergeHow) -> String {
    let subject = worktree::git(&change.repo, &["log", "-1", "--format=%s", &change.branch])
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match how {
        MergeHow::Squash => format!(
            "{subject}\n\nConductor-Task: {id} (squashed {})\n",
            change.branch
        ),
        _ => format!("Merge {} (task {id}): {subject}\n", change.branch),
    }
}

pub fn run_discard(mut args: DiscardArgs) -> anyhow::Result<i32> {
    let (id, change) = locate(&args.root, &args.id, args.dir.as_deref())?;
    args.id = id;
    let repo = Repo::of(&change.repo)?;
    let had_branch = repo.branch_exists(&change.branch)?;
    let had_tree = change.path.exists();
    if !had_branch && !had_tree {
        super::emit(&format!(
            "task {}: {} and its worktree are gone already\n",
            args.id, change.branch
        ))?;
        return Ok(exit::OK);
    }
    worktree::remove(&repo.top, &change.path, Some(&change.branch));
    if repo.branch_exists(&change.branch)? || change.path.exists() {
        anyhow::bail!(
            "task {}: could not remove {} or its worktree {} (see the warnings above)",
            args.id,
            change.branch,
            change.path.display()
        );
    }
    super::emit(&format!(
        "discarded task {}: removed {} and its worktree {}\n",
        args.id,
        change.branch,
        change.path.display()
    ))?;
    Ok(exit::OK)
}
