//! Checks of a task's fields about how its run is made: its worktree's base, its budget.

use super::Task;

impl Task {
    /// `base` names a commit or ref; `maxBudgetUsd` is a positive amount.
    pub(super) fn validate_run_fields(&self) -> std::result::Result<(), String> {
        if let Some(b) = &self.base {
            if b.is_empty()
                || b.starts_with('-')
                || b.len() > 256
                || b.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(format!("base {b:?} is not a git commit or ref name"));
            }
        }
        crate::budget::check_usd("maxBudgetUsd", self.max_budget_usd)
    }
}
