//! What a single-slot worker last read of the shared directories (the pauses, whether
//! the queue had anything), kept between its looks while its inline watcher saw no
//! change there.
//!
//! The watcher is read by the worker's own thread only when it waits, so a look first
//! reads what is waiting ([`super::inline::InlineWait::tell_waiting`]): a pause made
//! while a task ran is told before the look decides.
//!
//! Why: every look read `paused/` and listed `queue/pending/` (ten calls), about twice a
//! task, although on a busy slot fed through its inbox neither had changed. A watcher
//! read by the worker's own thread sees every local change to those directories (a lost
//! event says "anything may have changed"), so while it is silent about them the last
//! reading stands. Kept for at most the rescan interval all the same, as the looks that
//! follow a timer are; without an inline watcher (polling, or a many-slot worker) every
//! look reads them as before. A worker woken through its owner's pipe is told of its
//! inbox only (the shared directories are not watched): its reading is kept for at most
//! an idle look (`Shared::idle_look`, 100 ms).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::layout::Root;
use crate::queue::pause::Paused;

/// Something changed in a shared directory (or anything may have).
const ANY: u8 = 1;
/// ... in `paused/` (or anything may have): the pauses are read again.
const PAUSES: u8 = 2;

/// Set by the watcher when something changed in a shared directory (or anything may
/// have), taken by the next look. A change elsewhere than in `paused/` (a claim, a lock
/// let go: several a task) is told apart, so the pauses are not read again for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedNews(Arc<AtomicU8>);

impl SharedNews {
    /// Anything may have changed, the pauses too.
    pub fn tell(&self) {
        self.0.fetch_or(ANY | PAUSES, Ordering::SeqCst);
    }

    /// A shared directory other than `paused/` changed.
    pub fn tell_not_pauses(&self) {
        self.0.fetch_or(ANY, Ordering::SeqCst);
    }

    /// Whether a change in `paused/` was told and not yet taken by a look.
    fn pauses_told(&self) -> bool {
        self.0.load(Ordering::SeqCst) & PAUSES != 0
    }

