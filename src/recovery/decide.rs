//! Recovery's decisions, as pure functions of what it read: a leftover task's fate,
//! whether a recorded agent is still ours to kill, whether a slot is abandoned.

use std::time::Duration;

/// What recovery does with the task a dead worker had in hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// Its result is already durable: finish telling about it.
    AnnounceKept,
    /// Another attempt is allowed: back to the queue, or into the slot's inbox.
    Redeliver { to_queue: bool },
    /// It was being deferred (its agent's usage limit): finish putting it back, the
    /// same attempt, to wait for its `notBefore`.
    Defer { to_queue: bool },
    /// A cancel asked for while the worker was dying is honoured.
    Cancelled,
    /// It ends as interrupted.
    Interrupted,
}

/// The facts [`disposition`] judges by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leftover {
    /// `results/<id>.json` exists.
    pub has_result: bool,
    /// The `cancel` file names this task.
    pub cancel_requested: bool,
    /// The attempt that was running and the attempts the task allows; `None` when
    /// `running.json` could not be read as a task (then it cannot be run again).
    pub attempts: Option<(u32, u32)>,
    /// It came from the shared queue.
    pub queued: bool,
    /// Its `notBefore` is still ahead: it was being deferred when the worker died (a
    /// task is never claimed before its `notBefore`, so it did not run since).
    pub deferring: bool,
}

/// Decide a leftover task's fate: a kept result wins, then a cancel, then another
/// attempt when the task allows one, else `interrupted`.
pub fn disposition(l: Leftover) -> Disposition {
    if l.has_result {
        Disposition::AnnounceKept
    } else if l.cancel_requested {
        Disposition::Cancelled
    } else if l.deferring {
        Disposition::Defer { to_queue: l.queued }
    } else if l.attempts.is_some_and(|(attempt, max)| attempt < max) {
        Disposition::Redeliver { to_queue: l.queued }
    } else {
        Disposition::Interrupted
    }
}

/// What recovery can see of one live process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcFacts {
    /// Clock ticks since boot.
    pub start_time: Option<u64>,
    /// Real uid.
    pub uid: Option<u32>,
    /// Its environment holds the task's marker (`CONDUCTOR_TASK_ID=<id>`).
    pub has_marker: bool,
}

/// Whether the group of a recorded agent pid is the agent we started (so it may be
/// killed): its live `leader` must have the recorded start time, our uid and the
/// task's marker. With the leader gone the group id cannot have been reused while
/// members live, yet each live member must still be ours: our uid, the marker, and
/// started no earlier than the leader. Without a recorded start time nothing is trusted.
pub fn leftover_agent_is_ours(
    recorded_start: Option<u64>,
    own_uid: u32,
    leader: Option<ProcFacts>,
    members: &[ProcFacts],
) -> bool {
    let marked = |p: &ProcFacts| p.uid == Some(own_uid) && p.has_marker;
    // Recorded by the agent itself before exec: no start time, but the task's marker
    // (its id, unique on the root) in a process of ours is no reused pid.
    let Some(recorded) = recorded_start else {
        return match leader {
            Some(l) => marked(&l),
            None => !members.is_empty() && members.iter().all(marked),
        };
    };
    match leader {
        Some(l) => l.start_time == Some(recorded) && marked(&l),
        None => {
            !members.is_empty()
                && members
                    .iter()
                    .all(|m| marked(m) && m.start_time.is_some_and(|s| s >= recorded))
        }
    }
}

