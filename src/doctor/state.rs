//! Doctor checks of what processes left behind: stale locks, dead workers, orphaned tasks.

use crate::inspect::{self, Flag, LockStatus};
use crate::layout::Root;

use super::Check;

pub(super) fn check_locks(root: &Root) -> Check {
    let opts = inspect::lock_options(root);
    match inspect::list_locks(root, &opts) {
        Err(e) => Check::fail("locks", e.to_string(), "check the root's permissions"),
        Ok(locks) => {
            let stale: Vec<String> = locks
                .iter()
                .filter(|l| l.status == LockStatus::Stale)
                .map(|l| format!("{} {} ({})", l.kind, l.name, l.reason))
                .collect();
            if stale.is_empty() {
                Check::ok(
                    "locks",
                    format!("{} locks and gates, none stale", locks.len()),
                )
            } else {
                Check::warn(
                    "locks",
                    format!("{} stale: {}", stale.len(), stale.join("; ")),
                    "`conductor locks clean --apply` (workers also clear their own on start)",
                )
            }
        }
    }
}

pub(super) fn check_slots(root: &Root) -> Check {
    match inspect::slot_reports(root, None) {
        Err(e) => Check::fail("slots", e.to_string(), "check the root's permissions"),
        Ok(reports) => {
            let mut trouble = Vec::new();
            let mut fixes = Vec::new();
            for r in &reports {
                let serious: Vec<String> = r
                    .flags
                    .iter()
                    .filter(|f| matches!(f, Flag::DeadWorker | Flag::OrphanedTask))
                    .map(|f| f.to_string())
                    .collect();
                if !serious.is_empty() {
                    trouble.push(format!("worker {}: {}", r.slot, serious.join(", ")));
                    fixes.push(format!("conductor recover {}", r.slot));
                }
            }
            let live = reports.iter().filter(|r| r.worker_live).count();
            if trouble.is_empty() {
                Check::ok(
                    "slots",
                    format!("{} slots, {live} served by a live worker", reports.len()),
                )
            } else {
                Check::warn(
                    "slots",
                    trouble.join("; "),
                    format!("restart their workers or run `{}`", fixes.join("`, `")),
                )
            }
        }
    }
}
