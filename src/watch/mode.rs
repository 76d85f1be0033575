//! How a watch is asked for (`WatchMode`) and done: a directory's kind of watch
//! (`How`), whom a change is told (`OnChange`), and whether to poll without being asked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The default interval of the poll watcher.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How the caller wants to be woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchMode {
    /// Native events (inotify, FSEvents), falling back to polling when they cannot work.
    Auto,
    /// Poll at this interval (`--poll`).
    Poll(Duration),
}

/// How a directory is watched where events are native (polling looks at everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    /// Every change.
    Changes,
    /// Files arriving, by any writer (created, linked, renamed in, closed after writing):
    /// a slot's inbox.
    Arrivals,
    /// Files published whole, by a link or a rename: a slot's `results/`.
    Published,
}

/// Told of each changed path (or a watched directory itself), or `None` when
/// anything may have changed (events lost, a backend error).
pub type OnChange = Arc<dyn Fn(Option<&Path>) + Send + Sync>;

/// Why we poll without being asked: a filesystem that delivers no events.
pub(super) fn poll_reason(dirs: &[PathBuf], mode: WatchMode) -> Option<(Duration, String)> {
    match mode {
        WatchMode::Poll(interval) => Some((interval, "polling was asked for".to_string())),
        WatchMode::Auto => dirs.iter().find_map(|d| {
            eventless_filesystem(d).map(|fs| {
                (
                    DEFAULT_POLL_INTERVAL,
                    format!(
                        "{} is on {fs}, which delivers no change events",
                        d.display()
                    ),
                )
            })
        }),
    }
}

/// The name of the filesystem `dir` is on, if it is known not to deliver change
/// events to local watchers.
fn eventless_filesystem(dir: &Path) -> Option<String> {
    crate::fs_kind::of(dir)
        .ok()
        .flatten()
        .filter(|k| k.eventless)
        .map(|k| k.name)
}
