//! Planning a task's worktree: its repository, path, branch and base, checked before
//! anything is made.

use std::path::Path;

use super::place::FOLDER;
use super::repo::Repo;
use super::git;
use crate::error::{Error, Result};
use crate::protocol::{TaskId, WorktreeRecord, SCHEMA};

/// Task branches are `conductor/<task id>`.
pub const BRANCH_PREFIX: &str = "conductor/";

/// The branch task `id` works on.
pub fn task_branch(id: &TaskId) -> String {
    format!("{BRANCH_PREFIX}{id}")
}

/// What a task asks of its worktree.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The directory the task would run in: its repository is the one worktree'd.
    pub dir: &'a Path,
    pub id: &'a TaskId,
    /// Commit or ref to branch from (default `HEAD`).
    pub base: Option<&'a str>,
    /// Copy the repository's staged and unstaged changes in.
    pub include_uncommitted: bool,
    /// config.json's `worktreeDir`.
    pub folder: Option<&'a Path>,
}

/// Work out the task's worktree without changing anything: its repository, path,
/// branch, base commit and where in it the agent runs. The checks of bad input are
/// here: no repository, a bare one, a base that names no commit, a branch that exists
/// (unless it is this task's own worktree from an earlier attempt, which is reused).
pub fn plan(req: &Request<'_>) -> Result<WorktreeRecord> {
    let repo = Repo::of(req.dir)?;
    let branch = task_branch(req.id);
    let fresh = repo.task_worktree_path(req.id, req.folder);
    // An earlier attempt's worktree is where it was made: here, or where an earlier
    // version made it (under the git directory) before a crash and an upgrade.
    let old = repo.common_dir.join(FOLDER).join(req.id.to_string());
    let earlier = [&fresh, &old]
        .into_iter()
        .find(|p| p.exists() && repo.has_worktree_on(p, &branch));
    let reused = earlier.is_some();
    let path = earlier.cloned().unwrap_or(fresh);
    let mut notes = Vec::new();
    let rev = req.base.unwrap_or("HEAD");
    let resolved = repo.resolve(rev)?;
    let base_commit = if reused {
        // An earlier attempt of this task (re-delivered after a crash): go on from its
        // committed partial work; the base is where the branch left `rev`.
        notes.push(format!(
            "continues the worktree {} of an earlier attempt",
            path.display()
        ));
        let tip = resolved.clone().unwrap_or_else(|| "HEAD".into());
        git(&repo.top, &["merge-base", &tip, &branch])?
            .trim()
            .to_string()
    } else {
        let base = fresh_base(&repo, req, &path, &branch, resolved)?;
        notes.extend(fresh_notes(&repo, req)?);
        base
    };
    if repo.top.join(".gitmodules").exists() {
        notes.push(
            "the repository has submodules; they are not checked out in the worktree \
             (`git submodule update --init` there if the task needs them)"
                .to_string(),
        );
    }
    let cwd = path.join(&repo.prefix);
    Ok(WorktreeRecord {
        schema: SCHEMA,
        task_id: req.id.clone(),
        repo: repo.top,
        path,
        branch,
        base_commit,
        cwd,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        setup_paths: Vec::new(),
    })
}

/// The base commit of a task's fresh worktree, refusing a branch or a path already in
/// the way and a base that names no commit.
fn fresh_base(
    repo: &Repo,
    req: &Request<'_>,
    path: &Path,
    branch: &str,
    resolved: Option<String>,
) -> Result<String> {
    if repo.branch_exists(branch)? {
        return Err(Error::BranchExists {
            repo: repo.top.clone(),
            branch: branch.to_string(),
        });
    }
    if path.symlink_metadata().is_ok() {
        return Err(Error::BadTaskDir {
            path: path.to_path_buf(),
            reason: format!(
                "is in the way of task {}'s worktree (not a worktree of {} on {branch}); \
                 remove it",
                req.id,
                repo.top.display()
            ),
        });
    }
    resolved.ok_or_else(|| Error::BadBase {
        repo: repo.top.clone(),
        base: req.base.unwrap_or("HEAD").to_string(),
        why: if req.base.is_none() {
            "the repository has no commit yet".to_string()
        } else {
            "it names no commit here".to_string()
        },
    })
}

/// What a fresh worktree leaves out of the repository's state, for the task's note:
/// uncommitted changes not copied in, a detached HEAD.
fn fresh_notes(repo: &Repo, req: &Request<'_>) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let rev = req.base.unwrap_or("HEAD");
    let changed = repo.uncommitted()?;
    if !changed.is_empty() && !req.include_uncommitted {
        notes.push(format!(
            "{} had {} file(s) with uncommitted changes; the worktree starts from {rev} \
             without them (--include-uncommitted copies them in)",
            repo.top.display(),
            changed.len()
        ));
    }
    if req.base.is_none() && repo.current_branch()?.is_none() {
        notes.push("HEAD was detached; the branch starts from its commit".to_string());
    }
    Ok(notes)
}
