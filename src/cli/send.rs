//! `conductor send N PROMPT`: deliver one task to one worker's inbox.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::usage::CliError;
use crate::{Slot, Task};

use super::{help, parse_slot, RootArg};
use crate::cli::common::exit;

/// What a task is made of on the command line; shared by `send` and `submit`.
#[derive(Debug, Clone, clap::Args)]
pub struct TaskArgs {
    /// The prompt (or -f FILE).
    #[arg(required_unless_present = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from FILE (`-` for stdin).
    #[arg(short, long, value_name = "FILE", conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// Task id [default: generated].
    ///
    /// Digits are sent as a number, like the original clients.
    #[arg(long)]
    pub id: Option<String>,
    /// The task's time limit: 300, 90s, 5m, 1h.
    ///
    /// Its agent is stopped after it: seconds (`300`) or a duration (`90s`, `5m`, `1h`).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration_arg,
          help_heading = help::AGENT)]
    pub timeout: Option<Duration>,
    /// Only a worker serving this preset takes it.
    ///
    /// The agent preset that must run it (`claude`, `codex`, `gemini`, `command`): only a
    /// worker started with that preset takes it (the task's `agent` field). Default: the
    /// worker's first preset.
    #[arg(long, value_name = "PRESET", value_parser = super::parse_preset,
          help_heading = help::AGENT)]
    pub agent_preset: Option<crate::preset::Preset>,
    /// The model the agent uses for this task.
    ///
    /// The claude, codex and gemini presets pass it on (`--model` / `-m`); the command
    /// preset ignores it (the worker warns).
    #[arg(long, value_name = "NAME", help_heading = help::AGENT, hide_short_help = true)]
    pub model: Option<String>,
    /// Narrow the tools the agent may use unattended.
    ///
    /// Comma-separated (claude preset; `""`: none): each must be one the worker allows,
    /// and the worker's others are denied to this task's agent. Asking for more is
    /// rejected by the worker (the task's `allowedTools`).
    #[arg(long, value_name = "TOOLS", help_heading = help::AGENT, hide_short_help = true)]
    pub allowed_tools: Option<String>,
    /// Narrow the worker's permission or approval mode.
    ///
    /// The claude preset's permission mode (e.g. `plan`, `dontAsk`) or gemini's approval
    /// mode (e.g. `auto_edit`, `plan`) for this task; one that lets the agent do more
    /// than the worker's is rejected (the task's `permissionMode`).
    #[arg(long, value_name = "MODE", help_heading = help::AGENT, hide_short_help = true)]
    pub permission_mode: Option<String>,
    /// The most this task's agent may spend, in USD.
    ///
    /// Passed to Claude Code as `--max-budget-usd` (other presets take no cap and run
    /// without one). The root's and groups' daily budgets are `dailyBudgetUsd`
    /// (config.json, `group set`).
    #[arg(long, value_name = "USD", help_heading = help::AGENT, hide_short_help = true)]
    pub max_budget_usd: Option<f64>,
    #[command(flatten)]
    pub worktree: WorktreeArgs,
    #[command(flatten)]
    pub env_labels: EnvLabelArgs,
    /// JSON handed to the agent as CONDUCTOR_CONTEXT.
    #[arg(long, value_name = "JSON", help_heading = help::TASK, hide_short_help = true)]
    pub context: Option<String>,
}

/// `--env NAME=VALUE` and `--label L`: shared by `run`, `send`, `submit` and `edit`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EnvLabelArgs {
    /// Set NAME=VALUE in the agent's environment (repeatable).
    ///
    /// Repeat for more; `CONDUCTOR_*` names are conductor's own and refused.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_arg,
          help_heading = help::TASK, hide_short_help = true)]
    pub env: Vec<(String, String)>,
    /// Label the task (repeatable); `tasks --label L` filters on it.
    ///
    /// 1-64 characters of A-Z a-z 0-9 . _ - : /
    #[arg(long = "label", value_name = "LABEL", help_heading = help::TASK,
          hide_short_help = true)]
    pub labels: Vec<String>,
}

/// Parse `--env NAME=VALUE` for clap (clap names the argument in the error).
pub fn parse_env_arg(s: &str) -> Result<(String, String), String> {
    crate::protocol::parse_env_assignment(s)
}

impl EnvLabelArgs {
    /// Add the variables and labels to `task`.
    pub fn apply(&self, task: &mut Task) {
        task.env.extend(self.env.iter().cloned());
        for label in &self.labels {
            if !task.has_label(label) {
                task.labels.push(label.clone());
            }
        }
    }
}

/// `--worktree`, `--base`, `--include-uncommitted`: shared by `run`, `send` and `submit`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorktreeArgs {
    /// Run in a fresh git worktree, on branch conductor/<ID>.
    ///
    /// A new worktree of the repository, on a new branch conductor/<ID>; then
    /// `conductor diff|merge|discard ID` (see `conductor merge --help`).
    #[arg(long, help_heading = help::WORKTREE)]
    pub worktree: bool,
    /// With --worktree: make the branch from this commit or ref instead of HEAD.
    #[arg(long, value_name = "REF", requires = "worktree", help_heading = help::WORKTREE,
          hide_short_help = true)]
    pub base: Option<String>,
    /// With --worktree: copy uncommitted changes into the worktree.
    ///
    /// The repository's staged and unstaged changes to tracked files (without it the
    /// worktree starts from HEAD, and the result says so).
    #[arg(long, requires = "worktree", help_heading = help::WORKTREE, hide_short_help = true)]
    pub include_uncommitted: bool,
    /// Run in the directory itself, not in a worktree.
    ///
    /// For when config.json's `"worktree": true` makes worktrees the root's default.
    #[arg(long, conflicts_with = "worktree", help_heading = help::WORKTREE,
          hide_short_help = true)]
    pub no_worktree: bool,
    #[command(flatten)]
    pub until: super::until::UntilArgs,
}

