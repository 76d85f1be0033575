//! conductor runs AI coding-agent sessions (Claude Code, Codex, or any command that reads
//! a prompt on stdin) as workers fed through plain files.
//!
//! An orchestrator delivers `task.json` into a worker's directory with
//! [`Client::write_task`]; the worker ([`Worker`], or the `conductor-worker`
//! binary) wakes on the filesystem event, takes the slot's `.lock/`, pipes the prompt to
//! the agent and publishes `results/<id>.json`, `result.json` and `status.json`. Every
//! state is a file you can `cat`, and every write is atomic.
//!
//! # Example
//!
//! A worker on a private root with `cat` as its agent, run in-process, fed one task:
//!
//! ```
//! use std::time::Duration;
//! use conductor::{AgentCommand, Client, Root, Slot, Task, Worker, WorkerOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let root = Root::new(dir.path().join("root"));
//! let opts = WorkerOptions::new(root.clone(), Slot(0), dir.path().into(), AgentCommand::parse("cat")?);
//! let mut worker = Worker::start(opts)?;
//! let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
//! let serving = std::thread::spawn(move || worker.run(&stopped));
//!
//! let client = Client::new(root);
//! let id = client.write_task(Slot(0), &Task::new("hello, agent").with_id("greeting"))?;
//! let result = client.wait_for_result(Slot(0), &id, Duration::from_secs(30))?;
//! assert!(result.success);
//! assert_eq!(result.output, "hello, agent");
//!
//! stop.send(())?;
//! serving.join().unwrap()?;
//! # Ok(())
//! # }
//! ```

// The public surface is documented; the internals (public only under `internals`) are not
// held to it.
#![cfg_attr(not(feature = "internals"), deny(missing_docs))]
// A public item never takes or gives a type a user cannot name.
#![cfg_attr(not(feature = "internals"), deny(unnameable_types))]
// Without `cli`, the helpers only the command-line front end calls are dead here.
#![cfg_attr(not(feature = "cli"), allow(dead_code, unused_imports))]

// Everything below is the implementation. Its modules are `pub` only under the
// non-default `internals` feature, which the binaries' own tests, benches and examples
// reach through the self dev-dependency in Cargo.toml; a library user sees the curated
// items re-exported here and the documented modules `verbs` and `programs`.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        pub(crate) mod $name;
    )*};
}

internal_modules!(
    agent,
    approval,
    budget,
    client,
    config,
    dirlock,
    doctor,
    env,
    error,
    fs_kind,
    fsio,
    gate,
    hooks,
    host,
    ids,
    inspect,
    launch,
    layout,
    maintenance,
    orchestrator,
    pool,
    preset,
    procfs,
    protocol,
    queue,
    recovery,
    review,
    tasks,
    text,
    trust,
    wait,
    watch,
    workdir,
    worker,
    worktree,
);

#[cfg(all(feature = "cli", feature = "internals"))]
#[doc(hidden)]
pub mod mcp;
#[cfg(all(feature = "cli", not(feature = "internals")))]
pub(crate) mod mcp;

#[cfg(all(feature = "cli", feature = "internals"))]
#[doc(hidden)]
pub mod cli;
#[cfg(all(feature = "cli", not(feature = "internals")))]
pub(crate) mod cli;

pub(crate) mod ledger;
pub mod verbs;

/// The entry points of the three programs (feature `cli`, on by default): each parses
/// the process's arguments, runs, and returns the exit code for `std::process::exit`.
#[cfg(feature = "cli")]
pub mod programs {
    /// `conductor`: the command-line front end (`conductor --help`).
    pub fn conductor() -> i32 {
        crate::cli::conductor_main()
    }

    /// `conductor-worker N DIR`: serve one worker slot (same as `conductor worker`).
    pub fn conductor_worker() -> i32 {
        crate::cli::common::worker_main()
    }

    /// `conductor-launch`: an orchestrator pane and N worker panes in tmux (same as
    /// `conductor launch`).
    pub fn conductor_launch() -> i32 {
        crate::cli::launch::launch_main()
    }
}

/// The types the public items' methods and fields take and give: task listings, the
/// parts of a task record and its result, the queue's capacity report, and options.
pub mod types {
    pub use crate::dirlock::LockOptions;
    pub use crate::preset::{Preset, RateLimit};
    pub use crate::protocol::{
        approval::Question, CheckVerdict, Denial, ReviewState, Until, UntilReport, WorktreeChange,
    };
    pub use crate::queue::{
        groups::GroupUse, Capacity, KeyUse, LockInfo, PendingCount, PendingTask, SlotUse,
    };
    pub use crate::tasks::{
        CancelTask, Cursor as ListCursor, ListOptions, TaskLocation, TaskState, TaskSummary,
    };
    pub use crate::watch::WatchMode;
    pub use crate::worktree::setup::WorktreeSetup;
}

pub use agent::AgentCommand;
pub use client::Client;
pub use config::Config;
pub use error::{CommandLineProblem, Error, FileProblem, Result};
pub use layout::{Root, Slot, WorkerPaths};
pub use orchestrator::{Orchestrator, Progress};
pub use protocol::{Outcome, Status, Task, TaskId, TaskResult, WorkerState};
pub use queue::Queue;
pub use worker::{Worker, WorkerOptions};

/// For unit tests whose prerequisite (a filesystem feature, a tool) may be missing.
#[cfg(test)]
pub(crate) mod test_support {
    /// The running test cannot run for `reason`: outside CI, print `skipped <test>:
    /// <reason>` (the caller then returns); under CI (`CI` is `true` or `1`), fail, so a
    /// green CI run means every test ran.
    #[track_caller]
    pub(crate) fn skip_or_fail(reason: &str) {
        let test = std::thread::current()
            .name()
            .unwrap_or("this test")
            .to_string();
        if std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
            panic!(
                "{test} cannot run: {reason} (under CI a missing prerequisite fails the \
                 test instead of skipping it)"
            );
        }
        // Straight to stderr: libtest captures eprintln! of a passing test, and a skip
        // must be seen.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("skipped {test}: {reason}\n").as_bytes(),
        );
    }
}
