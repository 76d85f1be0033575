//! Counting the fsync-like calls (`fsync`, `syncfs`) this process makes: what a task
//! costs in journal commits, for the debug log and the tests.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every fsync-like call this process made.
static SYNCS: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// The fsync-like calls of this test's thread (the unit tests run side by side).
    static MINE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many fsync-like calls this process has made so far.
pub fn sync_count() -> u64 {
    SYNCS.load(Ordering::Relaxed)
}

/// Count one fsync-like call, and make it.
pub(crate) fn counted<T>(call: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    SYNCS.fetch_add(1, Ordering::Relaxed);
    #[cfg(test)]
    MINE.with(|m| m.set(m.get() + 1));
    call()
}

/// The fsync-like calls of this test thread so far.
#[cfg(test)]
pub(crate) fn mine() -> u64 {
    MINE.with(|m| m.get())
}
