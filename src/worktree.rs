//! Git worktrees, made with the `git` command users have: a task's own worktree and
//! branch (`--worktree`: made before its agent starts, its leftovers committed when it
//! ends, then diffed, merged or discarded), and the per-worker worktrees of
//! `conductor launch --worktrees` (which build on [`Repo`] and [`git`]).
//!
//! A task's worktree lives next to the repository, at
//! `<parent>/<repo dir name>.conductor-worktrees/<task id>` (or under config.json's
//! `worktreeDir`; see [`place`]), never inside the user's working tree nor under `.git/`,
//! on branch `conductor/<task id>`. docs/ARCHITECTURE.md ("Task worktrees") has the
//! protocol.

mod git;
pub mod keep;
mod listing;
mod merge;
pub mod merge_tree;
pub mod place;
mod plan;
mod remove;
mod repo;
pub mod setup;
pub use git::git;
pub(crate) use git::git_as_committer;
pub use git::git_output;
pub use listing::{task_branches, task_worktrees};
pub use merge::{diff_range, merge, ready_to_merge, MergeHow};
pub use plan::{plan, task_branch, Request};
// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use {
    git::{FALLBACK_EMAIL, FALLBACK_NAME},
    place::FOLDER,
    plan::BRANCH_PREFIX,
};
use remove::folder_lock;
pub use remove::{remove, remove_forced};
pub use repo::Repo;

use git::{command_error, git_with_input, succeeds};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::protocol::{TaskId, WorktreeChange, WorktreeRecord};

/// A slot's record of its task's worktree: `workers/<N>/worktree.json`.
pub const RECORD_FILE: &str = "worktree.json";
/// Make the worktree `rec` plans (`git worktree add -b`), unless it is there from an
/// earlier attempt; with `include_uncommitted`, copy the repository's staged and
/// unstaged changes into it (`git diff --binary HEAD | git apply`). On failure nothing
/// made is left behind.
pub fn make(rec: &WorktreeRecord, include_uncommitted: bool) -> Result<()> {
    if rec.path.exists() {
        return Ok(());
    }
    let folder = rec.path.parent().unwrap_or(&rec.path);
    place::ensure(folder)?;
    let lock = folder_lock(folder)?;
    let path = rec.path.to_string_lossy();
    let args = [
        "worktree",
        "add",
        "--quiet",
        "-b",
        &rec.branch,
        &path,
        &rec.base_commit,
    ];
    let out = git_output(&rec.repo, &args)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("already exists") && stderr.contains(&rec.branch) {
            return Err(Error::BranchExists {
                repo: rec.repo.clone(),
                branch: rec.branch.clone(),
            });
        }
        return Err(command_error(&rec.repo, &args, &out));
    }
    drop(lock);
    if include_uncommitted {
        if let Err(e) = copy_uncommitted(rec) {
            remove_forced(&rec.repo, &rec.path, Some(&rec.branch));
            return Err(e);
        }
    }
    Ok(())
}

