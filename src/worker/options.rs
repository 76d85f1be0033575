//! How a worker is set up: its options and their documented defaults.

use std::path::PathBuf;
use std::time::Duration;

use crate::agent::AgentCommand;
use crate::layout::{Root, Slot};
use crate::preset::Preset;
use crate::watch::WatchMode;

/// How a worker is set up. [`WorkerOptions::new`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The root it serves.
    pub root: Root,
    /// The slot it serves.
    pub slot: Slot,
    /// The agent's working directory (the project).
    pub project_dir: PathBuf,
    /// The agent command each task is piped to.
    pub agent: AgentCommand,
    /// How to read the agent's output and continue sessions.
    pub preset: Preset,
    /// How it notices new files (filesystem events, or polling).
    pub watch: WatchMode,
    /// Default timeout when the task gives none (`--timeout`); none = no limit.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when stopping an agent.
    pub kill_grace: Duration,
    /// How often `status.json` is refreshed while working.
    pub heartbeat: Duration,
    /// Re-read the inbox this often even without events (the slow safety timer).
    pub rescan: Duration,
    /// How long an unparseable task.json must stay unchanged before it is rejected
    /// (non-atomic writers truncate, then write).
    pub quiet_grace: Duration,
    /// Stdout bytes kept inline in the result; the rest stays in a file.
    pub inline_output: usize,
    /// Most bytes a task's log file keeps: beyond it the middle is cut (marked by a
    /// line, said in the result's `outputNote`).
    pub log_cap: u64,
    /// Start even inside an agent (`CONDUCTOR_WORKER` set).
    pub allow_nested: bool,
    /// More presets this worker serves besides `preset` (which stays the default for
    /// tasks naming none): a task's `agent` picks one, each with its command line.
    pub(crate) more_agents: Vec<(Preset, AgentCommand)>,
    /// A task its agent reports usage- or rate-limited with a reset time goes back to
    /// wait for the reset instead of failing (`--no-defer-rate-limited`, or config
    /// `deferRateLimited: false`, turns it off).
    pub defer_rate_limited: bool,
    /// Started by a process that owns it (`conductor run`, `pool::WakePipes`): stdin is
    /// a pipe whose bytes mean "look again" (its end: the owner is gone, stop), and
    /// stdout a pipe this worker writes a byte to as each task starts and ends. Its inbox
    /// and the shared directories are then not watched (no inotify instance); the
    /// rescan stays the safety net.
    pub wake_pipes: bool,
    /// Started by a process that owns it but shares its root with others (`conductor
    /// run --root R`): stdout is a pipe this worker writes a byte to as each task starts
    /// and ends, as with [`Self::wake_pipes`], while it watches its files as any worker.
    pub tell_owner: bool,
}

impl WorkerOptions {
    /// Its stdout is its owner's pipe, told of each task's start and end
    /// ([`Self::wake_pipes`] or [`Self::tell_owner`]).
    pub fn tells_owner(&self) -> bool {
        self.wake_pipes || self.tell_owner
    }

    /// A worker of `slot` on `root` that runs `agent` in `project_dir`, with the defaults.
    pub fn new(root: Root, slot: Slot, project_dir: PathBuf, agent: AgentCommand) -> Self {
        WorkerOptions {
            root,
            slot,
            project_dir,
            agent,
            preset: Preset::Command,
            watch: WatchMode::Auto,
            timeout: None,
            kill_grace: Duration::from_secs(5),
            heartbeat: Duration::from_secs(2),
            rescan: Duration::from_secs(2),
            quiet_grace: Duration::from_millis(500),
            inline_output: 4 * 1024 * 1024,
            log_cap: 64 * 1024 * 1024,
            allow_nested: false,
            more_agents: Vec::new(),
            defer_rate_limited: true,
            wake_pipes: false,
            tell_owner: false,
        }
    }

    /// The names of the presets served, the default first.
    pub fn preset_names(&self) -> Vec<String> {
        std::iter::once(self.preset)
            .chain(self.more_agents.iter().map(|(p, _)| *p))
            .map(|p| p.to_string())
            .collect()
    }

    /// The preset and command that run a task naming `agent` (none: the default).
    /// `None`: this worker does not serve that preset.
    pub(crate) fn agent_for(&self, agent: Option<&str>) -> Option<(Preset, &AgentCommand)> {
        match agent {
            None => Some((self.preset, &self.agent)),
            Some(name) if name == self.preset.to_string() => Some((self.preset, &self.agent)),
            Some(name) => self
                .more_agents
                .iter()
                .find(|(p, _)| p.to_string() == name)
                .map(|(p, c)| (*p, c)),
        }
    }
}
