//! One description of a task: the fields a task can ask for, from which the CLI's flags (clap), the MCP tools' arguments and schemas (serde, schemars) and task.json (the protocol's `Task`, through one conversion) all come.
//!
//! A new task field is one change in this file: a field in the struct of its scope with
//! its doc comment (the `-h` line first, then the detail), and a line in that struct's
//! `apply`. [`TaskOptions`] holds what every task of `conductor run` may carry too,
//! [`TaskSpec`] what one task asks for (`submit`, `send`, their MCP tools), and
//! [`QueueSpec`] what only the shared queue takes (`submit`). The test below holds each
//! field to being a CLI flag, an MCP argument and a task.json field.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use crate::{Error, Task, TaskId};

/// The `--help` headings a task's flags go under (`cli::help` says them too, from here:
/// the library does not import the CLI).
pub mod heading {
    /// Which agent runs a task and what it may do.
    pub const AGENT: &str = "Agent";
    /// `--worktree` and the options that go with it.
    pub const WORKTREE: &str = "Worktree";
    /// What a task carries besides its prompt.
    pub const TASK: &str = "Task fields";
    /// The shared queue's options.
    pub const QUEUE: &str = "Queue";
}

/// A task id as a client gives it: a string, or a number (an all-digit id); answers
/// carry it back in the same form.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(feature = "cli", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum IdArg {
    /// An all-digit id, as the original clients write it.
    Number(u64),
    /// Any other id (digits in a string are read as a number too).
    Text(String),
}

impl IdArg {
    /// The id, checked (an error naming it).
    pub fn id(&self) -> std::result::Result<TaskId, String> {
        match self {
            IdArg::Number(n) => Ok(TaskId::Number(*n)),
            IdArg::Text(s) => {
                TaskId::parse(s).map_err(|reason| format!("invalid task id {s:?}: {reason}"))
            }
        }
    }

    /// The id as it was given.
    pub fn echo(&self) -> Value {
        match self {
            IdArg::Number(n) => Value::from(*n),
            IdArg::Text(s) => Value::from(s.as_str()),
        }
    }

    /// `--id ID` on the command line (checked when the task is made).
    pub fn parse_arg(s: &str) -> std::result::Result<IdArg, String> {
        Ok(IdArg::Text(s.to_string()))
    }
}

/// What every task may carry, `conductor run`'s tasks too.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args, schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskOptions {
    /// The task's time limit: 300, 90s, 5m, 1h.
    ///
    /// Its agent is stopped after it: seconds (`300`) or a duration (`90s`, `5m`, `1h`)
    /// on the command line; in seconds over MCP and in task.json (`timeoutSecs`).
    #[cfg_attr(feature = "cli", arg(long = "timeout", value_name = "DURATION",
        value_parser = whole_secs_arg, help_heading = heading::AGENT))]
    pub timeout_secs: Option<u64>,
    /// The model the agent uses for this task.
    ///
    /// The claude, codex and gemini presets pass it on (`--model` / `-m`); the command
    /// preset ignores it (the worker warns).
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME",
        help_heading = heading::AGENT, hide_short_help = true))]
    pub model: Option<String>,
    /// Run in a fresh git worktree, on branch conductor/<ID>.
    ///
    /// A new worktree of the repository (`dir`, else the worker's project directory),
    /// on a new branch conductor/<ID>; then `conductor diff|merge|discard ID`. The
    /// result gives the branch and its diffstat. Default: the root's setting (off).
    #[cfg_attr(feature = "cli", arg(long, num_args = 0, default_missing_value = "true",
        help_heading = heading::WORKTREE))]
    pub worktree: Option<bool>,
    /// With --worktree: make the branch from this commit or ref instead of HEAD.
    #[cfg_attr(feature = "cli", arg(long, value_name = "REF", requires = "worktree",
        help_heading = heading::WORKTREE, hide_short_help = true))]
    pub base: Option<String>,
    /// With --worktree: copy uncommitted changes into the worktree.
    ///
    /// The repository's staged and unstaged changes to tracked files (without it the
    /// worktree starts from HEAD, and the result says so).
    #[cfg_attr(feature = "cli", arg(long, num_args = 0, default_missing_value = "true",
        requires = "worktree", help_heading = heading::WORKTREE, hide_short_help = true))]
    pub include_uncommitted: Option<bool>,
    /// Run in the directory itself, not in a worktree.
    ///
    /// For when config.json's `"worktree": true` makes worktrees the root's default
    /// (over MCP and in task.json: `"worktree": false`).
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "worktree",
        help_heading = heading::WORKTREE, hide_short_help = true))]
    #[serde(skip)]
    #[cfg_attr(feature = "cli", schemars(skip))]
    pub no_worktree: bool,
    /// Run until CMD passes: after the agent, CMD runs in its worktree; while it fails, the session goes on.
    ///
    /// CMD runs with `sh -c` in the task's worktree (else its directory), with the task's
    /// environment (CONDUCTOR_PORT …), after each round. While it fails, the same agent
    /// session continues (claude, codex, gemini resume it; another preset starts afresh
    /// in the same worktree), its next prompt the end of CMD's output, up to
    /// --until-rounds rounds. The result says `rounds` and the check's last verdict
    /// (`check`); a check that never passed fails the task, its branch kept for review.
    #[cfg_attr(feature = "cli", arg(long, value_name = "CMD",
        help_heading = heading::WORKTREE, hide_short_help = true))]
    pub until: Option<String>,
    /// With --until: at most N rounds in all [default: 3, at most 20].
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", requires = "until",
        help_heading = heading::WORKTREE, hide_short_help = true))]
    #[cfg_attr(feature = "cli", schemars(range(min = 1, max = 20)))]
    pub until_rounds: Option<u32>,
    /// Set NAME=VALUE in the agent's environment (repeatable).
    ///
    /// Repeat for more (over MCP: {"NAME": "value"}); names of letters, digits and _;
    /// `CONDUCTOR_*` names are conductor's own and refused.
    #[cfg_attr(feature = "cli", arg(long = "env", value_name = "NAME=VALUE",
        value_parser = crate::protocol::parse_env_assignment,
        help_heading = heading::TASK, hide_short_help = true))]
    #[serde(default, deserialize_with = "env_map")]
    #[cfg_attr(feature = "cli", schemars(with = "BTreeMap<String, String>"))]
    pub env: Vec<(String, String)>,
    /// Label the task (repeatable); `tasks --label L` filters on it.
    ///
    /// 1-64 characters of A-Z a-z 0-9 . _ - : / each; one given twice is kept once.
    #[cfg_attr(feature = "cli", arg(long = "label", value_name = "LABEL",
        help_heading = heading::TASK, hide_short_help = true))]
    #[serde(default)]
    pub labels: Vec<String>,
}

