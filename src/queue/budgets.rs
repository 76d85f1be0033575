//! Daily budgets held against the queue: why a task of a group (or of the root) may not
//! start today, and today's spend against each budget — reading the groups' budgets, so
//! it lives with them rather than in [`crate::budget`], the spend ledger.

use crate::budget::{spent_today, usd};
use crate::config::Config;
use crate::layout::Root;

/// Why no new task of `group` (or of the root, when its own budget is spent) may start
/// today, if none may: "daily budget spent ($0.0375 of $0.0100 today)".
pub fn hold_reason(root: &Root, config: &Config, group: Option<&str>) -> Option<String> {
    let group_budget = group.and_then(|g| {
        let b = super::groups::read(root, g)
            .ok()
            .flatten()?
            .daily_budget_usd?;
        Some((g, b))
    });
    if config.daily_budget_usd.is_none() && group_budget.is_none() {
        return None;
    }
    let spent = spent_today(root);
    if let Some(b) = config.daily_budget_usd.filter(|b| spent.total >= *b) {
        return Some(format!(
            "daily budget spent ({} of {} today; raise dailyBudgetUsd in config.json)",
            usd(spent.total),
            usd(b)
        ));
    }
    let (g, b) = group_budget?;
    (spent.group(g) >= b).then(|| {
        format!(
            "group {g}'s daily budget spent ({} of {} today; \
             conductor group set {g} --daily-budget-usd N)",
            usd(spent.group(g)),
            usd(b)
        )
    })
}

/// Today's spend against each budget set, for `tasks --summary`: the root's, then each
/// group's with a budget or a spend.
pub fn report(root: &Root, config: &Config) -> Vec<(String, f64, Option<f64>)> {
    let spent = spent_today(root);
    let mut out = vec![("root".to_string(), spent.total, config.daily_budget_usd)];
    for g in super::groups::list(root).unwrap_or_default() {
        let s = spent.group(&g.name);
        if s > 0.0 || g.daily_budget_usd.is_some() {
            out.push((format!("group {}", g.name), s, g.daily_budget_usd));
        }
    }
    out
}
