//! The library's errors themselves (`Error`, `FileProblem`) and their messages.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::command_line::{command_line, stderr_suffix, CommandLineProblem};

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What is wrong with a file we refused to accept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's #[error] message is its meaning, as users read it
pub enum FileProblem {
    #[error("is a symbolic link; conductor does not follow links")]
    Symlink,
    #[error("is not a regular file")]
    NotRegular,
    #[error("is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("is not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("is empty")]
    Empty,
    #[error("is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("is JSON but not of the expected shape: {0}")]
    Shape(#[source] serde_json::Error),
    #[error("has schema {found}, but this conductor understands schema {supported} at most; upgrade conductor to read it")]
    Schema { found: u64, supported: u32 },
    #[error("{0}")]
    Invalid(String),
}

impl FileProblem {
    /// True when the file may simply still be being written by a non-atomic
    /// writer (truncate, then write), so waiting and re-reading can fix it.
    pub fn may_be_incomplete(&self) -> bool {
        match self {
            FileProblem::Empty | FileProblem::NotUtf8 { .. } => true,
            FileProblem::Json(e) => matches!(
                e.classify(),
                serde_json::error::Category::Eof | serde_json::error::Category::Syntax
            ),
            _ => false,
        }
    }
}

/// Everything that can go wrong in the conductor library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant's #[error] message is its meaning, as users read it
pub enum Error {
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{}: {problem}", path.display())]
    BadFile {
        path: PathBuf,
        #[source]
        problem: FileProblem,
    },

    #[error("invalid worker slot {name:?}: a slot is a decimal number such as 0, 1 or 12")]
    InvalidSlot { name: String },

    #[error("no worker slot {slot} under {}: create it with `conductor create-worker {slot} --root {}`", root.display(), root.display())]
    NoSuchSlot { slot: u32, root: PathBuf },

    #[error("invalid task: {reason}")]
    InvalidTask { reason: String },

    #[error("cannot edit task {id}: {reason}")]
    NotEditable {
        id: String,
        /// Where it is instead and what to do: "it started (running on slot 2)".
        reason: String,
    },

    #[error("task {id} asks no approval: {why}")]
    NoQuestion {
        id: String,
        /// Where it is instead: "it is queued", "its question was already answered".
        why: String,
    },

    #[error("task id {id} is already used: it went to {place} ({}); ids are unique across the root, so send it with a new id", path.display())]
    IdTaken {
        id: String,
        /// e.g. "worker 3", "the shared queue"
        place: String,
        /// The registry entry or result that holds the id.
        path: PathBuf,
    },

    #[error("worker slot {name} is too large: a root has at most {max} slots, numbered 0 to {}", max - 1)]
    SlotTooLarge { name: String, max: u32 },

    #[error("inbox busy: {} still holds undelivered task {waiting}; wait until the worker picks it up", path.display())]
    InboxBusy { path: PathBuf, waiting: String },

    #[error("refusing to start {role}: another process already serves it ({holder}; gate {})", path.display())]
    GateHeld {
        role: String,
        /// e.g. "pid 4711, since 2026-11-21T10:42:07.000Z"
        holder: String,
        path: PathBuf,
    },

    #[error("lock {} is no longer ours (removed, or taken over by a process that judged us gone); leaving it alone", path.display())]
    LockLost { path: PathBuf },

    #[error("timed out after {:.1}s waiting for {what}", after.as_secs_f64())]
    Timeout { what: String, after: Duration },

    #[error("cannot watch {}: {source}", path.display())]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },

    #[error("worker {slot} stopped with task {task} unfinished; start it again or run `conductor recover {slot}`")]
    WorkerGone { slot: u32, task: String },

    #[error("cannot start agent `{program}`: {source}{hint}")]
    Spawn {
        program: String,
        hint: &'static str,
        #[source]
        source: io::Error,
    },

