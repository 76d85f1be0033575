//! "Budget reached": noticed where a finished task's cost is counted, marked once a day per budget (`spend/<day>.reached.*.json`), told to `budgetCallback`.
//!
//! The mark is created without replacing, so of every worker that counts a cost past
//! the same budget on the same day exactly one tells of it. The marks are also what
//! `conductor wait --any` and the MCP server watch for.

use std::path::PathBuf;

use super::Event;
use crate::budget::{spent_today, today};
use crate::config::Config;
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::{rfc3339, TaskId};

/// Mark's file-name prefix after the day: `spend/2026-11-29.reached.root.json`,
/// `spend/2026-11-29.reached.group.<name>.json`.
const MARK: &str = ".reached.";

fn mark_path(root: &Root, day: &str, group: Option<&str>) -> PathBuf {
    let what = match group {
        Some(g) => format!("group.{g}"),
        None => "root".to_string(),
    };
    root.spend_dir().join(format!("{day}{MARK}{what}.json"))
}

/// After task `id` (of `group`) had its cost counted: mark and tell each daily budget
/// (the root's, its group's) that this spend reached, once a day each. Failures are
/// logged: a lost mark loses a notice, never work. The hook is recorded in `slot`, the
/// slot whose task it was, until reaped.
pub fn after_spend(root: &Root, slot: &WorkerPaths, id: &TaskId, group: Option<&str>) {
    let config = match Config::load(&root.config_file()) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("no budget notice: {e}");
            return;
        }
    };
    let group_budget = group.and_then(|g| {
        let b = crate::queue::groups::read(root, g)
            .ok()
            .flatten()?
            .daily_budget_usd?;
        Some((g, b))
    });
    if config.daily_budget_usd.is_none() && group_budget.is_none() {
        return;
    }
    let spent = spent_today(root);
    let day = today();
    let mut reached = Vec::new();
    if let Some(b) = config.daily_budget_usd.filter(|b| spent.total >= *b) {
        reached.push((None, spent.total, b));
    }
    if let Some((g, b)) = group_budget.filter(|(g, b)| spent.group(g) >= *b) {
        reached.push((Some(g), spent.group(g), b));
    }
    for (group, spent_usd, budget_usd) in reached {
        let event = Event::BudgetReached {
            budget: if group.is_some() { "group" } else { "root" }.to_string(),
            group: group.map(str::to_string),
            spent_usd,
            budget_usd,
            task_id: id.clone(),
            day: day.clone(),
            at: rfc3339(std::time::SystemTime::now()),
        };
        let path = mark_path(root, &day, group);
        match fsio::write_new(&path, &fsio::to_json_bytes(&event), Durability::Atomic) {
            Ok(()) => {
                tracing::warn!("{}", event.describe());
                super::tell(&config, root, slot, &event);
            }
            Err(e) if e.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => {}
            Err(e) => tracing::warn!("budget notice not marked: {e}"),
        }
    }
}

/// Today's "budget reached" marks (their paths and events), in file-name order.
pub fn marks_today(root: &Root) -> Vec<(PathBuf, Event)> {
    let prefix = format!("{}{MARK}", today());
    let Ok(entries) = fsio::sorted_entries(&root.spend_dir()) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter(|(name, ..)| name.starts_with(&prefix) && name.ends_with(".json"))
        .filter_map(|(_, path, _)| {
            let e = fsio::read_json(&path, SMALL_FILE_LIMIT).ok().flatten()?;
            Some((path, e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::record;

    #[test]
    fn a_budget_spent_is_marked_and_told_once_a_day_each() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        crate::queue::init_root(&root).unwrap();
        crate::queue::groups::add(&root, "g", 1).unwrap();
        crate::queue::groups::set_budget(&root, "g", Some(0.05)).unwrap();
        let slot = root.worker(crate::layout::Slot(0));
        let told = dir.path().join("told");
        std::fs::write(
            root.config_file(),
            format!(
                r#"{{"dailyBudgetUsd": 1.0, "budgetCallback": "cat >> {}"}}"#,
                told.display()
            ),
        )
        .unwrap();
        record(&root, &TaskId::from("a"), Some("g"), 0.01).unwrap();
        after_spend(&root, &slot, &TaskId::from("a"), Some("g"));
        assert!(marks_today(&root).is_empty());
        record(&root, &TaskId::from("b"), Some("g"), 0.05).unwrap();
        after_spend(&root, &slot, &TaskId::from("b"), Some("g"));
        after_spend(&root, &slot, &TaskId::from("b"), Some("g"));
        let marks: Vec<Event> = marks_today(&root).into_iter().map(|(_, e)| e).collect();
        assert_eq!(marks.len(), 1, "{marks:?}");
        match &marks[0] {
            Event::BudgetReached {
                budget,
                group,
                task_id,
                ..
            } => {
                assert_eq!((budget.as_str(), group.as_deref()), ("group", Some("g")));
                assert_eq!(task_id.to_string(), "b");
            }
            e => panic!("{e:?}"),
        }
        record(&root, &TaskId::from("c"), None, 1.0).unwrap();
        after_spend(&root, &slot, &TaskId::from("c"), None);
        assert_eq!(marks_today(&root).len(), 2);
        // Each mark told its hook once: two lines of JSON.
        let ok = (0..400).any(|_| {
            let n = std::fs::read_to_string(&told)
                .map(|t| t.lines().count())
                .unwrap_or(0);
            n >= 2 || {
                std::thread::sleep(std::time::Duration::from_millis(25));
                false
            }
        });
        assert!(ok, "the hook was not told twice");
        let text = std::fs::read_to_string(&told).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains(r#""event":"budgetReached""#), "{text}");
    }
}
