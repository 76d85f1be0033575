//! Running within a process limit (`ulimit -u`): after a thread or an agent could not
//! be started for want of processes (EAGAIN), no more slots are made busy than were
//! busy then, and the cap grows back one slot at a time while no start fails.
//!
//! Why: a many-slot worker gave each slot with work a thread, and each thread started
//! an agent. Past the limit the threads took every process, and each waited (holding
//! its process) for an agent that could not be forked while the others held theirs:
//! nothing ran for minutes, then the tasks failed (issue 38.1). With the cap, a task
//! whose agent cannot start is put back, its thread ends, and the processes it held go
//! to the agents of the slots already busy; a task fails only for a lasting error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// No cap: no start has failed for want of processes (or not for a while).
const NONE: usize = usize::MAX;

/// How long after the last failed start the cap stays where it is; after that, each
/// slot that comes back raises it by one.
const HOLD: Duration = Duration::from_secs(2);

/// How long a task put back for want of processes waits before its slot looks again.
pub(crate) const PUT_BACK_PAUSE: Duration = Duration::from_millis(500);

/// The cap and what it is judged by; one per process ([`LIMITER`]).
struct Limiter {
    cap: AtomicUsize,
    /// Slots of this process's many-slot worker that have a thread now.
    busy: AtomicUsize,
    last_short: Mutex<Option<Instant>>,
}

static LIMITER: Limiter = Limiter::new();

impl Limiter {
    const fn new() -> Limiter {
        Limiter {
            cap: AtomicUsize::new(NONE),
            busy: AtomicUsize::new(0),
            last_short: Mutex::new(None),
        }
    }

    fn ran_short(&self) {
        let cap = self.busy.load(Ordering::SeqCst).saturating_sub(1).max(1);
        let was = self.cap.fetch_min(cap, Ordering::SeqCst);
        *self.last_short.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if was > cap {
            tracing::warn!(
                "out of processes (ulimit -u): at most {cap} slot(s) of this worker run at \
                 once until starts succeed again; the others' tasks wait"
            );
        }
    }

    fn may_start(&self) -> bool {
        self.busy.load(Ordering::SeqCst) < self.cap.load(Ordering::SeqCst)
    }

    fn came_back(&self, slots: usize) {
        let _ = self
            .busy
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        let cap = self.cap.load(Ordering::SeqCst);
        if cap == NONE {
            return;
        }
        let quiet = self
            .last_short
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|t| t.elapsed() >= HOLD);
        if quiet {
            let next = if cap + 1 >= slots { NONE } else { cap + 1 };
            let _ = self
                .cap
                .compare_exchange(cap, next, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
}

/// A start (a slot's thread, an agent) failed for want of processes: from now on at
/// most one slot fewer than are busy now (counting the one that failed; at least one)
/// is made busy.
pub(crate) fn ran_short() {
    LIMITER.ran_short();
}

/// Whether another slot may be made busy now.
pub(crate) fn may_start() -> bool {
    LIMITER.may_start()
}

/// Whether this process is a many-slot worker with a slot busy (the caller's, when a
/// slot's thread asks): only there does a task go back rather than wait for processes.
/// A single-slot worker's task waits on its main thread, which holds no process more.
pub(crate) fn serving_many() -> bool {
    LIMITER.busy.load(Ordering::SeqCst) > 0
}

/// A slot was made busy (its thread started).
pub(crate) fn slot_started() {
    LIMITER.busy.fetch_add(1, Ordering::SeqCst);
}

/// A busy slot came back: past [`HOLD`] without a failed start, the cap grows by one;
/// once it reaches `slots`, it is lifted.
pub(crate) fn slot_came_back(slots: usize) {
    LIMITER.came_back(slots);
}

/// Whether `e` is a start that failed for want of processes.
pub(crate) fn is_out_of_processes(e: &crate::error::Error) -> bool {
    matches!(e, crate::error::Error::Spawn { source, .. }
        if source.raw_os_error() == Some(nix::libc::EAGAIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_falls_to_what_ran_and_grows_back_once_starts_succeed() {
        let l = Limiter::new();
        assert!(l.may_start());
        l.busy.store(5, Ordering::SeqCst);
        l.ran_short();
        // Four may be busy: the fifth, whose start failed, goes back.
        assert!(!l.may_start());
        l.came_back(10);
        assert!(!l.may_start(), "four busy, cap four");
        l.came_back(10);
        assert!(l.may_start(), "three busy, cap four");
        // Past the hold, each slot that comes back raises the cap by one.
        *l.last_short.lock().unwrap() = Some(Instant::now() - HOLD);
        for _ in 0..3 {
            l.came_back(10);
        }
        assert_eq!(l.cap.load(Ordering::SeqCst), 7);
        for _ in 0..3 {
            l.busy.fetch_add(1, Ordering::SeqCst);
            l.came_back(10);
        }
        assert_eq!(l.cap.load(Ordering::SeqCst), NONE);
    }
}
