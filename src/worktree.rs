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

mod listing;
pub mod place;
mod plan;
pub mod setup;
pub use listing::{task_branches, task_worktrees};
pub use plan::{plan, Request};

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::protocol::{TaskId, WorktreeChange, WorktreeRecord};

/// Task branches are `conductor/<task id>`.
pub const BRANCH_PREFIX: &str = "conductor/";
/// The folder under the repository's git directory that held task worktrees before
/// they moved next to the repository ([`place`]); worktrees there still work.
pub const FOLDER: &str = "conductor-worktrees";
/// A slot's record of its task's worktree: `workers/<N>/worktree.json`.
pub const RECORD_FILE: &str = "worktree.json";
/// Who commits when git knows nobody (no `user.name` / `user.email`).
pub const FALLBACK_NAME: &str = "conductor";
pub const FALLBACK_EMAIL: &str = "conductor@localhost";

/// The branch task `id` works on.
pub fn task_branch(id: &TaskId) -> String {
    format!("{BRANCH_PREFIX}{id}")
}

/// Run git in `dir`; its stdout, or [`Error::Command`] with its stderr.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(command_error(dir, args, &out))
    }
}

fn command_error(dir: &Path, args: &[&str], out: &Output) -> Error {
    let dir = dir.to_string_lossy();
    let mut all = vec!["-C", &dir];
    all.extend(args);
    Error::command("git", &all, out)
}

/// Run git in `dir` and return what happened, success or not.
pub fn git_output(dir: &Path, args: &[&str]) -> Result<Output> {
    git_command(dir, args)
        .stdin(Stdio::null())
        .output()
        .map_err(not_installed)
}

fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    // Never ask a person anything (an agent's worker has nobody to ask).
    c.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0");
    c
}

fn not_installed(e: io::Error) -> Error {
    let source = if e.kind() == io::ErrorKind::NotFound {
        io::Error::new(
            io::ErrorKind::NotFound,
            "git is not installed or not on PATH; worktrees need it",
        )
    } else {
        e
    };
    Error::io("run", "git", source)
}

/// Run git in `dir` with `input` on its stdin.
fn git_with_input(dir: &Path, args: &[&str], input: &[u8]) -> Result<Output> {
    let mut child = git_command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(not_installed)?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(not_installed)?;
    let _ = feeder.join();
    Ok(out)
}

/// Whether git in `dir` exits 0 (e.g. `show-ref --verify --quiet`).
fn succeeds(dir: &Path, args: &[&str]) -> Result<bool> {
    Ok(git_output(dir, args)?.status.success())
}

