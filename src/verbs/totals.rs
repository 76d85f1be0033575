//! The `totals` verb (`conductor tasks --summary`, the MCP `totals` tool): counts, costs, turns and run time of some tasks, overall and by key, group, agent and day, with today's spend against the budgets.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tasks::{TaskState, TaskSummary};

/// The totals of some tasks.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// What they share: the key, the agent or the day (`-` for none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// How many tasks.
    pub tasks: usize,
    /// How many succeeded.
    pub done: usize,
    /// Ended any other way (failed, timed out, cancelled, interrupted, rejected).
    pub failed: usize,
    /// Not finished yet (waiting, queued, running).
    pub unfinished: usize,
    /// What they cost, in US dollars, as the agents reported.
    pub cost_usd: f64,
    /// How many turns the agents took.
    pub turns: u64,
    /// How long they ran, in milliseconds.
    pub run_ms: u64,
}

impl Totals {
    fn add(&mut self, t: &TaskSummary) {
        self.tasks += 1;
        match t.state {
            TaskState::Done => self.done += 1,
            s if s.is_finished() => self.failed += 1,
            _ => self.unfinished += 1,
        }
        self.cost_usd += t.cost_usd.unwrap_or(0.0);
        self.turns += t.num_turns.unwrap_or(0);
        self.run_ms += t.duration_ms.unwrap_or(0);
    }
}

/// The totals of a set of tasks, whole and by key, group, agent and day.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// All of them.
    pub total: Totals,
    /// By serialization key.
    pub by_key: Vec<Totals>,
    /// By group.
    pub by_group: Vec<Totals>,
    /// By agent.
    pub by_agent: Vec<Totals>,
    /// By day.
    pub by_day: Vec<Totals>,
    /// Today's spend against each daily budget (the root's, then groups').
    pub budgets: Vec<BudgetUse>,
}

/// Today's spend of the root or a group, and its daily budget if it has one.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetUse {
    /// `root`, or `group NAME`.
    pub name: String,
    /// Spent today, in US dollars.
    pub spent_today_usd: f64,
    /// The daily budget, when one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_budget_usd: Option<f64>,
}

/// [`of`] the tasks, with `root`'s spend today against its budgets.
pub fn of_root(root: &crate::Root, tasks: &[TaskSummary]) -> Summary {
    let mut s = of(tasks);
    s.budgets = budgets(root);
    s
}

/// Today's spend against the budgets (from the spend ledger).
pub fn budgets(root: &crate::Root) -> Vec<BudgetUse> {
    let config = crate::config::Config::load(&root.config_file()).unwrap_or_default();
    crate::queue::budgets::report(root, &config)
        .into_iter()
        .map(|(name, spent, budget)| BudgetUse {
            name,
            spent_today_usd: spent,
            daily_budget_usd: budget,
        })
        .collect()
}

/// The totals of `tasks`, overall and by key, group, agent and day (no budgets).
pub fn of(tasks: &[TaskSummary]) -> Summary {
    let mut total = Totals::default();
    let mut by: [BTreeMap<String, Totals>; 4] = Default::default();
    for t in tasks {
        total.add(t);
        let day = t
            .finished_at
            .as_deref()
            .unwrap_or(&t.submitted_at)
            .get(..10)
            .unwrap_or("-")
            .to_string();
        let names = [
            t.key.clone().unwrap_or_else(|| "-".into()),
            t.group.clone().unwrap_or_else(|| "-".into()),
            t.agent.clone().unwrap_or_else(|| "-".into()),
            day,
        ];
        for (map, name) in by.iter_mut().zip(names) {
            let e = map.entry(name.clone()).or_default();
            e.name = name;
            e.add(t);
        }
    }
    let [k, g, a, d] = by.map(|m| m.into_values().collect::<Vec<_>>());
    Summary {
        total,
        by_key: k,
        by_group: g,
        by_agent: a,
        by_day: d,
        budgets: Vec::new(),
    }
}
