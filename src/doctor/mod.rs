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
mod check;
mod events;
mod files;
mod mount;
mod permissions;
mod root;
mod state;
mod tools;
mod worktrees;

use crate::layout::Root;
use crate::preset::Preset;

pub use agent_trial::{served_presets, TRIAL_TIMEOUT};
pub use check::{Check, CheckStatus};

// ---------------------------------------------------------------------------------
// doctor

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
