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

mod guard;
mod options;
pub mod layout;
mod problem;
mod session;
mod sockets;
mod stop;
mod tmux;
mod worktree;

// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use options::{
    launch_gate, LaunchOptions, Launched, LaunchedWorker, DEFAULT_READY_TIMEOUT,
    DEFAULT_SESSION, DEFAULT_STOP_TIMEOUT, MAX_WORKERS,
};
// The internals' surface: inside the crate these are named where they are defined.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use problem::{validate_session_name, LaunchError, LaunchProblem, LaunchRefusal, Result};

pub use session::{launch, stop_command, where_workers_are};
pub use sockets::{list_everywhere, servers_with};
pub use stop::kill;
pub use tmux::Tmux;
