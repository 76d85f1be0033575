//! The library's error type: every failure names the file and the operation.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What is wrong with a file we refused to accept.
#[derive(Debug, thiserror::Error)]
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

    #[error("no worker slot {slot} under {}", root.display())]
    NoSuchSlot { slot: u32, root: PathBuf },

    #[error("invalid task: {reason}")]
    InvalidTask { reason: String },

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

    #[error("{0}")]
    Usage(String),

    /// Not now: something alive is in the way (exit code 3 in the binaries).
    #[error("{0}")]
    Refused(String),

    /// A task waits for a task this root has no record of (refused at submit).
    #[error("task {task} waits for task {dependency}, which this root has no record of (no {}); submit {dependency} first, or check the id", path.display())]
    UnknownDependency {
        task: String,
        dependency: String,
        /// The registry entry that would record it.
        path: PathBuf,
    },

    /// Dependencies are kept by the shared queue, not by a worker's inbox.
    #[error("task {task} waits for {after}: dependencies need the shared queue; use `conductor submit --after` (Queue::submit)")]
    AfterNeedsQueue { task: String, after: String },

    /// A task's working directory (`dir`) cannot be used.
    #[error("task directory {}: {reason}", path.display())]
    BadTaskDir { path: PathBuf, reason: String },
}

/// `program args…`, quoted as a shell would need it, for error messages.
fn command_line(program: &str, args: &[String]) -> String {
    let words = std::iter::once(program).chain(args.iter().map(String::as_str));
    shlex::try_join(words).unwrap_or_else(|_| format!("{program} {}", args.join(" ")))
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
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