    /// An external program (tmux, git) ran and failed.
    #[error(
        "`{}` failed ({status}){}",
        command_line(program, args),
        stderr_suffix(stderr)
    )]
    Command {
        program: String,
        args: Vec<String>,
        status: std::process::ExitStatus,
        /// What it printed on stderr, trimmed.
        stderr: String,
    },

    /// Refused to act from inside a conductor agent, where it would nest workers under
    /// a worker.
    #[error(
        "refusing to {action}: this process runs inside a conductor agent ({variable} is set), \
         and nesting was not allowed"
    )]
    Nested {
        /// e.g. "start worker 3"
        action: String,
        /// The variable that marks an agent's environment (`CONDUCTOR_WORKER`).
        variable: &'static str,
    },

    /// A slot's lock is held by a live process, so its state is not ours to touch
    /// (exit code 3 in the binaries).
    #[error("slot {slot} is locked by a live process ({holder}); {advice}")]
    SlotBusy {
        slot: u32,
        holder: String,
        /// What to do: wait for it, or how to remove a lock no worker of ours holds.
        advice: String,
    },

    /// A command line (the agent's, the orchestrator pane's) that cannot be run.
    #[error("{what} command {}", problem.describe(line))]
    BadCommandLine {
        /// e.g. "agent", "orchestrator"
        what: &'static str,
        line: String,
        problem: CommandLineProblem,
    },

    /// A directory we were told to run in is missing or not a directory.
    #[error("{what} {} does not exist or is not a directory", path.display())]
    NotADirectory {
        /// e.g. "project directory"
        what: &'static str,
        path: PathBuf,
    },

    /// The agent command cannot run: every task would fail, so nothing starts.
    #[error("the agent command `{program}` {problem}; every task would fail, so nothing starts")]
    AgentNotFound { program: String, problem: String },

    #[error("unknown preset {name:?}: use claude, codex, gemini or command")]
    UnknownPreset { name: String },

    /// No root was given and none can be derived from the environment.
    #[error("cannot find the conductor root: {variable} is not set, and neither is HOME")]
    NoHome {
        /// The variable naming the root (`CONDUCTOR_HOME`).
        variable: &'static str,
    },

    #[error("no worker has a record of task {id}; only tasks that ran can be retried")]
    NoTaskRecord { id: String },

    /// A task cannot be run again as asked (`retry`): `why` says why and what to do.
    #[error("{why}")]
    NotRetryable { why: String },

    /// A slot lacks what running its task again needs: the task's record, or a result to
    /// resume from.
    #[error("{why}")]
    RetryMissing { why: String },

    /// A queued task's result was not linked into `queue/results/`: the id is not the
    /// queue's (exit code 3 in the binaries).
    #[error("not publishing {} as {}: {why}", kept.display(), dest.display())]
    NotPublished {
        /// The result in the worker's `results/`.
        kept: PathBuf,
        /// Where the queue's copy would have gone.
        dest: PathBuf,
        why: String,
    },

    /// A chain of agents creating sub-tasks went past the fan-out limit.
    #[error(
        "refusing to create a task at depth {depth}: this process runs inside a chain of \
         conductor agents {depth} deep ({depth_var}={depth}), past the limit of {max} \
         ({max_var}, default {default_max}); do this task's work here instead of handing it on"
    )]
    TooDeep {
        depth: u32,
        max: u32,
        default_max: u32,
        /// The variables that carry the depth and the limit.
        depth_var: &'static str,
        max_var: &'static str,
    },

    /// An environment variable conductor reads holds something it cannot use.
    #[error("environment variable {name}={value:?} is not {expected}")]
    BadEnvVar {
        name: &'static str,
        value: String,
        /// e.g. "a whole number of levels such as 0 or 3"
        expected: &'static str,
    },

    /// Asked to run or serve, but given no slots.
    #[error("no worker slots {purpose}")]
    NoSlots {
        /// e.g. "to run tasks on", "to serve"
        purpose: &'static str,
    },

    /// A slot list (`0-3,7`) that does not parse.
    #[error("slot list {list:?}: {why}")]
    BadSlotList { list: String, why: String },

    /// A path that should name a file names none (it ends in `..` or is a root).
    #[error("{} does not name a file", path.display())]
    NotAFileName { path: PathBuf },

    /// A cancel met the task's files half-written by its worker.
    #[error("worker {slot} has task {task} in hand but its files are being written; try again in a moment")]
    CancelMidWrite { slot: u32, task: String },

    /// A cancel chased a task from place to place and never caught it still.
    #[error("task {task} kept moving while it was being cancelled; try again")]
    CancelKeptMoving { task: String },

    /// A wait that nobody would ever answer: no live worker serves the slot (`Some`) or,
    /// for a queued task, the root (`None`) — and none has for a short grace.
    #[error("{}", nobody_serves(*slot, task.as_deref(), root))]
    NobodyServes {
        slot: Option<u32>,
        /// The task waited for, if the wait was for one.
        task: Option<String>,
        root: PathBuf,
    },

    /// A queued task waits for a dependency that nobody will ever run: it waits in the
    /// inbox of a slot no live worker serves.
    #[error("task {task} waits for task {dependency}, which waits in worker {slot}'s inbox, and no live worker serves slot {slot}: start one with `conductor-worker {slot} DIR --root {}`, or cancel {dependency}", root.display())]
    DependencyUnserved {
        task: String,
        dependency: String,
        slot: u32,
        root: PathBuf,
    },

    /// A queued task names an agent preset (`agent`) that no live worker of the root
    /// serves: the workers there run only `served`, and none will ever take it.
    #[error("task {task} needs agent preset {preset}, and no live worker of {} serves it (they serve {}): start one with `conductor-worker N DIR --preset {preset} --root {}`, or cancel {task}", root.display(), if served.is_empty() { "nothing".to_string() } else { served.join(", ") }, root.display())]
    PresetUnserved {
        task: String,
        preset: String,
        served: Vec<String>,
        root: PathBuf,
    },

    /// The worker running `task` died (its gate came free with the task still in
    /// `running.json`): only recovery gives the task its result now.
    #[error("worker {slot}{} died with task {task} in hand; its result now comes only from recovery: start the worker again (`conductor-worker {slot} DIR --root {}` recovers it at start) or run `conductor recover {slot} --root {}`", pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), root.display(), root.display())]
    WorkerDied {
        slot: u32,
        pid: Option<u32>,
        task: String,
        root: PathBuf,
    },

    /// The root does not exist (or is not a conductor root): only `init` and workers make one.
    #[error("no conductor root at {}: run `conductor init N{}` first (or point --root / $CONDUCTOR_HOME at the right one)", path.display(), root_flag(path))]
    NoRoot { path: PathBuf },

    /// The root a worker serves was deleted, or replaced by another directory on its
    /// path, while the worker ran.
    #[error("the conductor root {} {} while this worker served it: stopping (start the worker again to serve {})", path.display(), if *replaced { "was replaced by a new one" } else { "was deleted" }, if *replaced { "the new root" } else { "a root made again with `conductor init`" })]
    RootGone { path: PathBuf, replaced: bool },

    /// The root exists but is another user's: this user may not look inside it.
    #[error("permission denied: the conductor root {} is owned by {owner}, and you are {me}; run conductor as {owner}, or use a root of your own (--root DIR or $CONDUCTOR_HOME)", path.display())]
    RootNotOurs {
        path: PathBuf,
        owner: String,
        me: String,
    },

    #[error("no task {id} under {}: no inbox, queue entry or result has that id (a finished task's files may have been collected by gc)", root.display())]
    NoSuchTask { id: String, root: PathBuf },

    /// A shortened task id that starts more than one id on the root.
    #[error("task id prefix {prefix} is ambiguous: it starts {} ({}); give more of the id", count_ids(*.count), .matches.join(", "))]
    AmbiguousId {
        prefix: String,
        /// The first few ids it starts.
        matches: Vec<String>,
        /// How many ids it starts.
        count: usize,
    },

    /// A task waits for a task this root has no record of (refused at submit).
    #[error("task {task} waits for task {dependency}, which this root has no record of (no {}); submit {dependency} first, or check the id", path.display())]
    UnknownDependency {
        task: String,
        dependency: String,
        /// The registry entry that would record it.
        path: PathBuf,
    },

    /// A task waits for a task sent to a slot whose files are all gone (collected by
    /// `gc`, or removed): it could never succeed (refused at submit).
    #[error("task {task} waits for task {dependency}, which has no result any more on worker {slot} and is neither waiting nor running there (collected by `conductor gc`, or removed), so it would never succeed and {task} would never run; submit {dependency}'s work again and wait for that, or leave it out of the task's after list")]
    DependencyGone {
        task: String,
        dependency: String,
        slot: u32,
    },

    /// A task names a group the root does not have (`conductor group add NAME`).
    #[error("no group {name} on this root (no {}); known groups: {known}; add it with `conductor group add {name} --parallel N`", path.display())]
    UnknownGroup {
        name: String,
        /// The file that would define it.
        path: PathBuf,
        /// The groups the root has, comma-separated (or "none").
        known: String,
    },

    /// A group cannot be removed while tasks of it wait or run.
    #[error("group {name} still has {running} running and {queued} queued task(s); cancel them (`conductor cancel --group {name}`) or let them finish, then remove it ({} stays until then)", path.display())]
    GroupInUse {
        name: String,
        path: PathBuf,
        running: u32,
        queued: u32,
    },

    /// Dependencies are kept by the shared queue, not by a worker's inbox.
    #[error("task {task} waits for {after}: dependencies are kept only by the shared queue, so submit it there (Queue::submit), not to a worker's inbox")]
    AfterNeedsQueue { task: String, after: String },

    /// A task's working directory (`dir`) cannot be used.
    #[error("task directory {}: {reason}", path.display())]
    BadTaskDir { path: PathBuf, reason: String },

    /// The folder that holds a repository's task worktrees cannot be made (by default
    /// `<repo>.conductor-worktrees`, next to the repository).
    #[error("cannot make the folder for task worktrees {} ({source}); set \"worktreeDir\" in the root's config.json to a writable absolute path", folder.display())]
    WorktreeFolder {
        folder: PathBuf,
        source: std::io::Error,
    },

    /// A worktree was asked for in a directory that is in no git repository.
    #[error("{} is not in a git repository, so it cannot have a worktree ({stderr})", dir.display())]
    NotARepository { dir: PathBuf, stderr: String },

    /// A worktree was asked for in a bare repository (it has no checked-out branch to
    /// branch from or merge into).
    #[error("{} is a bare git repository; a task's worktree needs a repository with a working tree (clone it, and point --dir at the clone)", dir.display())]
    BareRepository { dir: PathBuf },

    /// The commit a task's branch should start from cannot be used.
    #[error("repository {}: cannot branch from {base:?}: {why}", repo.display())]
    BadBase {
        repo: PathBuf,
        base: String,
        why: String,
    },

    /// The branch a task would work on exists already (and is not its own worktree's).
    #[error("repository {}: branch {branch} already exists; a task's branch is made fresh, so delete that branch (`git branch -D {branch}`) or give the task another id", repo.display())]
    BranchExists { repo: PathBuf, branch: String },

    /// The repository's uncommitted changes could not be copied into the worktree.
    #[error("repository {}: cannot copy its uncommitted changes into the worktree {}: {why}", repo.display(), worktree.display())]
    UncommittedNotCopied {
        repo: PathBuf,
        worktree: PathBuf,
        why: String,
    },

    /// The task has not finished, so its worktree's change is not known yet.
    #[error("task {id} has not finished (it is {state}); `conductor wait {id}` waits for it")]
    TaskUnfinished { id: String, state: String },

    /// `discard` left the task's branch or worktree behind (the warnings logged say why).
    #[error("task {id}: could not remove {branch} or its worktree {} (see the warnings logged)", path.display())]
    NotDiscarded {
        id: String,
        branch: String,
        path: PathBuf,
    },

    /// `discard` (or another removal) without `--force` of work no other branch has.
    #[error("task {id}: {branch} {why}; nothing was removed. `conductor diff {id}` shows it, `conductor merge {id}` takes it in, `conductor discard {id} --force` throws it away")]
    WorkNotMerged {
        id: String,
        branch: String,
        why: String,
    },

    /// The task ran without a worktree, so it has no branch to diff, merge or discard.
    #[error("task {id} did not run in a worktree (its result has no branch)")]
    NoWorktree { id: String },

    /// The task's branch is gone: merged or discarded already.
    #[error("task {id}: branch {branch} is gone from {} (merged or discarded already)", repo.display())]
    BranchGone {
        id: String,
        branch: String,
        repo: PathBuf,
    },

    /// A merge needs a clean checkout: it would mix with, or on a conflict lose, changes.
    #[error("repository {} has uncommitted changes ({files}); commit or stash them before merging a task", repo.display())]
    RepoDirty { repo: PathBuf, files: String },

    /// A merge needs a branch checked out to merge into.
    #[error("repository {} has a detached HEAD; check out the branch to merge into first", repo.display())]
    DetachedHead { repo: PathBuf },

    /// A task's branch conflicts with the checked-out branch; the merge was undone.
    #[error("task {id}: merging {branch} into {into} of {} conflicts in {}; the merge was aborted and the repository is as it was", repo.display(), files.join(", "))]
    MergeConflict {
        id: String,
        branch: String,
        into: String,
        repo: PathBuf,
        files: Vec<String>,
    },

    /// A request's argument `field` is refused (an MCP tool call's input, named as the
    /// client sent it).
    #[error("{field}: {reason}")]
    BadArgument { field: String, reason: String },

    /// A call run off the caller's thread ended without an answer (it panicked or its
    /// runtime is shutting down).
    #[error("{what} failed: {reason}")]
    CallFailed { what: String, reason: String },
}

