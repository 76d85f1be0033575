//! A process group recorded for a task (its agent's, its callback's): verified to be
//! still the one started for it before it is signalled, and watched until it is gone.

use std::time::{Duration, Instant};

use super::decide::{leftover_agent_is_ours, ProcFacts};
use crate::agent;
use crate::procfs;
use crate::protocol::TaskId;

/// What is alive of group `pgid` recorded (with its leader's start time) for task `id`.
pub(super) enum Found {
    /// Nothing lives in the group.
    Gone,
    /// It lives and is the group started for the task: ours to signal.
    Ours,
    /// Something lives under that id that is not the task's (a reused pid).
    Stranger,
}

/// Whether group `pgid` is still the one recorded for task `id` (see
/// [`leftover_agent_is_ours`]: start time, our uid, the task's marker).
pub(super) fn find(pgid: u32, recorded_start: Option<u64>, id: &TaskId) -> Found {
    let marker = agent::task_marker(&id.to_string());
    let facts = |p: u32, start_time: u64| ProcFacts {
        start_time: Some(start_time),
        uid: procfs::uid(p),
        has_marker: procfs::environ_has(p, &marker),
    };
    let table = procfs::snapshot();
    let leader = table
        .get(&pgid)
        .filter(|s| !s.is_zombie())
        .map(|s| facts(pgid, s.start_time));
    let members: Vec<ProcFacts> = table
        .iter()
        .filter(|(p, s)| **p != pgid && s.pgrp == pgid && !s.is_zombie())
        .map(|(p, s)| facts(*p, s.start_time))
        .collect();
    let own_uid = nix::unistd::getuid().as_raw();
    if leftover_agent_is_ours(recorded_start, own_uid, leader, &members) {
        Found::Ours
    } else if leader.is_some() || !members.is_empty() {
        Found::Stranger
    } else {
        Found::Gone
    }
}

/// Wait until nothing of group `pgid` lives, at most `bound`; whether it is gone. Not
/// our children, so there is no wait(): watched in the process table.
pub(super) fn wait_gone(pgid: u32, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let gone = || {
        procfs::snapshot()
            .values()
            .all(|s| s.pgrp != pgid || s.is_zombie())
    };
    loop {
        if gone() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