fn copy_uncommitted(rec: &WorktreeRecord) -> Result<()> {
    let args = ["diff", "--binary", "HEAD"];
    let out = git_output(&rec.repo, &args)?;
    if !out.status.success() {
        return Err(command_error(&rec.repo, &args, &out));
    }
    if out.stdout.is_empty() {
        return Ok(());
    }
    let applied = git_with_input(
        &rec.path,
        &["apply", "--binary", "--whitespace=nowarn", "-"],
        &out.stdout,
    )?;
    if !applied.status.success() {
        return Err(Error::UncommittedNotCopied {
            repo: rec.repo.clone(),
            worktree: rec.path.clone(),
            why: String::from_utf8_lossy(&applied.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// End a task's worktree: commit whatever the agent left uncommitted (`message`; the
/// author from git's config, else `conductor <conductor@localhost>`; hooks skipped),
/// then measure the branch against its base. A branch that changed nothing is removed
/// with its worktree. `note` is added to the change's note (e.g. why the run stopped).
pub fn conclude(rec: &WorktreeRecord, message: &str, note: Option<&str>) -> Result<WorktreeChange> {
    let mut notes: Vec<String> = rec.note.iter().cloned().collect();
    notes.extend(note.map(str::to_string));
    let mut committed = false;
    if rec.path.is_dir() {
        crate::worktree::setup::stage_all(rec)?;
        let staged = !succeeds(&rec.path, &["diff", "--cached", "--quiet"])?;
        if staged {
            let args = ["commit", "--no-verify", "--quiet", "-m", message];
            let out = git_as_committer(&rec.path, &args)?;
            if !out.status.success() {
                return Err(command_error(&rec.path, &args, &out));
            }
            committed = true;
        }
    }
    let repo_top = &rec.repo;
    let head = match git(
        repo_top,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{}", rec.branch),
        ],
    ) {
        Ok(h) => h.trim().to_string(),
        Err(_) => rec.base_commit.clone(),
    };
    let (files, ins, del) = if head == rec.base_commit {
        (0, 0, 0)
    } else {
        shortstat(&git(
            repo_top,
            &["diff", "--shortstat", &rec.base_commit, &head],
        )?)
    };
    let kept = head != rec.base_commit;
    if !kept {
        remove_forced(repo_top, &rec.path, Some(&rec.branch));
        notes.push("the task changed nothing; its branch and worktree were removed".into());
    } else if committed {
        notes.push(format!(
            "what the agent left uncommitted was committed on {}",
            rec.branch
        ));
    }
    Ok(WorktreeChange {
        repo: rec.repo.clone(),
        path: rec.path.clone(),
        branch: rec.branch.clone(),
        base_commit: rec.base_commit.clone(),
        head_commit: head,
        files_changed: files,
        insertions: ins,
        deletions: del,
        kept,
        committed_for_agent: committed,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    })
}

/// What a result says of a worktree that could not be concluded: kept as it is, with
/// `note` saying why.
pub fn kept_as_is(rec: &WorktreeRecord, note: String) -> WorktreeChange {
    WorktreeChange {
        repo: rec.repo.clone(),
        path: rec.path.clone(),
        branch: rec.branch.clone(),
        base_commit: rec.base_commit.clone(),
        head_commit: rec.base_commit.clone(),
        files_changed: 0,
        insertions: 0,
        deletions: 0,
        kept: true,
        committed_for_agent: false,
        note: Some(note),
    }
}

/// The commit message of a task's leftovers: the prompt's first line, then the task id.
pub fn commit_message(prompt: &str, id: &TaskId) -> String {
    let first = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(empty prompt)");
    let subject: String = if first.chars().count() > 72 {
        first.chars().take(71).chain(std::iter::once('…')).collect()
    } else {
        first.to_string()
    };
    format!("{subject}\n\nConductor-Task: {id}\n")
}

/// Parse `git diff --shortstat`: ` 3 files changed, 10 insertions(+), 2 deletions(-)`.
pub fn shortstat(text: &str) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    for part in text.trim().split(',') {
        let mut words = part.split_whitespace();
        let n = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        match words.next() {
            Some(w) if w.starts_with("file") => out.0 = n,
            Some(w) if w.starts_with("insertion") => out.1 = n,
            Some(w) if w.starts_with("deletion") => out.2 = n,
            _ => {}
        }
    }
    out
}

/// `workers/<N>/worktree.json` of the slot directory `slot_dir`.
pub fn record_path(slot_dir: &Path) -> PathBuf {
    slot_dir.join(RECORD_FILE)
}

/// Write the slot's worktree record (durably: recovery relies on it).
pub fn write_record(slot_dir: &Path, rec: &WorktreeRecord) -> Result<()> {
    fsio::write_json(&record_path(slot_dir), rec, Durability::Durable)
}

/// The slot's worktree record, if it is task `id`'s.
pub fn read_record(slot_dir: &Path, id: &TaskId) -> Option<WorktreeRecord> {
    let rec: WorktreeRecord = fsio::read_json(&record_path(slot_dir), fsio::SMALL_FILE_LIMIT)
        .unwrap_or_else(|e| {
            tracing::warn!("ignoring the worktree record: {e}");
            None
        })?;
    (rec.task_id.to_string() == id.to_string()).then_some(rec)
}

/// Forget the slot's worktree record (its task has its result).
pub fn forget_record(slot_dir: &Path) {
    if let Err(e) = fsio::remove_file_if_exists(&record_path(slot_dir)) {
        tracing::warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortstat_reads_every_form_git_prints() {
        assert_eq!(
            shortstat(" 3 files changed, 10 insertions(+), 2 deletions(-)\n"),
            (3, 10, 2)
        );
        assert_eq!(shortstat(" 1 file changed, 1 insertion(+)\n"), (1, 1, 0));
        assert_eq!(shortstat(" 1 file changed, 4 deletions(-)\n"), (1, 0, 4));
        assert_eq!(shortstat(""), (0, 0, 0));
    }

    #[test]
    fn commit_messages_are_the_prompts_first_line_and_the_id() {
        let m = commit_message("\n  fix the parser\nand more", &TaskId::from("t1"));
        assert_eq!(m, "fix the parser\n\nConductor-Task: t1\n");
        let long = "x".repeat(100);
        let m = commit_message(&long, &TaskId::from("t2"));
        assert_eq!(m.lines().next().unwrap().chars().count(), 72);
    }
}