/// The tools a task narrows its agent to, as one value (a comma-separated list on the
/// command line, an array over MCP): a type of its own so that clap takes it once.
pub type ToolList = Vec<String>;

/// What one task asks for: `conductor submit` and `send`, and the MCP `submit` and
/// `send` tools, take these (each flattens them into its own arguments).
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args, schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// The prompt (or -f FILE).
    ///
    /// The whole prompt the agent is given: say what to do and what to report.
    #[cfg_attr(feature = "cli", arg(required_unless_present = "file"))]
    #[cfg_attr(feature = "cli", schemars(with = "String", length(min = 1)))]
    pub prompt: Option<String>,
    /// Read the prompt from FILE (`-` for stdin).
    #[cfg_attr(
        feature = "cli",
        arg(short, long, value_name = "FILE", conflicts_with = "prompt")
    )]
    #[serde(skip)]
    #[cfg_attr(feature = "cli", schemars(skip))]
    pub file: Option<PathBuf>,
    /// Task id [default: generated].
    ///
    /// Letters, digits, . _ -; unique on the root. Digits are sent as a number, like the
    /// original clients.
    #[cfg_attr(feature = "cli", arg(long, value_parser = IdArg::parse_arg))]
    pub id: Option<IdArg>,
    /// The options `run`'s tasks take too.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub options: TaskOptions,
    /// Only a worker serving this preset takes it.
    ///
    /// The agent preset that must run it (`claude`, `codex`, `gemini`, `command`): only a
    /// worker started with that preset takes it (the task's `agent` field; a slot's
    /// worker refuses a preset it does not serve). Default: the worker's first preset.
    #[cfg_attr(feature = "cli", arg(long = "agent-preset", value_name = "PRESET",
        value_parser = preset_name, help_heading = heading::AGENT))]
    pub agent: Option<String>,
    /// Run the agent in DIR (not the worker's project).
    ///
    /// An existing directory of yours (absolute over MCP), instead of the worker's
    /// project directory.
    #[cfg_attr(feature = "cli", arg(long, value_name = "DIR", help_heading = heading::AGENT))]
    pub dir: Option<PathBuf>,
    /// Narrow the tools the agent may use unattended.
    ///
    /// Comma-separated on the command line, an array over MCP (claude preset; `""` or
    /// `[]`: none, e.g. `Read` for a read-only task): each must be one the worker
    /// allows, and the worker's others are denied to this task's agent. Asking for more
    /// is rejected by the worker (the task's `allowedTools`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "TOOLS", value_parser = tools_arg,
        help_heading = heading::AGENT, hide_short_help = true))]
    pub allowed_tools: Option<ToolList>,
    /// Narrow the worker's permission or approval mode.
    ///
    /// The claude preset's permission mode (e.g. `plan`, `dontAsk`, `acceptEdits`) or
    /// gemini's approval mode (e.g. `auto_edit`, `plan`, `default`) for this task; one
    /// that lets the agent do more than the worker's is rejected (the task's
    /// `permissionMode`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "MODE",
        help_heading = heading::AGENT, hide_short_help = true))]
    pub permission_mode: Option<String>,
    /// The most this task's agent may spend, in USD.
    ///
    /// Passed to Claude Code as `--max-budget-usd` (other presets take no cap and run
    /// without one). The root's and groups' daily budgets are `dailyBudgetUsd`
    /// (config.json, `group set`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "USD",
        help_heading = heading::AGENT, hide_short_help = true))]
    pub max_budget_usd: Option<f64>,
    /// JSON handed to the agent as CONDUCTOR_CONTEXT.
    ///
    /// Any JSON value, in the agent's CONDUCTOR_CONTEXT environment variable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "JSON", value_parser = json_arg,
        help_heading = heading::TASK, hide_short_help = true))]
    pub context: Option<Value>,
}

