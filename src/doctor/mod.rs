//! `conductor doctor`: is this setup healthy? Each check looks at one thing and says
//! ok, warn or fail with a fix; none of them changes anything. A warning is something
//! a person must fix: what conductor repairs itself is not reported.
//!
//! - `root`: the root directory and `config.json`.
//! - `permissions`: whether anything under the root is open to other users.
//! - `files`: every task, status and result file parses.
//! - `state`: stale locks, dead workers, orphaned tasks.
//! - `events`: whether workers get native file events: watcher, filesystem, inotify.
//! - `mount`: the root's mount, whether flocks cross hosts, the pickup to expect.
//! - `tools`: tmux and the agent command.
//! - `worktrees`: task worktrees nothing accounts for any more.
//! - `agent <preset>` (only when asked, `doctor --agent`): the agent run once with a
//!   trivial prompt — ok, not installed, invalid key, rate-limited, API unreachable.

mod agent_trial;
mod events;
mod files;
mod mount;
mod permissions;
mod root;
mod state;
mod tools;
mod worktrees;

use std::fmt;

use serde::Serialize;

use crate::layout::Root;
use crate::preset::Preset;

pub use agent_trial::{served_presets, TRIAL_TIMEOUT};

// ---------------------------------------------------------------------------------
// doctor

/// How a doctor check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        })
    }
}

/// One doctor check: what was looked at, what was found, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub name: String,
    pub status: CheckStatus,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn new(name: &str, status: CheckStatus, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_string(),
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(crate) fn ok(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Ok, detail)
    }

    pub(crate) fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Warn, detail).with_fix(fix)
    }

    pub(crate) fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Fail, detail).with_fix(fix)
    }

    fn with_fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// What `doctor` checks beyond the root itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorOptions {
    /// The agent command line workers will run (`--agent`).
    pub agent: String,
    /// Presets whose agent is run once to see that it works (`--agent [PRESET]`);
    /// empty: none is run.
    pub try_presets: Vec<Preset>,
    /// How long each such trial may take.
    pub trial_timeout: std::time::Duration,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            agent: "claude -p".to_string(),
            try_presets: Vec::new(),
            trial_timeout: TRIAL_TIMEOUT,
        }
    }
}

/// Run every check.
pub fn doctor(root: &Root, opts: &DoctorOptions) -> Vec<Check> {
    let mut checks = Vec::new();
    if root::check_root(root, &mut checks) {
        checks.push(permissions::check_permissions(root));
        checks.push(root::check_config(root));
        checks.push(files::check_json_files(root));
        checks.push(files::check_index(root));
        checks.push(state::check_locks(root));
        checks.push(state::check_clocks(root));
        checks.push(state::check_slots(root));
        checks.push(events::check_watcher(root));
        checks.push(events::check_filesystem(root.path()));
        checks.push(mount::check_mount(root));
        checks.push(worktrees::check_worktrees(root));
    }
    checks.push(events::check_inotify_limits());
    checks.push(tools::check_tmux());
    if opts.try_presets.is_empty() {
        checks.push(tools::check_agent(&opts.agent));
    }
    for preset in &opts.try_presets {
        checks.push(agent_trial::try_agent(*preset, opts.trial_timeout));
    }
    checks
}
