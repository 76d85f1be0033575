//! The tmux launcher: one session with an orchestrator pane and N worker panes.
//!
//! [`launch`] creates a tmux session with one window. Its first pane runs the
//! orchestrator (a command, by default the user's `$SHELL`, after a one-line hint of the
//! commands to use) with `CONDUCTOR_HOME` set; the other panes each run
//! `conductor-worker i DIR --root ROOT`, titled `worker i`. The orchestrator spans the
//! top half, workers 0-3 stand two by two below it, and further workers go four to a
//! window (`workers-2`, …), so every pane stays about 40x5 or more at 80x24; the hint
//! line says which window holds which workers ([`layout`]). With
//! [`LaunchOptions::dashboard`] the orchestrator pane runs `conductor dashboard` first
//! and has the first window to itself.
//!
//! **One launch per session.** Creation runs under the singleton gate
//! `<root>/.locks/launch-<session>.lock`, and a session that already runs (`tmux
//! has-session`) is refused ([`LaunchRefusal`]) with how to attach to it.
//! The workers' own gates still stop a duplicate worker started by hand.
//!
//! **The session remembers its root.** The session options `@conductor_root`,
//! `@conductor_workers` and `@conductor_dir` record where it runs; [`list`] and [`kill`]
//! read them back. `CONDUCTOR_HOME` is also set in the session environment, so panes the
//! user opens later see the same root.
//!
//! **Worktrees.** With [`LaunchOptions::worktrees`], worker `i` runs in its own git
//! worktree `<root>/worktrees/<session>/worker-i` of DIR's repository, on branch
//! `conductor/worker-i` (made from the current `HEAD` the first time; an existing branch or
//! worktree from an earlier launch is reused, never recreated).
//!
//! **Stopping.** [`kill`] sends SIGTERM to each worker — the pid recorded in its slot's
//! gate (`workers/i/.worker.lock`, cross-checked against `status.json`), accepted only if it
//! runs in one of the session's panes — so each writes an `interrupted` result for a running
//! task and exits; it waits (bounded) for them, then kills the session.
//!
//! **Nothing half-made.** When a step fails after something was created, the session is
//! killed and worktrees made by this launch are removed again.
//!
//! Where things are: `tmux.rs` drives tmux ([`Tmux`]: every tmux command goes through it,
//! which adds `-L <socket>` when a socket name is given); `session.rs` creates a session
//! ([`launch`]); `guard.rs` keeps it to one launch at a time; `worktree.rs` makes the git
//! worktrees; `stop.rs` holds [`list`] and [`kill`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::layout::{Root, Slot};
use crate::preset::Preset;

mod guard;
pub mod layout;
mod problem;
mod session;
mod sockets;
mod stop;
mod tmux;
mod worktree;

pub use problem::{LaunchError, LaunchProblem, LaunchRefusal};

/// What the launcher's functions return.
pub type Result<T, E = LaunchError> = std::result::Result<T, E>;
pub use session::{launch, stop_command, where_workers_are};
pub use sockets::{list_everywhere, servers_with};
pub use stop::kill;
pub use tmux::Tmux;

/// The session name used when none is given.
pub const DEFAULT_SESSION: &str = "conductor";

/// The most workers one session holds: beyond this, panes get too small at 80x24.
pub const MAX_WORKERS: u32 = 12;

/// How long [`launch`] waits for every worker to publish its status.
pub const DEFAULT_READY_TIMEOUT: Duration = crate::pool::DEFAULT_READY_TIMEOUT;

/// How long [`kill`] waits for workers to stop after SIGTERM before SIGKILL. A worker
/// gives its agent 5 s (its default `--kill-grace`) between SIGTERM and SIGKILL.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Session options that record a launched session.
const OPT_ROOT: &str = "@conductor_root";
const OPT_WORKERS: &str = "@conductor_workers";
const OPT_DIR: &str = "@conductor_dir";

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

/// Where the launcher's gate for `session` lives.
pub fn launch_gate(root: &Root, session: &str) -> PathBuf {
    root.gates_dir().join(format!("launch-{session}.lock"))
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub root: Root,
    /// tmux session name (see [`validate_session_name`]).
    pub session: String,
    /// Number of worker panes, slots `0..workers`.
    pub workers: u32,
    /// The project directory (the workers' cwd, or the repository with `worktrees`).
    pub dir: PathBuf,
    /// The `conductor-worker` binary each worker pane runs.
    pub worker_bin: PathBuf,
    /// `--agent` for the workers.
    pub agent: Option<String>,
    /// `--preset` for the workers.
    pub preset: Option<Preset>,
    /// Give each worker its own git worktree and branch.
    pub worktrees: bool,
    /// The orchestrator pane's command line; `None`: `$SHELL` (else `/bin/sh`).
    pub orchestrator: Option<String>,
    /// Run `conductor dashboard` in the orchestrator's pane (its command when it quits),
    /// which then has the first window to itself (see [`layout`]).
    pub dashboard: bool,
    pub tmux: Tmux,
    /// Launch even inside a conductor agent (`CONDUCTOR_WORKER` set).
    pub allow_nested: bool,
    /// How long to wait for every worker to come up.
    pub ready_timeout: Duration,
}

impl LaunchOptions {
    /// Defaults: session `conductor`, 3 workers, DIR `.`, `$SHELL` as orchestrator,
    /// tmux's default server.
    pub fn new(root: Root, worker_bin: PathBuf) -> LaunchOptions {
        LaunchOptions {
            root,
            session: DEFAULT_SESSION.to_string(),
            workers: 3,
            dir: PathBuf::from("."),
            worker_bin,
            agent: None,
            preset: None,
            worktrees: false,
            orchestrator: None,
            dashboard: false,
            tmux: Tmux::default(),
            allow_nested: false,
            ready_timeout: DEFAULT_READY_TIMEOUT,
        }
    }
}

/// A session that [`launch`] created.
#[derive(Debug, Clone)]
pub struct Launched {
    pub session: String,
    pub root: PathBuf,
    pub workers: Vec<LaunchedWorker>,
}

/// One worker pane of a launched session.
#[derive(Debug, Clone)]
pub struct LaunchedWorker {
    pub slot: Slot,
    /// The `conductor-worker` process.
    pub pid: u32,
    /// Its project directory (its worktree with `worktrees`).
    pub dir: PathBuf,
    /// Its branch, with `worktrees`.
    pub branch: Option<String>,
}

/// `p` as UTF-8: tmux command lines are text.
fn utf8(p: &Path) -> Result<&str> {
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
