//! Doctor checks of what processes left behind: stale locks, dead workers, orphaned tasks.

use crate::inspect::{self, Flag, LockStatus};
use crate::layout::Root;

use super::check::Check;

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

/// Whether another host's clock is minutes off: a lock record dated far from the time
/// its lock directory was changed (key and run-slot locks, slot locks, gate leases).
/// Leases are judged by what a process sees change, so skew is no danger to them, but
/// times shown for that host are off by as much.
pub(super) fn check_clocks(root: &Root) -> Check {
    use crate::dirlock::{read_lock, visible_skew, OwnerRead};
    let mut locks = Vec::new();
    for dir in [root.keys_dir(), root.slots_dir(), root.groups_dir()] {
        for (name, path, _) in crate::fsio::sorted_entries(&dir).unwrap_or_default() {
            if name.ends_with(".lock") {
                locks.push(path);
            }
        }
    }
    for slot in root.slots().unwrap_or_default() {
        let w = root.worker(slot);
        locks.push(w.lock_dir());
        locks.push(crate::gate::lease_path(&w.worker_gate()));
    }
    let mut skewed = Vec::new();
    for path in locks {
        let Ok(Some(read)) = read_lock(&path) else {
            continue;
        };
        if let OwnerRead::Valid(o) = &read.owner {
            if let Some(skew) = visible_skew(o, read.modified) {
                skewed.push(format!(
                    "host {}: {}s {} ({})",
                    o.host,
                    skew.unsigned_abs(),
                    if skew > 0 { "ahead" } else { "behind" },
                    path.display()
                ));
            }
        }
    }
    if skewed.is_empty() {
        Check::ok("clocks", "no lock record is dated far from its file's time")
    } else {
        Check::warn(
            "clocks",
            format!("clock skew seen in lock records: {}", skewed.join("; ")),
            "run NTP (chrony, systemd-timesyncd) on every host of the root; leases are judged \
             by what each process sees change, so nothing is taken over early, but times shown \
             for that host are off",
        )
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