/// What only the shared queue takes: `conductor submit` and the MCP `submit` tool.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args, schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// One running task per key (a user or a project).
    ///
    /// The serialization key: tasks with the same key never run at the same time.
    #[cfg_attr(feature = "cli", arg(long, value_name = "KEY"))]
    pub key: Option<String>,
    /// Priority 0-9; higher runs first [default: 5].
    #[cfg_attr(feature = "cli", arg(long, value_name = "0-9",
        value_parser = clap::value_parser!(u8).range(0..=9)))]
    #[cfg_attr(feature = "cli", schemars(range(max = 9)))]
    pub priority: Option<u8>,
    /// Run once these tasks have all succeeded.
    ///
    /// They must already be sent or submitted; if one does not succeed, this task ends
    /// `cancelled` ("dependency ID failed").
    #[cfg_attr(feature = "cli", arg(long, value_name = "ID,…", value_delimiter = ',',
        value_parser = IdArg::parse_arg))]
    #[serde(default)]
    pub after: Vec<IdArg>,
    /// Run in this group, at most its --parallel at once.
    ///
    /// At most the group's --parallel tasks of it run at once, root-wide (`conductor
    /// group add NAME --parallel N` first).
    #[cfg_attr(feature = "cli", arg(long, value_name = "NAME",
        help_heading = heading::QUEUE, hide_short_help = true))]
    pub group: Option<String>,
    /// Up to N attempts in all after interruptions [default: 1].
    ///
    /// Run again after an interruption (a worker crash) up to N attempts in all.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N",
        help_heading = heading::QUEUE, hide_short_help = true))]
    pub max_attempts: Option<u32>,
}

impl TaskOptions {
    /// Set these options on `task` (the worktree fields left alone unless given, so the
    /// root's default in config.json applies).
    pub fn apply(&self, task: &mut Task) {
        task.timeout_secs = self.timeout_secs.or(task.timeout_secs);
        task.model = self.model.clone().or(task.model.take());
        if self.no_worktree {
            task.worktree = Some(false);
        } else if self.worktree.is_some() {
            task.worktree = self.worktree;
        }
        if task.worktree == Some(true) {
            task.base = self.base.clone().or(task.base.take());
            task.include_uncommitted = self.include_uncommitted.filter(|i| *i);
        }
        if let Some(check) = &self.until {
            task.until = Some(crate::protocol::Until {
                check: check.clone(),
                rounds: self.until_rounds,
            });
        }
        task.env.extend(self.env.iter().cloned());
        for label in &self.labels {
            if !task.has_label(label) {
                task.labels.push(label.clone());
            }
        }
    }
}

