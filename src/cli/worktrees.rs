//! `conductor diff ID`, `conductor merge ID|--all`, `conductor discard ID`: the change a
//! task made in its own worktree (`--worktree`), reviewed, taken in, or thrown away.

use std::path::PathBuf;
use std::process::Command;

use super::args::RootArg;
use super::worktrees_repo::locate;
use crate::cli::common::exit;
use crate::protocol::TaskId;
use crate::review::{self, MergeRequest, MergeTarget};
use crate::worktree::{self, MergeHow};
use crate::Error;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Shows `git diff BASE...BRANCH` in the task's repository: what the task changed since its \
branch was made, whatever happened to the checked-out branch since. Paged like git when \
stdout is a terminal.")]
pub struct DiffArgs {
    /// The task's id.
    #[arg(value_parser = super::args::task_id_arg)]
    pub id: TaskId,
    /// Only the diffstat.
    #[arg(long)]
    pub stat: bool,
    /// JSON: the change and its patch (up to 1 MiB), as the MCP `diff` tool answers.
    #[arg(long, conflicts_with = "stat")]
    pub json: bool,
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
the exit code is 1. Conflicts are found first without touching any work tree (git \
merge-tree, git 2.38 or later). With --check CMD (or config.json's mergeCheck) the merged \
result is built in a scratch worktree (removed afterwards) and CMD run there with sh -c; a \
task whose check fails is not merged and the end of its output is shown. With --all, every \
finished task whose branch is still there is taken in the order the tasks finished (oldest \
first), and nothing stops the rest: each task is reported merged, conflicting (its files; \
its branch kept), check failed or left (not merged, with the reason: uncommitted changes, a \
detached HEAD, git failing), each dead end with its next step. See docs/REVIEW_AND_MERGE.md.

Exit codes: 0 merged (with --all: every task), 1 a conflict (or git failed; with --all: any \
task not merged), 2 usage (no such task, not finished, no worktree, branch gone), 3 refused \
(uncommitted changes, detached HEAD)")]
pub struct MergeArgs {
    /// The task's id.
    #[arg(value_parser = super::args::task_id_arg, required_unless_present = "all", conflicts_with = "all")]
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
    /// A shell command run on each merged result in a scratch worktree before merging
    /// (default: config.json's `mergeCheck`); a task whose check fails is not merged.
    #[arg(long, value_name = "CMD")]
    pub check: Option<String>,
    /// One JSON document: {"allMerged", "tasks": [{"id", "outcome", …}]}.
    #[arg(long)]
    pub json: bool,
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
its result stays, recording the commits it had. Work that is not in the checked-out branch \
(commits no other branch has, uncommitted changes in the worktree) is refused (exit 3) \
unless --force: conductor never loses work on its own."
)]
pub struct DiscardArgs {
    /// The task's id.
    #[arg(value_parser = super::args::task_id_arg)]
    pub id: TaskId,
    /// Throw away work that is not merged too.
    #[arg(long)]
    pub force: bool,
    /// JSON: {"id", "repo", "branch", "path", "alreadyGone"}.
    #[arg(long)]
    pub json: bool,
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
    if args.json {
        super::output::emit_json(&review::diff_of(&args.id, &change, review::DIFF_MAX_BYTES)?)?;
        return Ok(exit::OK);
    }
    if !change.kept {
        super::output::emit(&format!("task {} changed nothing\n", args.id))?;
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
    let client = args.root.client();
    let check = match (&args.check, &client) {
        (Some(c), _) => Some(c.clone()),
        (None, Ok(c)) => review::configured_check(c)?,
        (None, Err(_)) => None,
    };
    let report = match &args.id {
        Some(id) => {
            let (id, change) = locate(&args.root, id, args.dir.as_deref())?;
            review::merge_of(&id, &change, how, check.as_deref())?
        }
        None => review::merge(
            &client?,
            &MergeRequest {
                target: MergeTarget::All,
                how,
                check,
            },
        )?,
    };
    super::worktrees_merge::print(&report, args.id.is_none(), args.json)
}

pub fn run_discard(mut args: DiscardArgs) -> anyhow::Result<i32> {
    let (id, change) = locate(&args.root, &args.id, args.dir.as_deref())?;
    args.id = id;
    let done = review::discard_of(&args.id, change, args.force)?;
    if args.json {
        super::output::emit_json(&done)?;
        return Ok(exit::OK);
    }
    super::output::emit(&if done.already_gone {
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
