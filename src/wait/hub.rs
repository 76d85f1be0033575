//! One watcher shared by many waits (the MCP server's): a `Hub` wakes each
//! subscription whose files changed.

// Nothing from the parent: no circle inside the folder.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::watch::{DirWatcher, Interest, WatchMode};

/// How a [`Hub`] wakes one of its waiters (it must not block: it runs on the
/// watcher's thread).
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// One watcher for many waits: every wait that subscribes shares its single inotify
/// instance (or poller), and is woken when a path its interest accepts changes. The
/// watched directories only grow, as waits ask for new ones (a root has a handful:
/// `queue/results/` and each slot's `results/`); the watcher is then replaced by one on
/// the larger set, made before the old one goes, so no change is missed.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    mode: WatchMode,
    waiters: std::sync::Mutex<Waiters>,
    watched: std::sync::Mutex<Watched>,
}

#[derive(Default)]
struct Waiters {
    next: u64,
    by_id: std::collections::HashMap<u64, (Interest, Wake)>,
}

#[derive(Default)]
struct Watched {
    dirs: std::collections::BTreeSet<PathBuf>,
    watcher: Option<DirWatcher>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("mode", &self.inner.mode)
            .field("waiters", &self.waiters())
            .finish()
    }
}

/// A waiter's place in a [`Hub`]; dropping it stops the wake-ups.
#[must_use = "the waiter is woken only while its subscription lives"]
pub struct Subscription {
    hub: Arc<HubInner>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock(&self.hub.waiters).by_id.remove(&self.id);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hub {
    pub fn new(mode: WatchMode) -> Hub {
        Hub {
            inner: Arc::new(HubInner {
                mode,
                waiters: Default::default(),
                watched: Default::default(),
            }),
        }
    }

    /// Wake `wake` whenever a path `interest` accepts changes in one of `dirs` (or
    /// anything may have changed). The watch on `dirs` is armed when this returns: a
    /// look taken after it misses nothing.
    pub fn subscribe(
        &self,
        dirs: &[PathBuf],
        interest: Interest,
        wake: Wake,
    ) -> Result<Subscription> {
        // Armed first: the caller's first look comes after this returns, so a change
        // before the waiter is registered is seen by that look.
        self.watch(dirs)?;
        let mut w = lock(&self.inner.waiters);
        w.next += 1;
        let id = w.next;
        w.by_id.insert(id, (interest, wake));
        Ok(Subscription {
            hub: self.inner.clone(),
            id,
        })
    }

    /// How many waiters are subscribed.
    pub fn waiters(&self) -> usize {
        lock(&self.inner.waiters).by_id.len()
    }

    /// Make sure `dirs` are watched: the watcher is replaced by one on the union.
    fn watch(&self, dirs: &[PathBuf]) -> Result<()> {
        let mut watched = lock(&self.inner.watched);
        if watched.watcher.is_some() && dirs.iter().all(|d| watched.dirs.contains(d)) {
            return Ok(());
        }
        let mut all = watched.dirs.clone();
        // Directories gone since (a root removed: a process-wide hub outlives roots) are
        // no longer watched.
        all.retain(|d| d.is_dir());
        all.extend(dirs.iter().cloned());
        let list: Vec<PathBuf> = all.iter().cloned().collect();
        let inner = Arc::downgrade(&self.inner);
        let roots: Arc<std::collections::BTreeSet<PathBuf>> = Arc::new(all.clone());
        let on_change: crate::watch::OnChange = Arc::new(move |p: Option<&Path>| {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let waiters = lock(&inner.waiters);
            // A watched directory itself (a poller's report, a directory moved):
            // anything in it may have changed.
            let all = p.is_none_or(|p| roots.contains(p));
            for (interest, wake) in waiters.by_id.values() {
                if all || p.is_some_and(|p| interest(p)) {
                    wake();
                }
            }
        });
        let next = DirWatcher::watch_changes(&list, &[], &[], self.inner.mode, on_change)?;
        // The old watcher goes only once the new one is armed; its thread may be
        // delivering, which takes the waiters' lock, never this one.
        let old = watched.watcher.replace(next);
        watched.dirs = all;
        drop(old);
        Ok(())
    }

    /// Whether the shared watcher polls (see [`DirWatcher::is_polling`]).
    pub fn is_polling(&self) -> bool {
        lock(&self.inner.watched)
            .watcher
            .as_ref()
            .is_some_and(DirWatcher::is_polling)
    }
}
