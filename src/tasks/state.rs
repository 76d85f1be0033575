//! `TaskState`: where a task is in its life (waiting, queued, running, finished, …),
//! shown and parsed by its name.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::protocol::{Outcome, TaskResult};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// In a slot's inbox (`task.json`), not yet claimed.
    Waiting,
    /// In the shared queue (`queue/pending/`), not yet claimed.
    Queued,
    /// Claimed: in some slot's `running.json`. Its word is `working`, as `status.json`
    /// and the MCP Tasks specification say it (the one word every view and filter uses;
    /// `running` is taken as an alias in filters).
    #[serde(rename = "working")]
    Running,
    /// Running, and its agent waits for a person to allow a tool call
    /// (`conductor approve|deny`, see [`crate::approval`]). Only listings say it: [`find`](super::find)
    /// reports such a task `Running`, which is what it is to every other command.
    #[serde(rename = "needs approval")]
    NeedsApproval,
    /// Ended: its agent succeeded.
    Done,
    /// Ended: its agent failed.
    Failed,
    /// Ended: it ran past its time limit and was stopped.
    Timeout,
    /// Ended: cancelled before or while it ran.
    Cancelled,
    /// Ended: its worker died or was stopped while it ran.
    Interrupted,
    /// Ended: refused without running (a malformed `task.json`, quarantined with the
    /// reason, or a task its worker may not run).
    Rejected,
    /// Registered, but no file shows it any more (collected by gc, or removed by hand).
    Gone,
    /// Ended, but its result file is damaged (cut short, not JSON): the answer is lost;
    /// `doctor` names the file.
    Damaged,
}

impl TaskState {
    /// Every state, in the order listings explain them.
    pub const ALL: [TaskState; 12] = [
        TaskState::Waiting,
        TaskState::Queued,
        TaskState::Running,
        TaskState::NeedsApproval,
        TaskState::Done,
        TaskState::Failed,
        TaskState::Timeout,
        TaskState::Cancelled,
        TaskState::Interrupted,
        TaskState::Rejected,
        TaskState::Gone,
        TaskState::Damaged,
    ];

    /// The state a result tells of.
    pub fn of_result(r: &TaskResult) -> TaskState {
        match r.outcome {
            Some(Outcome::Success) => TaskState::Done,
            Some(Outcome::Failure) => TaskState::Failed,
            Some(Outcome::Timeout) => TaskState::Timeout,
            Some(Outcome::Cancelled) => TaskState::Cancelled,
            Some(Outcome::Interrupted) => TaskState::Interrupted,
            Some(Outcome::Rejected) => TaskState::Rejected,
            // Results of original workers carry only `success`.
            None if r.success => TaskState::Done,
            None => TaskState::Failed,
        }
    }

    /// The task has its result (or had one: gone).
    pub fn is_finished(self) -> bool {
        !matches!(
            self,
            TaskState::Waiting | TaskState::Queued | TaskState::Running | TaskState::NeedsApproval
        )
    }

    /// The state's word, as every view and filter says it (`working` for `Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Queued => "queued",
            TaskState::Running => "working",
            TaskState::NeedsApproval => "needs approval",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
            TaskState::Timeout => "timeout",
            TaskState::Cancelled => "cancelled",
            TaskState::Interrupted => "interrupted",
            TaskState::Rejected => "rejected",
            TaskState::Gone => "gone",
            TaskState::Damaged => "damaged",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<TaskState, String> {
        // One word on a command line: `--state needs-approval`.
        if matches!(s, "needs-approval" | "needs_approval" | "approval") {
            return Ok(TaskState::NeedsApproval);
        }
        // The word `tasks` and `--state` said before `working` was the only one.
        if s == "running" {
            return Ok(TaskState::Running);
        }
        TaskState::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = TaskState::ALL.iter().map(|t| t.as_str()).collect();
                let near = names
                    .iter()
                    .chain(&["running", "needs-approval"])
                    .map(|n| (crate::text::edit_distance(s, n), *n))
                    .min()
                    .filter(|(d, _)| *d <= 2)
                    .map(|(_, n)| format!("did you mean {n:?}? "))
                    .unwrap_or_default();
                format!(
                    "unknown task state {s:?}; {near}one of {}",
                    names.join(", ")
                )
            })
    }
}