/// The message of [`Error::NobodyServes`].
fn nobody_serves(slot: Option<u32>, task: Option<&str>, root: &std::path::Path) -> String {
    let waits = task
        .map(|t| format!(" (task {t} waits for one)"))
        .unwrap_or_default();
    let root = root.display();
    match slot {
        Some(n) => format!(
            "no live worker serves slot {n} of {root}{waits}: start one with `conductor-worker {n} DIR --root {root}`"
        ),
        None => format!(
            "no live worker serves the queue of {root}{waits}: start one with `conductor-worker N DIR --root {root}`"
        ),
    }
}

/// ` --root PATH`, for commands quoted in messages.
fn root_flag(path: &std::path::Path) -> String {
    format!(" --root {}", path.display())
}

impl Error {
    /// `program args…` ran and exited unsuccessfully, as `out` shows.
    pub(crate) fn command(program: &str, args: &[&str], out: &std::process::Output) -> Self {
        Error::Command {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn bad(path: impl Into<PathBuf>, problem: FileProblem) -> Self {
        Error::BadFile {
            path: path.into(),
            problem,
        }
    }

    /// Whether this failed for want of space (ENOSPC) or quota (EDQUOT): a condition
    /// that passes, unlike a bad file.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(
                source.raw_os_error(),
                Some(code) if code == nix::libc::ENOSPC || code == nix::libc::EDQUOT
            ),
            _ => false,
        }
    }

    /// The underlying I/O error kind, when this is an I/O error.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// `2 ids`, `1 id`.
