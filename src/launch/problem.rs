//! Why the launcher refused or could not start: typed, so a caller can tell them apart.

use std::path::{Path, PathBuf};

use crate::error::ExitClass;
use crate::gate::GateHolder;

use super::options::MAX_WORKERS;
use super::tmux::OPT_ROOT;

/// What the launcher's functions return.
pub type Result<T, E = LaunchError> = std::result::Result<T, E>;

/// Why [`launch`](super::launch) refused: the session is in use right now (exit code 3
/// in the binaries). Each says how to attach to it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchRefusal {
    /// Another launcher holds the session's gate: it is creating or stopping the session.
    #[error(
        "refusing to launch session {session}: another conductor-launch (pid {}, since {}) \
         is creating or stopping it right now; once it is up, attach with `{attach}`",
        launcher.pid,
        launcher.since
    )]
    LauncherBusy {
        session: String,
        launcher: GateHolder,
        attach: String,
    },
    /// The session already runs; `record` is its recorded root and worker count, when
    /// they could be read.
    #[error(
        "refusing to launch session {session}: it is already running{}; attach with `{attach}`",
        running_record(record)
    )]
    Running {
        session: String,
        record: Option<(String, String)>,
        attach: String,
    },
}

/// ` (3 workers on /root)`, from a running session's recorded root and worker count.
fn running_record(record: &Option<(String, String)>) -> String {
    let Some((root, workers)) = record else {
        return String::new();
    };
    let workers = if workers.is_empty() { "?" } else { workers };
    let root = if root.is_empty() {
        "an unknown root"
    } else {
        root
    };
    format!(" ({workers} workers on {root})")
}

/// What is wrong with a launch or kill request: nothing was made (exit code 2 in the
/// binaries).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchProblem {
    #[error(
        "invalid session name {name:?}: use 1 to 64 characters of A-Z a-z 0-9 _ - \
         (not starting with -)"
    )]
    SessionName { name: String },

    #[error(
        "a session holds 1 to {MAX_WORKERS} workers (panes get too small for more), not {workers}"
    )]
    WorkerCount { workers: u32 },

    #[error("cannot find the worker binary {}; install conductor-worker next to this program", path.display())]
    NoWorkerBinary { path: PathBuf },

    #[error("{} is not valid UTF-8; tmux panes need UTF-8 paths", path.display())]
    NotUtf8 { path: PathBuf },

    #[error(
        "tmux session {session} was not made by conductor (it has no {OPT_ROOT}); stop it \
         with tmux kill-session if you mean to"
    )]
    NotOurSession { session: String },

    #[error(
        "a launch with worktrees needs a git repository, but {} is not in one ({stderr}); run \
         `git init` there and commit, or launch without worktrees",
        dir.display()
    )]
    NoRepository { dir: PathBuf, stderr: String },

    #[error(
        "worktrees branch from HEAD, but the repository {} has no commit yet; commit \
         something first",
        repo.display()
    )]
    NoCommit { repo: PathBuf },

    #[error(
        "{} exists but is not a worktree of {}; remove it or launch under another session name",
        path.display(),
        repo.display()
    )]
    ForeignWorktree { path: PathBuf, repo: PathBuf },
}

/// Everything that can stop a launch, a listing or a kill: the launcher's own refusals
/// and problems, or a failure of the core underneath (tmux, git, the root's files).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The session is in use right now.
    #[error(transparent)]
    Refused(Box<LaunchRefusal>),
    /// The request cannot be carried out as given; nothing was made.
    #[error(transparent)]
    Problem(#[from] LaunchProblem),
    #[error(transparent)]
    Core(#[from] crate::error::Error),
}

impl From<LaunchRefusal> for LaunchError {
    fn from(refusal: LaunchRefusal) -> Self {
        LaunchError::Refused(Box::new(refusal))
    }
}

impl LaunchError {
    /// Which kind of failure this is (and so the binaries' exit code).
    pub fn exit_class(&self) -> ExitClass {
        match self {
            LaunchError::Refused(_) => ExitClass::Refused,
            LaunchError::Problem(_) => ExitClass::Usage,
            LaunchError::Core(e) => e.exit_class(),
        }
    }
}

/// Check a session name: it names a tmux session and the gate file, so only
/// `A-Z a-z 0-9 _ -`, 1–64 characters, not starting with `-`.
pub fn validate_session_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(LaunchProblem::SessionName {
            name: name.to_string(),
        }
        .into())
    }
}

/// `p` as UTF-8: tmux command lines are text.
pub(super) fn utf8(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| {
        LaunchProblem::NotUtf8 {
            path: p.to_path_buf(),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_are_checked() {
        for ok in ["conductor", "a", "work-2_x"] {
            assert!(validate_session_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a.b", "a:b", "a b", "é", &"x".repeat(65)] {
            assert!(validate_session_name(bad).is_err(), "{bad}");
        }
    }
}