/// `-c user.name=… -c user.email=…` for whichever of the two git does not know in
/// `dir` (its config or the environment), so a commit never fails for want of them.
fn identity(dir: &Path) -> Result<Vec<String>> {
    let out = git_output(dir, &["config", "--get-regexp", r"^user\.(name|email)$"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let has = |key: &str, var: &str| {
        text.lines().any(|l| l.starts_with(key)) || std::env::var_os(var).is_some()
    };
    let mut args = Vec::new();
    if !has("user.name ", "GIT_COMMITTER_NAME") {
        args.extend(["-c".to_string(), format!("user.name={FALLBACK_NAME}")]);
    }
    if !has("user.email ", "GIT_COMMITTER_EMAIL") {
        args.extend(["-c".to_string(), format!("user.email={FALLBACK_EMAIL}")]);
    }
    // A signing key that asks for a passphrase would hang an unattended commit.
    args.extend(["-c".to_string(), "commit.gpgsign=false".to_string()]);
    Ok(args)
}

/// git in `dir` with the commit identity (see [`identity`]) before `args`.
fn git_as_committer(dir: &Path, args: &[&str]) -> Result<Output> {
    let id = identity(dir)?;
    let mut all: Vec<&str> = id.iter().map(String::as_str).collect();
    all.extend(args);
    git_output(dir, &all)
}

/// The git repository (working tree) a directory is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The top directory of the working tree `dir` is in.
    pub top: PathBuf,
    /// The repository's shared git directory (the same from every worktree).
    pub common_dir: PathBuf,
    /// `dir` relative to `top`.
    pub prefix: PathBuf,
}

impl Repo {
    /// The repository `dir` is in: [`Error::NotARepository`] when none,
    /// [`Error::BareRepository`] when it has no working tree.
    pub fn of(dir: &Path) -> Result<Repo> {
        let args = [
            "rev-parse",
            "--git-common-dir",
            "--show-toplevel",
            "--show-prefix",
        ];
        let out = git_output(dir, &args)?;
        if !out.status.success() {
            let bare = git_output(dir, &["rev-parse", "--is-bare-repository"])?;
            if bare.status.success() && String::from_utf8_lossy(&bare.stdout).trim() == "true" {
                return Err(Error::BareRepository {
                    dir: dir.to_path_buf(),
                });
            }
            return Err(Error::NotARepository {
                dir: dir.to_path_buf(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let common = PathBuf::from(lines.next().unwrap_or_default());
        let top = PathBuf::from(lines.next().unwrap_or_default());
        let prefix = PathBuf::from(lines.next().unwrap_or_default());
        let common = if common.is_absolute() {
            common
        } else {
            dir.join(common)
        };
        let common_dir = common
            .canonicalize()
            .map_err(|e| Error::io("resolve the git directory", &common, e))?;
        let top = top
            .canonicalize()
            .map_err(|e| Error::io("resolve the repository", &top, e))?;
        Ok(Repo {
            top,
            common_dir,
            prefix,
        })
    }

    /// The commit `rev` names, if any.
    pub fn resolve(&self, rev: &str) -> Result<Option<String>> {
        let spec = format!("{rev}^{{commit}}");
        let out = git_output(&self.top, &["rev-parse", "--verify", "--quiet", &spec])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    pub fn branch_exists(&self, branch: &str) -> Result<bool> {
        succeeds(
            &self.top,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{branch}"),
            ],
        )
    }

    /// The branch checked out here; `None` with a detached HEAD.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let out = git_output(&self.top, &["symbolic-ref", "--quiet", "--short", "HEAD"])?;
        Ok(out
            .status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
    }

    /// Tracked files with staged or unstaged changes (`git status --porcelain`, lines).
    pub fn uncommitted(&self) -> Result<Vec<String>> {
        let text = git(
            &self.top,
            &["status", "--porcelain", "--untracked-files=no"],
        )?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// Where task `id`'s worktree goes: under `folder` if given, else next to the
    /// repository ([`place::folder`]).
    pub fn task_worktree_path(&self, id: &TaskId, folder: Option<&Path>) -> PathBuf {
        place::folder(&self.top, &self.common_dir, folder).join(id.to_string())
    }

    /// The worktree at `path` is one of this repository's, with `branch` checked out.
    fn has_worktree_on(&self, path: &Path, branch: &str) -> bool {
        let Ok(other) = Repo::of(path) else {
            return false;
        };
        let same_repo = other.common_dir == self.common_dir
            && path.canonicalize().is_ok_and(|p| p == other.top);
        same_repo && other.current_branch().ok().flatten().as_deref() == Some(branch)
    }
}

/// Hold the lock that serializes changes to the worktrees kept in `folder` (the folder
/// holding them: per repository by default). git does not: a `git worktree add` reads
/// every registered worktree's files, and one half-made by a parallel `add` makes it
/// fail ("failed to read .git/worktrees/<name>/commondir"), as 20 tasks started at once
/// on one repository showed. The kernel drops the lock if its holder dies.
fn folder_lock(folder: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    fsio::ensure_dir(folder)?;
    let path = folder.join(".conductor.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| Error::io("lock", &path, io::Error::from(errno)))
}

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
            remove(&rec.repo, &rec.path, Some(&rec.branch));
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
        remove(repo_top, &rec.path, Some(&rec.branch));
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

/// Remove a task's worktree (forced: its work is on its branch) and, if named, its
/// branch; what is already gone is fine. Failures are logged, not returned: removing
/// is tidying, and `doctor` lists what is left.
pub fn remove(repo: &Path, path: &Path, branch: Option<&str>) {
    let lock = path.parent().map(folder_lock);
    if let Some(Err(e)) = &lock {
        tracing::warn!("{e}");
    }
    if path.exists() {
        let p = path.to_string_lossy();
        if let Err(e) = git(repo, &["worktree", "remove", "--force", "--force", &p]) {
            tracing::warn!("cannot remove the worktree {p}: {e}");
        }
    }
    // A worktree deleted by hand stays registered until pruned.
    if let Err(e) = git(repo, &["worktree", "prune"]) {
        tracing::warn!("git worktree prune in {}: {e}", repo.display());
    }
    if let Some(b) = branch {
        let exists = succeeds(
            repo,
            &[
                "show-ref",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}"),
            ],
        )
        .unwrap_or(false);
        if exists {
            if let Err(e) = git(repo, &["branch", "-D", b]) {
                tracing::warn!("cannot delete the branch {b}: {e}");
            }
        }
    }
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

/// How a task's branch goes into the checked-out branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeHow {
    /// A merge commit (`git merge --no-ff`).
    Merge,
    /// The branch rebased onto the checked-out branch, then fast-forwarded.
    Rebase,
    /// One commit with the branch's whole change (`git merge --squash`).
    Squash,
}

/// Merge task `id`'s branch into the branch checked out in its repository. Refused
/// with a detached HEAD or uncommitted changes there; on a conflict everything is
/// undone (the repository exactly as before) and [`Error::MergeConflict`] lists the
/// files. On success the worktree and branch are removed; returns the new HEAD.
pub fn merge(id: &TaskId, change: &WorktreeChange, how: MergeHow, message: &str) -> Result<String> {
    let repo = Repo::of(&change.repo)?;
    if !repo.branch_exists(&change.branch)? {
        return Err(Error::BranchGone {
            id: id.to_string(),
            branch: change.branch.clone(),
            repo: repo.top,
        });
    }
    let into = repo.current_branch()?.ok_or_else(|| Error::DetachedHead {
        repo: repo.top.clone(),
    })?;
    let dirty = repo.uncommitted()?;
    if !dirty.is_empty() {
        let mut files: Vec<&str> = dirty.iter().map(|l| l.get(3..).unwrap_or(l)).collect();
        files.truncate(5);
        return Err(Error::RepoDirty {
            repo: repo.top,
            files: files.join(", "),
        });
    }
    let top = &repo.top;
    let branch = change.branch.as_str();
    let conflict = |files: Vec<String>| Error::MergeConflict {
        id: id.to_string(),
        branch: branch.to_string(),
        into: into.clone(),
        repo: top.clone(),
        files,
    };
    match how {
        MergeHow::Merge => {
            let args = [
                "merge",
                "--no-ff",
                "--no-verify",
                "--quiet",
                "-m",
                message,
                branch,
            ];
            let out = git_as_committer(top, &args)?;
            if !out.status.success() {
                let files = conflicted(top);
                let merging = succeeds(top, &["rev-parse", "--quiet", "--verify", "MERGE_HEAD"])?;
                if merging {
                    git(top, &["merge", "--abort"])?;
                }
                return Err(if files.is_empty() {
                    command_error(top, &args, &out)
                } else {
                    conflict(files)
                });
            }
        }
        MergeHow::Squash => {
            let args = ["merge", "--squash", "--quiet", branch];
            let out = git_output(top, &args)?;
            if !out.status.success() {
                let files = conflicted(top);
                // A squash leaves no MERGE_HEAD to abort; the checkout was clean, so
                // resetting what the merge touched puts it back exactly.
                git(top, &["reset", "--merge"])?;
                return Err(if files.is_empty() {
                    command_error(top, &args, &out)
                } else {
                    conflict(files)
                });
            }
            if !succeeds(top, &["diff", "--cached", "--quiet"])? {
                let args = ["commit", "--no-verify", "--quiet", "-m", message];
                let out = git_as_committer(top, &args)?;
                if !out.status.success() {
                    git(top, &["reset", "--merge"])?;
                    return Err(command_error(top, &args, &out));
                }
            }
        }
        MergeHow::Rebase => {
            let onto = git(top, &["rev-parse", "HEAD"])?.trim().to_string();
            // Rebased where the branch is checked out: its own worktree (made again if
            // gc took it), so the repository's checkout is touched only by the
            // fast-forward at the end.
            let wt = &change.path;
            if !wt.exists() {
                let p = wt.to_string_lossy();
                git(top, &["worktree", "prune"])?;
                git(top, &["worktree", "add", "--quiet", &p, branch])?;
            }
            let args = ["rebase", "--quiet", &onto];
            let out = git_as_committer(wt, &args)?;
            if !out.status.success() {
                let files = conflicted(wt);
                let _ = git_output(wt, &["rebase", "--abort"]);
                return Err(if files.is_empty() {
                    command_error(wt, &args, &out)
                } else {
                    conflict(files)
                });
            }
            git(top, &["merge", "--ff-only", "--quiet", branch])?;
        }
    }
    let head = git(top, &["rev-parse", "HEAD"])?.trim().to_string();
    remove(top, &change.path, Some(branch));
    Ok(head)
}

/// Files with unresolved conflicts in the worktree at `dir`.
fn conflicted(dir: &Path) -> Vec<String> {
    git(dir, &["diff", "--name-only", "--diff-filter=U"])
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The range `git diff` shows for a task: `base...branch` (or its recorded head once
/// the branch is gone).
pub fn diff_range(change: &WorktreeChange) -> Result<String> {
    let repo = Repo::of(&change.repo)?;
    let tip = if repo.branch_exists(&change.branch)? {
        change.branch.clone()
    } else {
        change.head_commit.clone()
    };
    Ok(format!("{}...{tip}", change.base_commit))
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
