//! Checks of a task's fields about how its run is made: its worktree's base, its budget,
//! the session it resumes, its model, its `until` check.

use super::task::Task;

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
        check_usd("maxBudgetUsd", self.max_budget_usd)?;
        self.validate_until()
    }

    /// The session resumed and the model: names, never flags.
    pub(super) fn validate_resume_and_model(&self) -> std::result::Result<(), String> {
        if let Some(r) = &self.resume {
            if r.is_empty() || r.starts_with('-') || r.len() > 256 {
                return Err(format!("resume session {r:?} is not a session id"));
            }
        }
        if let Some(m) = &self.model {
            if m.is_empty()
                || m.starts_with('-')
                || m.len() > 256
                || m.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(format!("model {m:?} is not a model name"));
            }
        }
        Ok(())
    }
}

/// Largest budget accepted, in USD.
pub const MAX_BUDGET_USD: f64 = 1_000_000.0;

/// Check a budget field: a positive amount of USD (absent: no budget).
pub fn check_usd(field: &str, usd: Option<f64>) -> std::result::Result<(), String> {
    match usd {
        Some(v) if !(v > 0.0 && v <= MAX_BUDGET_USD) => Err(format!(
            "{field} {v} is out of range: it must be more than 0 and at most {MAX_BUDGET_USD} \
             (USD; leave it out for no budget)"
        )),
        _ => Ok(()),
    }
}