/// Whether another worker should recover a slot: it has a task in hand and its status
/// has been silent for `after` (`None`: no status file at all).
pub fn is_abandoned(
    has_running: bool,
    status_silent_for: Option<Duration>,
    after: Duration,
) -> bool {
    has_running && status_silent_for.is_none_or(|silent| silent >= after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftover() -> Leftover {
        Leftover {
            has_result: false,
            cancel_requested: false,
            attempts: Some((1, 1)),
            queued: false,
            deferring: false,
        }
    }

    #[test]
    fn a_kept_result_wins_over_everything() {
        let l = Leftover {
            has_result: true,
            cancel_requested: true,
            attempts: Some((1, 3)),
            ..leftover()
        };
        assert_eq!(disposition(l), Disposition::AnnounceKept);
    }

    #[test]
    fn a_cancel_stops_further_attempts() {
        let l = Leftover {
            cancel_requested: true,
            attempts: Some((1, 3)),
            ..leftover()
        };
        assert_eq!(disposition(l), Disposition::Cancelled);
    }

    #[test]
    fn another_attempt_only_when_allowed_and_readable() {
        assert_eq!(disposition(leftover()), Disposition::Interrupted);
        let allowed = Leftover {
            attempts: Some((1, 2)),
            ..leftover()
        };
        assert_eq!(
            disposition(allowed),
            Disposition::Redeliver { to_queue: false }
        );
        let queued = Leftover {
            queued: true,
            ..allowed
        };
        assert_eq!(
            disposition(queued),
            Disposition::Redeliver { to_queue: true }
        );
        let used_up = Leftover {
            attempts: Some((2, 2)),
            ..leftover()
        };
        assert_eq!(disposition(used_up), Disposition::Interrupted);
        let unreadable = Leftover {
            attempts: None,
            ..leftover()
        };
        assert_eq!(disposition(unreadable), Disposition::Interrupted);
    }

    #[test]
    fn a_task_caught_mid_deferral_goes_back_for_the_same_attempt() {
        let l = Leftover {
            deferring: true,
            queued: true,
            ..leftover()
        };
        assert_eq!(disposition(l), Disposition::Defer { to_queue: true });
        let cancelled = Leftover {
            cancel_requested: true,
            ..l
        };
        assert_eq!(disposition(cancelled), Disposition::Cancelled);
    }

    const ME: u32 = 1000;

    fn proc(start: u64, uid: u32, has_marker: bool) -> ProcFacts {
        ProcFacts {
            start_time: Some(start),
            uid: Some(uid),
            has_marker,
        }
    }

    #[test]
    fn a_reused_pid_is_never_taken_for_the_agent() {
        let ours = |leader| leftover_agent_is_ours(Some(7), ME, Some(leader), &[]);
        assert!(ours(proc(7, ME, true)));
        // Another start time, another user, or no marker: a stranger at that pid.
        assert!(!ours(proc(8, ME, true)));
        assert!(!ours(proc(7, 0, true)));
        assert!(!ours(proc(7, ME, false)));
        let unreadable = ProcFacts {
            start_time: None,
            uid: None,
            has_marker: false,
        };
        assert!(!ours(unreadable));
        // Recorded without a start time (by the agent itself, before exec): only a
        // process of ours that carries the task's marker is the agent.
        let unstamped = |leader| leftover_agent_is_ours(None, ME, Some(leader), &[]);
        assert!(unstamped(proc(7, ME, true)));
        assert!(!unstamped(proc(7, ME, false)));
        assert!(!unstamped(proc(7, 0, true)));
    }

    #[test]
    fn with_the_leader_gone_every_member_must_be_the_tasks() {
        let ours = |members: &[ProcFacts]| leftover_agent_is_ours(Some(7), ME, None, members);
        let child = proc(9, ME, true);
        assert!(ours(&[child, child]));
        assert!(!ours(&[]));
        assert!(leftover_agent_is_ours(None, ME, None, &[child]));
        assert!(!leftover_agent_is_ours(
            None,
            ME,
            None,
            &[child, proc(9, ME, false)]
        ));
        assert!(!leftover_agent_is_ours(None, ME, None, &[]));
        // Older than the agent, unmarked, or another user's: not the task's.
        assert!(!ours(&[child, proc(6, ME, true)]));
        assert!(!ours(&[child, proc(9, ME, false)]));
        assert!(!ours(&[proc(9, 0, true)]));
    }

    #[test]
    fn a_slot_is_abandoned_only_with_a_task_and_a_silent_status() {
        let after = Duration::from_secs(10);
        assert!(!is_abandoned(false, None, after));
        assert!(is_abandoned(true, None, after));
        assert!(!is_abandoned(true, Some(Duration::from_secs(2)), after));
        assert!(is_abandoned(true, Some(Duration::from_secs(10)), after));
    }
}