/// Refuse at once a `--worktree` task whose repository can be known here (its `dir`,
/// or `run`'s `--dir`) and is no repository with a working tree: the worker would only
/// reject it later.
pub fn check_worktree_dir(task: &Task, dir: Option<&std::path::Path>) -> crate::Result<()> {
    if task.worktree == Some(true) {
        if let Some(d) = task.dir.as_deref().or(dir) {
            crate::worktree::Repo::of(d)?;
        }
    }
    Ok(())
}

impl WorktreeArgs {
    /// Set the task's worktree fields (left alone without --worktree or --no-worktree,
    /// so the root's default in config.json applies).
    pub fn apply(&self, task: &mut Task) {
        if self.no_worktree {
            task.worktree = Some(false);
        }
        if self.worktree {
            task.worktree = Some(true);
            task.base = self.base.clone();
            task.include_uncommitted = self.include_uncommitted.then_some(true);
        }
        self.until.apply(task);
    }
}

impl TaskArgs {
    /// The task these arguments describe (prompt read from its file if need be).
    pub fn task(&self) -> anyhow::Result<Task> {
        let prompt = read_prompt(self.prompt.clone(), self.file.as_ref())?;
        if prompt.trim().is_empty() {
            anyhow::bail!(CliError::Usage(match &self.file {
                Some(f) => format!("the prompt is empty ({} holds no text)", f.display()),
                None => "the prompt is empty: give the task's text (or -f FILE)".to_string(),
            }));
        }
        let mut task = Task::new(prompt);
        if let Some(id) = &self.id {
            task.id = Some(super::task_id_arg(id)?);
        }
        if let Some(c) = &self.context {
            task.context = Some(
                serde_json::from_str(c)
                    .map_err(|e| CliError::Usage(format!("--context is not valid JSON: {e}")))?,
            );
        }
        task.timeout_secs = self.timeout.map(super::whole_secs);
        task.agent = self.agent_preset.map(|p| p.to_string());
        self.worktree.apply(&mut task);
        task.model = self.model.clone();
        task.max_budget_usd = self.max_budget_usd;
        self.env_labels.apply(&mut task);
        task.allowed_tools = self.allowed_tools.as_deref().map(crate::preset::tool_list);
        task.permission_mode = self.permission_mode.clone();
        task.validate()
            .map_err(|reason| crate::Error::InvalidTask { reason })?;
        Ok(task)
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Worker slot to deliver to.
    #[arg(value_parser = parse_slot)]
    pub slot: Slot,
    #[command(flatten)]
    pub task: TaskArgs,
    /// Wait for the result and print its output.
    ///
    /// Exit 1 if the task failed, 4 if no live worker serves the slot or its worker dies
    /// and nobody recovers the task.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: stop waiting after this long.
    ///
    /// Exit 1; the task carries on. Seconds or a duration (`90s`, `5m`, `1h`). Default:
    /// until the task ends.
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = super::parse_duration_arg,
          help_heading = help::WAITING, hide_short_help = true)]
    pub wait_timeout: Option<Duration>,
    /// Print the result as JSON (with --wait).
    #[arg(long, requires = "wait")]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

/// The prompt from the argument, a file, or stdin (`-`).
pub fn read_prompt(prompt: Option<String>, file: Option<&PathBuf>) -> anyhow::Result<String> {
    match (prompt, file) {
        (Some(p), _) => Ok(p),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| CliError::Usage(format!("cannot read the prompt from stdin: {e}")))?;
            Ok(s)
        }
        // Bad input (exit 2), naming the file and what is wrong with it.
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| {
            CliError::Usage(format!("cannot read the prompt from {}: {e}", f.display())).into()
        }),
        (None, None) => anyhow::bail!(CliError::Usage("give a prompt or -f FILE".into())),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let mut task = args.task.task()?;
    crate::env::stamp_depth(&mut task)?;
    check_worktree_dir(&task, None)?;
    let slot = args.slot;
    let id = client.write_task(slot, &task)?;
    let paused = crate::queue::pause::Paused::load(client.root());
    use crate::queue::pause::Target;
    let held = if paused.all() {
        Some(("everything is paused".to_string(), Target::All))
    } else if paused.slot(slot.0) {
        Some((format!("worker {slot} is paused"), Target::Slot(slot.0)))
    } else {
        let key = task.key.clone().unwrap_or_default();
        paused
            .task_reason(task.key.as_deref(), None)
            .map(|why| (why, Target::Key(key)))
    };
    if let Some((why, target)) = held {
        let hint = super::pause::resume_hint(&[target.to_string()]);
        eprintln!("{why}: task {id} waits in its inbox and runs once resumed (`{hint}`)");
    }
    if !args.wait {
        super::waiting::warn_if_unserved_slot(client.root(), slot);
        super::emit(&format!("{id}\n"))?;
        return Ok(exit::OK);
    }
    eprintln!(
        "sent task {id} to worker {slot}; waiting for its result (Ctrl-C stops waiting, not the task)"
    );
    let carries_on = format!(
        "task {id} carries on (`conductor wait {slot} {id}`, or `conductor cancel {slot}`)"
    );
    super::waiting::finish(
        args.wait_timeout,
        args.json,
        &carries_on,
        |on_death, left| client.wait_for_result_with(slot, &id, left, on_death),
    )
}
