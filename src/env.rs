//! The environment variables conductor reads and sets, and the checks of where a
//! process starts: not nested inside an agent, in an existing project directory, not
//! past the fan-out depth.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The conductor root, for every binary and for agents (`--root` wins over it).
pub const ENV_HOME: &str = "CONDUCTOR_HOME";

/// Set in an agent's environment to its worker's slot; its presence means "this process
/// runs inside a conductor agent".
pub const ENV_WORKER: &str = "CONDUCTOR_WORKER";

/// Set in an agent's environment to the id of the task it runs.
pub const ENV_TASK_ID: &str = "CONDUCTOR_TASK_ID";

/// Set in an agent's environment to the task's `context` JSON.
pub const ENV_CONTEXT: &str = "CONDUCTOR_CONTEXT";

/// The port a running worktree task has to itself (config.json `portRange`).
pub const ENV_PORT: &str = "CONDUCTOR_PORT";

/// Set in an agent's environment to its task's depth + 1: the depth of the sub-tasks it
/// may create (a task created outside any agent has depth 0).
pub const ENV_DEPTH: &str = "CONDUCTOR_DEPTH";

/// The deepest sub-task a chain of agents may create ([`DEFAULT_MAX_DEPTH`] when unset);
/// `0` forbids agents to create tasks at all.
pub const ENV_MAX_DEPTH: &str = "CONDUCTOR_MAX_DEPTH";

/// The fan-out limit when [`ENV_MAX_DEPTH`] is unset.
pub const DEFAULT_MAX_DEPTH: u32 = 3;

/// Mark `task` with the depth of the process creating it ([`ENV_DEPTH`], 0 when unset),
/// so the worker hands its agent depth + 1; [`Error::TooDeep`] past the limit
/// ([`ENV_MAX_DEPTH`]), so a chain of agents creating sub-tasks cannot fork-bomb the
/// machine. A variable that is not a number is [`Error::BadEnvVar`], naming it.
pub fn stamp_depth(task: &mut crate::protocol::Task) -> Result<()> {
    let depth = depth_var(ENV_DEPTH)?.unwrap_or(0);
    let max = depth_var(ENV_MAX_DEPTH)?.unwrap_or(DEFAULT_MAX_DEPTH);
    if depth > max {
        return Err(Error::TooDeep {
            depth,
            max,
            default_max: DEFAULT_MAX_DEPTH,
            depth_var: ENV_DEPTH,
            max_var: ENV_MAX_DEPTH,
        });
    }
    task.depth = (depth > 0).then_some(depth);
    Ok(())
}

fn depth_var(name: &'static str) -> Result<Option<u32>> {
    let Some(value) = std::env::var_os(name) else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    text.trim()
        .parse::<u32>()
        .map(Some)
        .map_err(|_| Error::BadEnvVar {
            name,
            value: text.into_owned(),
            expected: "a whole number of levels such as 0 or 3",
        })
}

/// Refuse to `action` (e.g. "start worker 3") from inside a conductor agent, where it
/// would nest workers under a worker, unless `allowed`. [`Error::Nested`] otherwise.
pub fn refuse_nested(action: &str, allowed: bool) -> Result<()> {
    if allowed || std::env::var_os(ENV_WORKER).is_none() {
        return Ok(());
    }
    Err(Error::Nested {
        action: action.to_string(),
        variable: ENV_WORKER,
    })
}

/// The project directory an agent runs in, canonical: [`Error::NotADirectory`] when
/// `dir` is missing or not a directory.
pub fn project_dir(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Err(Error::NotADirectory {
            what: "project directory",
            path: dir.to_path_buf(),
        });
    }
    dir.canonicalize()
        .map_err(|e| Error::io("resolve the project directory", dir, e))
}
