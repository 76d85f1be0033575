//! A single-slot worker's waits on its own thread: the slot's watcher read inline, and a
//! stop request seen as a readable descriptor.
//!
//! Why: with a watcher's thread between the kernel and the worker, every task cost that
//! thread ~4 wake-ups (the worker's own status, lock, result and log writes beside its
//! inbox) and the worker one more hand-over per pickup. Read by the worker itself, the
//! changes it made while working are read in one batch when it next waits, and a task's
//! arrival wakes the worker directly (`conductor run`, 400 `cat` tasks: context switches
//! −44 %, CPU −8 %).

use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::error::Result;
use crate::watch::{InlineWatcher, ReadySignal, Waited};

/// The slot's inline watcher, and the descriptor that is readable once the worker is
/// told to stop (while [`crate::worker::Worker::run`] runs).
#[derive(Debug)]
pub(crate) struct InlineWait {
    watcher: InlineWatcher,
    stop: Option<ReadySignal>,
}

/// What one round of [`InlineWait::wait_once`] saw besides the changes it told.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen {
    pub stop: bool,
    /// Which of the descriptors the caller added are readable: bit `i` for `extra[i]`.
    pub extra: u64,
}

impl InlineWait {
    pub fn new(watcher: InlineWatcher) -> InlineWait {
        InlineWait {
            watcher,
            stop: None,
        }
    }

    /// Make the stop descriptor readable when `shutdown` fires (a message, or its sender
    /// gone), while `Worker::run` runs; the message stays for the run loop and the
    /// agent's supervision, which take it as before. `slot_dir` names the worker in an
    /// error (out of descriptors or threads).
    pub fn tell_stop_of(&mut self, shutdown: &Receiver<()>, slot_dir: &Path) -> Result<()> {
        self.stop = Some(ReadySignal::of(shutdown, slot_dir)?);
        Ok(())
    }

    /// Drop the stop descriptor (and its thread): the run it was for is over.
    pub fn forget_stop(&mut self) {
        self.stop = None;
    }

    /// The stop descriptor, while one is set.
    fn stop_fd(&self) -> Option<BorrowedFd<'_>> {
        self.stop.as_ref().map(ReadySignal::fd)
    }

    /// Tell the watcher's changes already waiting (the worker's own since its last wait,
    /// and anyone's), without waiting.
    pub fn tell_waiting(&self) {
        self.watcher.tell_waiting();
    }

    /// Wait until `wake` holds a wake-up (taken), the worker is told to stop, or
    /// `timeout` passes.
    pub fn wait_for_wake(&self, wake: &Receiver<()>, timeout: Duration) -> Waited {
        self.watcher
            .wait_for_wake(wake, self.stop.as_ref(), timeout)
    }

    /// One round: tell the changes waiting, or wait at most `timeout` for one, for the
    /// stop descriptor or for one of `extra` (the agent's pidfd and output pipes) to
    /// become readable.
    pub fn wait_once(&self, extra: &[BorrowedFd<'_>], timeout: Duration) -> Seen {
        let mut fds = Vec::with_capacity(extra.len() + 1);
        fds.extend_from_slice(extra);
        let stop_at = self.stop_fd().map(|fd| {
            fds.push(fd);
            fds.len() - 1
        });
        let ready = self.watcher.wait(&fds, timeout);
        let extra_bits = if extra.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << extra.len()) - 1
        };
        Seen {
            stop: stop_at.is_some_and(|i| ready & (1 << i) != 0),
            extra: ready & extra_bits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::path::PathBuf;
    use std::sync::Arc;

    /// An inline wait on a temporary directory whose changes to `task.json` send a
    /// wake-up, as a worker's watcher does.
    fn waiting() -> (tempfile::TempDir, InlineWait, Receiver<()>) {
        let dir = tempfile::tempdir().unwrap();
        let (tx, wake) = bounded(1);
        let on_change: crate::watch::OnChange = Arc::new(move |p: Option<&Path>| {
            if p.is_none_or(|p| p.ends_with("task.json")) {
                let _ = tx.try_send(());
            }
        });
        let dirs: Vec<PathBuf> = Vec::new();
        let watcher = InlineWatcher::start(
            &dirs,
            &[dir.path().to_path_buf()],
            crate::watch::WatchMode::Auto,
            on_change,
        )
        .unwrap()
        .expect("native events on a temporary directory");
        (dir, InlineWait::new(watcher), wake)
    }

    #[test]
    fn only_a_wanted_change_ends_the_wait_and_its_wake_up_is_taken() {
        let (dir, wait, wake) = waiting();
        // Bookkeeping beside the inbox: no wake-up, the time runs out.
        std::fs::write(dir.path().join("status.json"), "{}").unwrap();
        assert_eq!(
            wait.wait_for_wake(&wake, Duration::from_millis(50)),
            Waited::Timeout
        );
        std::fs::write(dir.path().join("task.json"), "{}").unwrap();
        assert_eq!(
            wait.wait_for_wake(&wake, Duration::from_secs(30)),
            Waited::Wake
        );
        assert!(wake.is_empty(), "the wake-up was left in the channel");
    }

    #[test]
    fn a_stop_ends_the_wait_and_its_message_stays_for_the_loop() {
        let (_dir, mut wait, wake) = waiting();
        let (stop, shutdown) = bounded::<()>(1);
        wait.tell_stop_of(&shutdown, Path::new("/slot")).unwrap();
        stop.send(()).unwrap();
        assert_eq!(
            wait.wait_for_wake(&wake, Duration::from_secs(30)),
            Waited::Stop
        );
        assert!(
            shutdown.try_recv().is_ok(),
            "the stop message was taken by the thread that only looks at it"
        );
        // A stop by the sender going away ends the wait too.
        let (stop, shutdown) = bounded::<()>(1);
        wait.tell_stop_of(&shutdown, Path::new("/slot")).unwrap();
        drop(stop);
        assert_eq!(
            wait.wait_for_wake(&wake, Duration::from_secs(30)),
            Waited::Stop
        );
    }
}
