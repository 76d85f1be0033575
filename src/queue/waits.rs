//! Why a task waits for something root-wide: a pause, its agent's usage limit, a spent
//! daily budget, its group's cap.

use crate::config::Config;
use crate::layout::Root;
use crate::protocol::Task;

use super::{groups, limits, pause};

/// Why task `t` waits for something root-wide, if it does: a pause (of everything, of
/// `slot` when it is in a slot's inbox, of its key or group), its agent's usage limit,
/// the root's or its group's daily budget spent, its group's cap. `paused` and `config`
/// are the caller's one read of them.
pub(crate) fn root_wide_wait(
    root: &Root,
    t: &Task,
    slot: Option<u32>,
    paused: &pause::Paused,
    config: &Config,
) -> Option<String> {
    let slot_paused = slot
        .filter(|&s| paused.slot(s))
        .map(|s| format!("paused (slot {s})"));
    paused
        .task_reason(t.key.as_deref(), t.group.as_deref())
        .or(slot_paused)
        .or_else(|| limits::waiting_reason(root, t.not_before(), t.agent.as_deref()))
        .or_else(|| crate::budget::hold_reason(root, config, t.group.as_deref()))
        .or_else(|| groups::full(root, t.group.as_deref()?, &config.lock_options()))
}
