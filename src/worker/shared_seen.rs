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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::layout::Root;
use crate::queue::pause::Paused;

/// Set by the watcher when something changed in a shared directory (or anything may
/// have), taken by the next look.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedNews(Arc<AtomicBool>);

impl SharedNews {
    pub fn tell(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

#[derive(Debug, Default)]
pub(crate) struct SharedSeen {
    /// `None`: no watcher that sees every change; read at every look.
    news: Option<SharedNews>,
    read_at: Option<Instant>,
    paused: Paused,
    /// Whether `queue/pending/` held no task at the last reading (`None`: not read since).
    queue_empty: Option<bool>,
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
    /// changed since, and it is younger than `rescan`). The pauses in force.
    pub fn begin_look(&mut self, root: &Root, rescan: Duration) -> &Paused {
        // Taken first: a change made while we read is told again at the next look.
        let changed = self.news.as_ref().is_none_or(SharedNews::take);
        let fresh = self.read_at.is_some_and(|at| at.elapsed() < rescan);
        if changed || !fresh {
            self.paused = Paused::load(root);
            self.queue_empty = None;
            self.read_at = Some(Instant::now());
        }
        &self.paused
    }

    /// Whether the queue holds no task, read once per reading of the pauses (an
    /// unreadable `queue/pending/` counts as empty, and is read again next time).
    pub fn queue_empty(&mut self, root: &Root) -> bool {
        if let Some(empty) = self.queue_empty {
            return empty;
        }
        match queue_has_tasks(root) {
            Some(any) => *self.queue_empty.insert(!any),
            None => true,
        }
    }
}

/// Whether `queue/pending/` holds anything but temp and hidden names (a task, or a
/// malformed file to reject): worth a claim. `None`: it cannot be read.
pub(crate) fn queue_has_tasks(root: &crate::layout::Root) -> Option<bool> {
    std::fs::read_dir(root.queue_pending())
        .map(|mut d| d.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.'))))
        .ok()
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
        assert!(seen.queue_empty(&root));
        pause_all(&root);
        // Not told yet: the last reading stands.
        assert!(!seen.begin_look(&root, rescan).all());
        news.tell();
        assert!(seen.begin_look(&root, rescan).all());
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
