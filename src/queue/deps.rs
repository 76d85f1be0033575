//! Dependencies between queued tasks (`after`): when a waiting task may run, and which
//! failed dependency cancels it (docs/ARCHITECTURE.md, "Dependencies").
//!
//! Nothing waits actively: a dependent stays in `queue/pending/` holding no worker, lock
//! or run slot, and is looked at again whenever a worker scans the queue (after every
//! task it finishes, on queue events, every rescan). Each look costs, per dependency,
//! one id-registry read and one result read; the verdict is the pure
//! [`dependency_state`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::ids::{self, Place};
use crate::layout::Root;
use crate::protocol::{Task, TaskId, TaskResult};

/// What is known of one dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepState {
    /// Registered, no result yet (pending, running, or about to be re-run).
    Unfinished,
    /// Its result says it succeeded.
    Succeeded,
    /// Its result says it did not (failure, timeout, cancelled, interrupted for good,
    /// rejected): results are final, a re-run is requeued before any result is written.
    Failed,
    /// Its result says it was cancelled, and why (another dependency's failure, down a
    /// chain): named, so a dependent's reason leads to the root cause.
    Cancelled(String),
    /// It has a result that cannot be read (the reason).
    Unreadable(String),
    /// Sent to a slot, but neither waiting there, nor in hand, nor finished: its result
    /// was removed (by hand, or by a gc older than this rule), so it will never succeed.
    Gone,
}

/// Whether a task with dependencies may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every dependency succeeded.
    Ready,
    /// These dependencies have not finished yet.
    Wait(Vec<TaskId>),
    /// This dependency will never succeed: the dependent ends `cancelled` with `reason`.
    Failed { dependency: TaskId, reason: String },
}

/// The verdict for a task from what is known of its dependencies: the first one that
/// can never succeed decides (even while others still run: waiting would change
/// nothing); else any unfinished one makes it wait; else it is ready.
pub fn dependency_state(deps: &[(TaskId, DepState)]) -> Readiness {
    let mut unfinished = Vec::new();
    for (id, state) in deps {
        let reason = match state {
            DepState::Succeeded => continue,
            DepState::Unfinished => {
                unfinished.push(id.clone());
                continue;
            }
            DepState::Failed => format!("dependency {id} failed"),
            DepState::Cancelled(why) => format!("dependency {id} was cancelled ({why})"),
            DepState::Unreadable(why) => format!("dependency {id} failed: {why}"),
            DepState::Gone => format!(
                "dependency {id} has no result any more (removed) and is neither waiting nor \
                 running, so it will never succeed"
            ),
        };
        return Readiness::Failed {
            dependency: id.clone(),
            reason,
        };
    }
    if unfinished.is_empty() {
        Readiness::Ready
    } else {
        Readiness::Wait(unfinished)
    }
}

/// What is known of dependency `id` now: one registry read, one result read.
///
/// Submit refused unknown dependencies, so a registry entry missing now was lost (its
/// entry is not fsynced: a power loss) or cannot be read right now (a torn entry, no
/// file descriptors left): the dependency's own files still decide when a worker
/// claims it and registers it again, so the dependent waits rather than ending for good.
pub fn dep_state(root: &Root, id: &TaskId) -> DepState {
    let place = match ids::lookup(root, id) {
        Ok(Some(p)) => p,
        Ok(None) => return DepState::Unfinished,
        Err(e) => {
            tracing::debug!("dependency {id}: {e}; looking again later");
            return DepState::Unfinished;
        }
    };
    let path = match place {
        Place::Queue => root.queue_results().join(format!("{id}.json")),
        Place::Worker(slot) => root.worker(slot).result_for(id),
    };
    match TaskResult::read(&path) {
        Ok(None) => match place {
            Place::Worker(slot)
                if registered_for(root, id) > GONE_AFTER && !in_slot(root, slot, id) =>
            {
                DepState::Gone
            }
            _ => DepState::Unfinished,
        },
        Ok(Some(r)) if r.success => DepState::Succeeded,
        Ok(Some(r)) => match (r.outcome, r.error) {
            (Some(crate::protocol::Outcome::Cancelled), Some(why)) if !why.is_empty() => {
                DepState::Cancelled(why)
            }
            _ => DepState::Failed,
        },
        Err(e) => DepState::Unreadable(e.to_string()),
    }
}

/// How long an id must have been registered before its missing files mean it is gone:
/// a send registers the id a moment before its task file lands in the inbox.
const GONE_AFTER: Duration = Duration::from_secs(10);