fn count_ids(n: usize) -> String {
    if n == 1 {
        "1 id".to_string()
    } else {
        format!("{n} ids")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::split_command_line;

    #[test]
    fn command_lines_split_like_a_shell_and_name_what_is_wrong() {
        assert_eq!(
            split_command_line("agent", "claude -p --model 'x y'").unwrap(),
            ["claude", "-p", "--model", "x y"]
        );
        let unbalanced = split_command_line("agent", "sh -c 'echo").unwrap_err();
        assert!(matches!(
            unbalanced,
            Error::BadCommandLine {
                problem: CommandLineProblem::UnbalancedQuotes,
                ..
            }
        ));
        assert_eq!(
            unbalanced.to_string(),
            r#"agent command "sh -c 'echo" has unbalanced quotes"#
        );
        let empty = split_command_line("orchestrator", "  ").unwrap_err();
        assert_eq!(empty.to_string(), "orchestrator command is empty");
    }

    #[test]
    fn library_messages_name_no_flags() {
        let errors = [
            Error::Nested {
                action: "start worker 3".into(),
                variable: "CONDUCTOR_WORKER",
            },
            Error::NoHome {
                variable: "CONDUCTOR_HOME",
            },
            Error::NotADirectory {
                what: "project directory",
                path: "/nowhere".into(),
            },
            Error::AgentNotFound {
                program: "claude".into(),
                problem: "is not found on PATH=/bin".into(),
            },
        ];
        for e in errors {
            let text = e.to_string();
            assert!(!text.contains("--"), "{text}");
        }
    }
}
