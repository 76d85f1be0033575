//! `--until CMD` / `--until-rounds N`: a task run until its check passes, in rounds of one session.

use crate::protocol::{Task, Until};

use super::help;

/// `--until`, `--until-rounds`: shared by `run`, `send` and `submit`, with the worktree flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UntilArgs {
    /// Run until CMD passes: after the agent, CMD runs in its worktree; while it fails, the session goes on.
    ///
    /// CMD runs with `sh -c` in the task's worktree (else its directory), with the task's
    /// environment (CONDUCTOR_PORT …), after each round. While it fails, the same agent
    /// session continues (claude, codex, gemini resume it; another preset starts afresh
    /// in the same worktree), its next prompt the end of CMD's output, up to
    /// --until-rounds rounds. The result says `rounds` and the check's last verdict
    /// (`check`); a check that never passed fails the task, its branch kept for review.
    #[arg(long, value_name = "CMD", help_heading = help::WORKTREE, hide_short_help = true)]
    pub until: Option<String>,
    /// With --until: at most N rounds in all [default: 3].
    #[arg(long, value_name = "N", requires = "until", help_heading = help::WORKTREE,
          hide_short_help = true)]
    pub until_rounds: Option<u32>,
}

impl UntilArgs {
    /// Set the task's `until` (left alone without --until).
    pub fn apply(&self, task: &mut Task) {
        if let Some(check) = &self.until {
            task.until = Some(Until {
                check: check.clone(),
                rounds: self.until_rounds,
            });
        }
    }
}
