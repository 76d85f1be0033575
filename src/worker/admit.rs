//! Admitting a task: the shared locks it needs beside the slot's own `.lock`.

use crate::dirlock::{Acquire, DirLock};
use crate::error::Result;
use crate::queue;

use super::slot_server::Shared;

/// The shared locks a task holds besides the slot's own `.lock`; released by drop.
pub(crate) struct Hold {
    pub key_lock: Option<DirLock>,
    pub run_slot: Option<DirLock>,
    /// One of its group's run slots, when it has a group.
    pub group_slot: Option<DirLock>,
    /// The port lock of a worktree task (config.json `portRange`), taken as it starts.
    pub port: Option<DirLock>,
    /// Came from the shared queue: its result is also linked into `queue/results/`.
    pub queued: bool,
}

impl Hold {
    /// Every lock the task holds beside its slot's.
    pub fn locks(&self) -> impl Iterator<Item = &DirLock> {
        [
            self.key_lock.as_ref(),
            self.run_slot.as_ref(),
            self.group_slot.as_ref(),
            self.port.as_ref(),
        ]
        .into_iter()
        .flatten()
    }

    /// Let go of the root's and the group's run slot (the agent has ended): a release
    /// that fails is logged (recovery judges the lock by its owner, as any).
    pub fn let_go_of_run_slots(&mut self) {
        for lock in [self.run_slot.take(), self.group_slot.take()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = lock.release() {
                tracing::warn!("letting go of a run slot: {e}");
            }
        }
    }

    /// Every lock the task holds, for heartbeats.
    pub fn locks_mut(&mut self) -> impl Iterator<Item = &mut DirLock> {
        [
            self.key_lock.as_mut(),
            self.run_slot.as_mut(),
            self.group_slot.as_mut(),
            self.port.as_mut(),
        ]
        .into_iter()
        .flatten()
    }
}

/// Take what an inbox task needs to run now: no pause of its key or group, no spent
/// daily budget (the root's or its group's), a run slot
/// under the root's cap (direct deliveries count too), its key's lock (one running task
/// per key holds for direct deliveries too) and one of its group's run slots. `None`:
/// it must wait in the inbox.
pub(crate) fn admit_inbox_task(
    shared: &Shared,
    paused: &queue::pause::Paused,
    key: Option<&str>,
    group: Option<&str>,
) -> Result<Option<Hold>> {
    let budget = || crate::queue::budgets::hold_reason(&shared.opts.root, &shared.config, group);
    if let Some(why) = paused.task_reason(key, group).or_else(budget) {
        tracing::debug!("task waits in the inbox: {why}");
        return Ok(None);
    }
    let run_slot = match queue::take_run_slot(&shared.opts.root, &shared.config)? {
        queue::RunSlot::Uncapped => None,
        queue::RunSlot::Held(l) => Some(*l),
        queue::RunSlot::AllBusy(why) => {
            tracing::debug!("task waits in the inbox: {why}");
            return Ok(None);
        }
    };
    let key_lock = match (key, shared.config.per_key_serialization()) {
        (Some(k), true) => {
            match DirLock::try_acquire(&shared.opts.root.key_lock(k), &shared.lock_opts)? {
                Acquire::Acquired(l) => Some(l),
                Acquire::Held(_) => {
                    tracing::debug!("task waits in the inbox: key {k} is busy");
                    return Ok(None);
                }
            }
        }
        _ => None,
    };
    let group_slot = match group {
        Some(g) => match queue::groups::take_slot(&shared.opts.root, g, &shared.lock_opts)? {
            queue::groups::GroupSlot::Held(l) => Some(*l),
            queue::groups::GroupSlot::Full(why) | queue::groups::GroupSlot::Unknown(why) => {
                tracing::debug!("task waits in the inbox: {why}");
                return Ok(None);
            }
        },
        None => None,
    };
    Ok(Some(Hold {
        key_lock,
        run_slot,
        group_slot,
        port: None,
        // Whatever its file says: only a task claimed from queue/pending is queued.
        queued: false,
    }))
}
