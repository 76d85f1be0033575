//! The environment variables conductor reads and sets, and the checks of where a
//! process starts: not nested inside an agent, in an existing project directory.

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

/// Refuse to `action` (e.g. "start worker 3") from inside a conductor agent, where it
/// would nest workers under a worker, unless `allowed`. [`Error::Nested`] otherwise.
pub fn refuse_nested(action: &str, allowed: bool) -> Result<()> {
    if allowed || std::env::var_os(ENV_WORKER).is_none() {
        return Ok(());
    }
    Err(Error::Nested {
        action: action.to_string(),
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
