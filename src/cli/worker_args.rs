//! The workers' command line: `conductor worker` and `conductor-worker` parse the same.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::args::parse_preset;
use crate::layout::SlotList;
use crate::preset::Preset;
use crate::watch::DEFAULT_POLL_INTERVAL;

/// `--poll` without a value: the library's default interval, in milliseconds.
const DEFAULT_POLL_MS: &str = "100";
const _: () = assert!(DEFAULT_POLL_INTERVAL.as_millis() == 100);

/// `--poll=250ms`, `--poll=1s` (the tool's one duration syntax); a bare number keeps
/// meaning milliseconds, as it always has here, so `--poll=250` never becomes 250 s.
fn parse_poll(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<u64>() {
        Ok(ms) => Ok(Duration::from_millis(ms)),
        Err(_) => humantime::parse_duration(s.trim()).map_err(|e| {
            format!("--poll takes an interval such as 250ms or 1s (a bare number is milliseconds), not {s:?}: {e}")
        }),
    }
}

/// What the worker's presets run, for `--help`.
pub(crate) const PRESETS_HELP: &str = "\
Presets: `claude` runs `claude -p --output-format stream-json --verbose --permission-mode \
acceptEdits --allowedTools Bash,Edit,Write,Read,NotebookEdit`, shows its events readable in \
the live log and lifts its answer, session id, cost, turns and tokens into the result; \
`codex` runs `codex exec --json --sandbox workspace-write --skip-git-repo-check -` (its \
events shown readable, the last message the answer, thread id and tokens lifted); `gemini` \
runs `gemini --output-format stream-json --approval-mode yolo --skip-trust` (its events \
shown readable, its last text the answer, session id and tokens lifted); `command` runs \
--agent as given. Repeat --preset to serve several (`--preset claude --preset codex`): a \
task's `agent` picks one, the first is the default for tasks naming none, and tasks naming \
another are not taken (refused from the inbox). --agent replaces the first one's command \
line.";

/// `conductor worker N DIR` / `conductor-worker N DIR`.
#[derive(Debug, Args)]
#[command(after_long_help = PRESETS_HELP)]
pub struct WorkerArgs {
    /// Slot number: 0, or a range or list (0-99, 0,3,5-9).
    ///
    /// Serves <root>/workers/<N>/. A range or a list (`0-99`, `0,3,5-9`) serves all of
    /// them from this one process.
    #[arg(value_name = "SLOTS")]
    pub slot: SlotList,
    /// Project directory the agent runs in [default: .].
    ///
    /// The agent's working directory. [default: the current directory]
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// claude, codex, gemini or command (repeatable).
    ///
    /// See "Presets" below.
    #[arg(long, value_name = "PRESET", value_parser = parse_preset)]
    pub preset: Vec<Preset>,
    /// Agent command line; the prompt arrives on its stdin.
    ///
    /// No shell is involved unless you write one (`sh -c '…'`). [default: the preset's,
    /// else `claude -p`]
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
    /// Default task time limit: 300, 90s, 5m, 1h.
    ///
    /// A task's own timeoutSecs wins: seconds (`300`) or a duration (`90s`, `5m`, `1h`).
    #[arg(long, value_name = "DURATION", value_parser = super::args::parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// Also print each task's live output on stdout.
    ///
    /// What `conductor logs N -f` shows, between the worker's own lines, each line cut to
    /// the terminal's width; what conductor-launch's worker panes run. One slot only.
    #[arg(long)]
    pub show_output: bool,
    /// Claude: tools the agent may use without asking.
    ///
    /// Comma-separated (default `Bash,Edit,Write,Read,NotebookEdit`; `Read` alone makes
    /// it read-only, `""` pre-approves none). Not with --agent (your command line says it).
    #[arg(long, value_name = "TOOLS", conflicts_with = "agent",
          help_heading = super::help::AGENT)]
    pub allowed_tools: Option<String>,
    /// Claude: permission mode; Gemini: approval mode.
    ///
    /// Claude Code's permission mode (default `acceptEdits`; `plan` changes nothing).
    /// Gemini preset: its approval mode (default `yolo`; `auto_edit`, `plan`,
    /// `default`). Not with --agent.
    #[arg(long, value_name = "MODE", conflicts_with = "agent",
          help_heading = super::help::AGENT)]
    pub permission_mode: Option<String>,
    /// Fail a task whose agent hits a usage or rate limit, instead of deferring it to
    /// the limit's reset (config.json `deferRateLimited: false` does the same root-wide).
    #[arg(long, help_heading = super::help::AGENT, hide_short_help = true)]
    pub no_defer_rate_limited: bool,
    /// Time between SIGTERM and SIGKILL when stopping an agent: seconds or a duration.
    #[arg(long, value_name = "DURATION", default_value = "5", value_parser = super::args::parse_duration_arg,
          help_heading = super::help::WORKER, hide_short_help = true)]
    pub kill_grace: Duration,
    /// Most bytes a task's log file (`tasks/<id>.log`) keeps; beyond it the middle of
    /// the output is cut and a marker line says so.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024,
          help_heading = super::help::WORKER, hide_short_help = true)]
    pub log_cap: u64,
    /// Poll the directory instead of using native file events (for NFS, SMB, FUSE);
    /// optional interval (`250ms`, `1s`; a bare number is milliseconds).
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, require_equals = true,
          default_missing_value = DEFAULT_POLL_MS, value_parser = parse_poll,
          help_heading = super::help::WORKER, hide_short_help = true)]
    pub poll: Option<Duration>,
    /// Start even when running inside a conductor agent (CONDUCTOR_WORKER is set).
    #[arg(long, help_heading = super::help::WORKER, hide_short_help = true)]
    pub allow_nested: bool,
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR", help_heading = super::help::GLOBAL, hide_short_help = true)]
    pub root: Option<PathBuf>,
    /// Started by `conductor run`, which owns this worker: stdin is the pipe it is woken
    /// through (its end stops the worker), stdout the pipe it tells of each ended task
    /// on; nothing is watched by file events. One slot only.
    #[arg(long, hide = true)]
    pub wake_pipes: bool,
    /// Started by `conductor run --root R`, which owns this worker: stdout is the pipe it
    /// tells of each started and ended task on; it watches its files as any worker (the
    /// root is shared). One slot only.
    #[arg(long, hide = true, conflicts_with = "wake_pipes")]
    pub tell_owner: bool,
}

impl WorkerArgs {
    /// Stdout is the owning process's pipe (`--wake-pipes` or `--tell-owner`).
    pub fn tells_owner(&self) -> bool {
        self.wake_pipes || self.tell_owner
    }
}