impl TaskSpec {
    /// The task this describes, checked: the one conversion into the protocol's
    /// [`Task`] (the prompt must be given: read `file` first, which is the caller's).
    pub fn into_task(self) -> crate::Result<Task> {
        let invalid = |reason: String| Error::InvalidTask { reason };
        let prompt = self.prompt.unwrap_or_default();
        if prompt.trim().is_empty() {
            return Err(invalid(
                "`prompt` is blank (only whitespace): say what the agent should do".into(),
            ));
        }
        if self.options.until_rounds.is_some() && self.options.until.is_none() {
            return Err(invalid(
                "`untilRounds` needs `until`, the check to run".into(),
            ));
        }
        let mut task = Task::new(prompt);
        task.id = self
            .id
            .as_ref()
            .map(IdArg::id)
            .transpose()
            .map_err(invalid)?;
        self.options.apply(&mut task);
        task.agent = self
            .agent
            .as_deref()
            .map(preset_name)
            .transpose()
            .map_err(invalid)?;
        if let Some(mode) = &self.permission_mode {
            check_permission_mode(task.agent.as_deref(), mode).map_err(invalid)?;
        }
        task.dir = self.dir.as_deref().map(resolved_dir).transpose()?;
        task.allowed_tools = self.allowed_tools;
        task.permission_mode = self.permission_mode;
        task.max_budget_usd = self.max_budget_usd;
        task.context = self.context;
        task.validate().map_err(invalid)?;
        Ok(task)
    }
}

impl QueueSpec {
    /// Set the queue's fields on `task`, and check it.
    pub fn apply(&self, task: &mut Task) -> crate::Result<()> {
        let invalid = |reason: String| Error::InvalidTask { reason };
        task.key = self.key.clone();
        task.priority = self.priority;
        task.group = self.group.clone();
        task.max_attempts = self.max_attempts;
        for dep in &self.after {
            task.after.push(dep.id().map_err(invalid)?);
        }
        task.validate().map_err(invalid)
    }
}

/// A preset's name, checked (`claude`, `codex`, `gemini`, `command`).
pub fn preset_name(name: &str) -> std::result::Result<String, String> {
    name.parse::<crate::preset::Preset>()
        .map(|p| p.to_string())
        .map_err(|e| e.to_string())
}

/// The Claude Code permission modes, as a message lists them.
const CLAUDE_MODES: &str = "plan, default, manual, dontAsk, acceptEdits, auto, bypassPermissions";

/// `permissionMode` must be a mode the task's preset knows (`agent`; without one, a
/// Claude Code permission mode or a Gemini CLI approval mode).
pub fn check_permission_mode(agent: Option<&str>, mode: &str) -> std::result::Result<(), String> {
    use crate::preset::{claude_mode_rank, gemini_mode_rank, Preset, GEMINI_APPROVAL_MODES};
    let claude = claude_mode_rank(mode).is_some();
    let gemini = gemini_mode_rank(mode).is_some();
    let gemini_modes = GEMINI_APPROVAL_MODES.join(", ");
    let (known, modes) = match agent.and_then(|a| a.parse::<Preset>().ok()) {
        Some(Preset::Claude) => (claude, format!("the claude preset's: {CLAUDE_MODES}")),
        Some(Preset::Gemini) => (gemini, format!("the gemini preset's: {gemini_modes}")),
        _ => (
            claude || gemini,
            format!("Claude Code's {CLAUDE_MODES}; Gemini CLI's {gemini_modes}"),
        ),
    };
    if known {
        Ok(())
    } else {
        Err(format!(
            "`permissionMode`: {mode:?} is not a permission mode ({modes})"
        ))
    }
}

/// `dir` absolute and resolved (no `..`, no links) for the worker, which runs elsewhere;
/// a missing one is made absolute only (and refused by the worker or queue).
fn resolved_dir(dir: &std::path::Path) -> crate::Result<PathBuf> {
    match dir.canonicalize() {
        Ok(d) => Ok(d),
        Err(_) => std::path::absolute(dir).map_err(|e| Error::BadTaskDir {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// `--timeout 90s`: whole seconds, rounded up.
#[cfg(feature = "cli")]
fn whole_secs_arg(s: &str) -> std::result::Result<u64, String> {
    let d = crate::text::parse_duration(s)?;
    Ok(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// `--allowed-tools Read,Edit` (`""`: none).
#[cfg(feature = "cli")]
fn tools_arg(s: &str) -> std::result::Result<ToolList, String> {
    Ok(crate::preset::tool_list(s))
}

/// `--context JSON`.
#[cfg(feature = "cli")]
fn json_arg(s: &str) -> std::result::Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not valid JSON: {e}"))
}

/// `env` over MCP: {"NAME": "value"}.
fn env_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<(String, String)>, D::Error> {
    Ok(BTreeMap::<String, String>::deserialize(d)?
        .into_iter()
        .collect())
}

#[cfg(all(test, feature = "cli"))]
#[path = "spec_tests.rs"]
mod tests;