    fn take(&self) -> u8 {
        self.0.swap(0, Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
pub(crate) struct SharedSeen {
    /// `None`: no watcher that sees every change; read at every look.
    news: Option<SharedNews>,
    read_at: Option<Instant>,
    paused: Paused,
    /// Whether the last claim's listing found `queue/pending/` empty since the pauses
    /// were read (the claim lists it; no listing of its own before that).
    queue_empty: bool,
}

impl SharedSeen {
    /// Readings kept while `news` is silent (from a watcher that sees every change).
    pub fn kept_while_silent(news: SharedNews) -> SharedSeen {
        SharedSeen {
            news: Some(news),
            ..SharedSeen::default()
        }
    }

    /// Start a look: read the pauses again unless the last reading stands (nothing
    /// changed in `paused/` since, and it is younger than `rescan`). The pauses in force.
    /// The queue's emptiness stands only while no shared directory changed.
    pub fn begin_look(&mut self, root: &Root, rescan: Duration) -> &Paused {
        // Taken first: a change made while we read is told again at the next look.
        let news = self.news.as_ref().map_or(ANY | PAUSES, SharedNews::take);
        let fresh = self.read_at.is_some_and(|at| at.elapsed() < rescan);
        if news & PAUSES != 0 || !fresh {
            self.paused = Paused::load(root);
            self.read_at = Some(Instant::now());
        }
        if news != 0 || !fresh {
            self.queue_empty = false;
        }
        &self.paused
    }

    /// The pauses in force now, for a check while a task runs (a pause `--now`): the
    /// last look's reading while the watcher has told of no change in `paused/` since
    /// and it is younger than `rescan`, else read again. Nothing is taken: the next look
    /// still reads `paused/` again for a change told.
    pub fn pauses_now(&self, root: &Root, rescan: Duration) -> std::borrow::Cow<'_, Paused> {
        let fresh = self.read_at.is_some_and(|at| at.elapsed() < rescan);
        match &self.news {
            Some(news) if fresh && !news.pauses_told() => std::borrow::Cow::Borrowed(&self.paused),
            _ => std::borrow::Cow::Owned(Paused::load(root)),
        }
    }

    /// Whether the claim's listing found `queue/pending/` empty since the last reading
    /// of the pauses (then no claim is tried until the watcher tells of a change).
    pub fn queue_known_empty(&self) -> bool {
        self.queue_empty
    }

    /// The claim's listing found `queue/pending/` empty.
    pub fn saw_queue_empty(&mut self) {
        self.queue_empty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::pause::Target;

    fn root() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        crate::queue::init_root(&root).unwrap();
        (dir, root)
    }

    fn pause_all(root: &Root) {
        crate::queue::pause::pause(root, &Target::All, false).unwrap();
    }

    #[test]
    fn a_reading_stands_until_the_watcher_tells_of_a_change() {
        let (_d, root) = root();
        let news = SharedNews::default();
        let mut seen = SharedSeen::kept_while_silent(news.clone());
        let rescan = Duration::from_secs(3600);
        assert!(!seen.begin_look(&root, rescan).all());
        seen.saw_queue_empty();
        assert!(seen.queue_known_empty());
        pause_all(&root);
        // Not told yet: the last reading stands.
        assert!(!seen.begin_look(&root, rescan).all());
        news.tell();
        assert!(seen.begin_look(&root, rescan).all());
        // A change told: the queue is listed again by the next claim.
        assert!(!seen.queue_known_empty());
    }

    #[test]
    fn a_change_elsewhere_than_in_paused_keeps_the_pauses_but_not_the_queues_emptiness() {
        let (_d, root) = root();
        let news = SharedNews::default();
        let mut seen = SharedSeen::kept_while_silent(news.clone());
        let rescan = Duration::from_secs(3600);
        assert!(!seen.begin_look(&root, rescan).all());
        seen.saw_queue_empty();
        pause_all(&root);
        news.tell_not_pauses();
        // The pauses are not read again for a claim or a lock let go...
        assert!(!seen.begin_look(&root, rescan).all());
        // ...but the queue is listed again by the next claim.
        assert!(!seen.queue_known_empty());
        news.tell();
        assert!(seen.begin_look(&root, rescan).all());
    }

    #[test]
    fn a_pause_told_while_a_task_runs_is_read_then_and_again_at_the_next_look() {
        let (_d, root) = root();
        let news = SharedNews::default();
        let mut seen = SharedSeen::kept_while_silent(news.clone());
        let rescan = Duration::from_secs(3600);
        assert!(!seen.begin_look(&root, rescan).all());
        pause_all(&root);
        // Untold: the look's reading stands; a lock let go changes nothing there.
        news.tell_not_pauses();
        assert!(!seen.pauses_now(&root, rescan).all());
        news.tell();
        assert!(seen.pauses_now(&root, rescan).all());
        // Not taken by the check: the next look reads paused/ again.
        assert!(seen.begin_look(&root, rescan).all());
        // Past the rescan interval it is read again, told or not.
        crate::queue::pause::resume(&root, &crate::queue::pause::Target::All).unwrap();
        assert!(!seen.pauses_now(&root, Duration::ZERO).all());
    }

    #[test]
    fn a_reading_is_kept_no_longer_than_the_rescan_interval() {
        let (_d, root) = root();
        let mut seen = SharedSeen::kept_while_silent(SharedNews::default());
        assert!(!seen.begin_look(&root, Duration::from_secs(3600)).all());
        pause_all(&root);
        assert!(seen.begin_look(&root, Duration::ZERO).all());
    }

    #[test]
    fn without_a_watcher_every_look_reads_again() {
        let (_d, root) = root();
        let mut seen = SharedSeen::default();
        let rescan = Duration::from_secs(3600);
        assert!(!seen.begin_look(&root, rescan).all());
        pause_all(&root);
        assert!(seen.begin_look(&root, rescan).all());
    }
}
