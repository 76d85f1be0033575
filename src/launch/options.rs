//! What a launch is asked for (`LaunchOptions`) and what it made (`Launched`), its
//! defaults and bounds, and where its gate lives.

use std::path::PathBuf;
use std::time::Duration;

use crate::layout::{Root, Slot};
use crate::preset::Preset;

use super::tmux::Tmux;

/// The session name used when none is given.
pub const DEFAULT_SESSION: &str = "conductor";

/// The most workers one session holds: beyond this, panes get too small at 80x24.
pub const MAX_WORKERS: u32 = 12;

/// How long [`launch`](super::launch) waits for every worker to publish its status.
pub const DEFAULT_READY_TIMEOUT: Duration = crate::pool::DEFAULT_READY_TIMEOUT;

/// How long [`kill`](super::kill) waits for workers to stop after SIGTERM before SIGKILL. A worker
/// gives its agent 5 s (its default `--kill-grace`) between SIGTERM and SIGKILL.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the launcher's gate for `session` lives.
pub fn launch_gate(root: &Root, session: &str) -> PathBuf {
    root.gates_dir().join(format!("launch-{session}.lock"))
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub root: Root,
    /// tmux session name (see [`validate_session_name`](super::validate_session_name)).
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
    /// which then has the first window to itself (see [`layout`](super::layout)).
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

/// A session that [`launch`](super::launch) created.
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