/// How long ago `id`'s registry entry was written (zero if that cannot be told).
fn registered_for(root: &Root, id: &TaskId) -> Duration {
    std::fs::metadata(root.id_entry(id))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default()
}

/// Whether `slot` still has task `id` waiting or in hand, or has finished it: read in
/// the order a task moves (inbox, `running.json`, result), so one moving meanwhile is
/// seen in its next place.
fn in_slot(root: &Root, slot: crate::layout::Slot, id: &TaskId) -> bool {
    let w = root.worker(slot);
    let holds = |p: &std::path::Path| Task::file_holds(p, id);
    holds(&w.task()) || holds(&w.running()) || w.result_for(id).exists()
}

/// The verdict for `task`'s dependencies as they stand now.
pub fn readiness(root: &Root, task: &Task) -> Readiness {
    let states: Vec<(TaskId, DepState)> = task
        .after
        .iter()
        .map(|d| (d.clone(), dep_state(root, d)))
        .collect();
    dependency_state(&states)
}

/// At submit: every dependency must already be registered. Checked *before* the task's
/// own id is reserved, which is what makes a cycle impossible: of two tasks each naming
/// the other, the one submitted first finds the other unregistered. (A task naming
/// itself is refused by [`Task::validate`].)
pub fn check_known(root: &Root, task: &Task, id: &TaskId) -> Result<()> {
    for dep in &task.after {
        if ids::lookup(root, dep)?.is_none() {
            return Err(Error::UnknownDependency {
                task: id.to_string(),
                dependency: dep.to_string(),
                path: root.id_entry(dep),
            });
        }
        check_not_gone(root, dep, id)?;
    }
    Ok(())
}

/// At submit, a dependency sent to a slot and gone from it (the rule of [`DepState::Gone`])
/// is refused at once rather than cancelling its dependent at some later scan. One
/// registered under [`GONE_AFTER`] ago may be a send between its registration and its
/// file landing: it is looked at again until it shows there or that time has passed.
fn check_not_gone(root: &Root, dep: &TaskId, id: &TaskId) -> Result<()> {
    let Some(Place::Worker(slot)) = ids::lookup(root, dep)? else {
        return Ok(());
    };
    let deadline = std::time::Instant::now() + GONE_AFTER.saturating_sub(registered_for(root, dep));
    loop {
        if in_slot(root, slot, dep) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::DependencyGone {
                task: id.to_string(),
                dependency: dep.to_string(),
                slot: slot.0,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(states: &[(&str, DepState)]) -> Vec<(TaskId, DepState)> {
        states
            .iter()
            .map(|(id, s)| (TaskId::from(*id), s.clone()))
            .collect()
    }

    #[test]
    fn no_dependencies_or_all_succeeded_is_ready() {
        assert_eq!(dependency_state(&[]), Readiness::Ready);
        let all = deps(&[("a", DepState::Succeeded), ("b", DepState::Succeeded)]);
        assert_eq!(dependency_state(&all), Readiness::Ready);
    }

    #[test]
    fn unfinished_dependencies_are_waited_for_and_named() {
        let d = deps(&[
            ("a", DepState::Unfinished),
            ("b", DepState::Succeeded),
            ("c", DepState::Unfinished),
        ]);
        assert_eq!(
            dependency_state(&d),
            Readiness::Wait(vec![TaskId::from("a"), TaskId::from("c")])
        );
    }

    #[test]
    fn one_failed_dependency_decides_even_while_others_run() {
        let d = deps(&[
            ("a", DepState::Unfinished),
            ("b", DepState::Failed),
            ("c", DepState::Gone),
        ]);
        assert_eq!(
            dependency_state(&d),
            Readiness::Failed {
                dependency: TaskId::from("b"),
                reason: "dependency b failed".into()
            }
        );
        let broken = deps(&[("y", DepState::Unreadable("is empty".into()))]);
        assert!(matches!(
            dependency_state(&broken),
            Readiness::Failed { reason, .. } if reason == "dependency y failed: is empty"
        ));
    }

    #[test]
    fn a_missing_or_torn_registry_entry_makes_a_dependent_wait() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        super::super::init_root(&root).unwrap();
        let id = TaskId::from("dep");
        assert_eq!(dep_state(&root, &id), DepState::Unfinished, "no entry");
        std::fs::write(root.id_entry(&id), b"").unwrap();
        assert_eq!(dep_state(&root, &id), DepState::Unfinished, "a torn entry");
    }
}
