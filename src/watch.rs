//! Directory watching: change events used only as wake-ups, with an explicit poll mode.
//!
//! On Linux the native watcher is inotify itself ([`native`]) with a mask of changes
//! only; elsewhere `notify`'s. The cheap poller ([`poll`]) stats, never walks.

#[cfg(target_os = "linux")]
mod native;
#[cfg(target_os = "linux")]
mod pipe;
#[cfg(target_os = "linux")]
pub use pipe::OnEnd;
mod events;
mod inline;
mod mode;
mod poll;
mod readable;
mod ready_signal;

use events::count_events;
pub use inline::{InlineWatcher, Waited};
use mode::{poll_reason, How};
pub use mode::{OnChange, WatchMode, DEFAULT_POLL_INTERVAL};
pub use readable::poll_readable;
pub use ready_signal::ReadySignal;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
#[cfg(not(target_os = "linux"))]
use notify::RecommendedWatcher;
use notify::{Config, Event, PollWatcher, RecursiveMode, Watcher};

use crate::error::{Error, Result};

/// Which watcher ended up in use, and why: worth printing at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatcherKind {
    Native,
    Poll { interval: Duration, reason: String },
}

impl std::fmt::Display for WatcherKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatcherKind::Native => f.write_str("native events"),
            WatcherKind::Poll { interval, reason } => {
                write!(f, "polling every {}ms ({reason})", interval.as_millis())
            }
        }
    }
}

/// Decides which changed paths are worth a wake-up (e.g. not every write to `output.log`).
pub type Interest = Arc<dyn Fn(&Path) -> bool + Send + Sync>;

/// Watches a few directories (not recursively) and sends `()` on the channel when
/// something of interest may have changed. A wake-up is a hint: re-read the files.
pub struct DirWatcher {
    _inner: Inner,
    kind: WatcherKind,
}

/// Whichever backend is in use; dropping it stops its thread.
enum Inner {
    Notify(#[allow(dead_code)] Box<dyn Watcher + Send>),
    #[cfg(target_os = "linux")]
    Native(#[allow(dead_code)] native::Native),
    Poll(#[allow(dead_code)] poll::Poller),
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher")
            .field("kind", &self.kind)
            .finish()
    }
}

/// An open, a read or a close without writing: nothing changed.
fn is_read_only(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => false,
        notify::EventKind::Access(_) => true,
        _ => false,
    }
}

/// `notify`'s events handed to `on_change`, read-only ones dropped.
fn notify_handler(on_change: OnChange) -> impl notify::EventHandler + Clone {
    move |res: notify::Result<Event>| {
        let last = res.as_ref().ok().and_then(|ev| ev.paths.first());
        count_events(1, last.map(PathBuf::as_path));
        match &res {
            // Reads change nothing: waking on them would make every reader of a
            // watched directory (and our own reads of task.json) wake us.
            Ok(ev) if is_read_only(&ev.kind) => {}
            Ok(ev) if ev.need_rescan() || ev.paths.is_empty() => on_change(None),
            Ok(ev) => ev.paths.iter().for_each(|p| on_change(Some(p))),
            // An error from the backend: re-read to be safe.
            Err(_) => on_change(None),
        }
    }
}

impl DirWatcher {
    /// Wake `wake` when a path `interest` accepts changes in one of `dirs`. In poll mode
    /// every entry of `dirs` is looked at each tick (a file rewritten in place is seen).
    pub fn new(
        dirs: &[PathBuf],
        mode: WatchMode,
        interest: Interest,
        wake: Sender<()>,
    ) -> Result<Self> {
        let on_change: OnChange = Arc::new(move |p: Option<&Path>| {
            if p.is_none_or(|p| interest(p)) {
                // A full channel already holds a pending wake-up: nothing is lost.
                let _ = wake.try_send(());
            }
        });
        Self::new_as(dirs, How::Changes, mode, on_change)
    }

    /// Tell `on_change` of each name appearing in `dirs`, directories whose files are
    /// only ever published whole, by a link or a rename (a slot's `results/`): native
    /// events are asked for a name appearing only, not for the publisher's writes to
    /// its temporary file (whose name appearing is still told).
    pub fn published(dirs: &[PathBuf], mode: WatchMode, on_change: OnChange) -> Result<Self> {
        Self::new_as(dirs, How::Published, mode, on_change)
    }

    fn new_as(dirs: &[PathBuf], how: How, mode: WatchMode, on_change: OnChange) -> Result<Self> {
        if let Some((interval, reason)) = poll_reason(dirs, mode) {
            return Self::walk_poll(dirs, interval, reason, on_change);
        }
        let watched: Vec<_> = dirs.iter().map(|d| (d, how)).collect();
        match Self::native(&watched, on_change.clone())? {
            Ok(w) => Ok(w),
            Err(reason) => Self::walk_poll(dirs, DEFAULT_POLL_INTERVAL, reason, on_change),
        }
    }

    /// Tell `on_change` of changes in `dirs` (each path that changed). When polling,
    /// only `dirs` and `files` are stat'ed (no directory is walked, the server asked
    /// each time), every `interval` after a change and slower while nothing changes —
    /// 200 ms for a few paths, up to 1 s for thousands (at most ten times slower):
    /// name in `files` what may be rewritten in place. Name in `listed` the few of
    /// `dirs` where other hosts add entries of names nobody can predict (the queue): on
    /// a filesystem whose client answers a `stat` from its own cache (GlusterFS) they
    /// are read before each `stat` — a request that reaches the server.
    pub fn watch_changes(
        dirs: &[PathBuf],
        files: &[PathBuf],
        listed: &[PathBuf],
        mode: WatchMode,
        on_change: OnChange,
    ) -> Result<Self> {
        let listed = Listed {
            always: listed,
            while_waiting: &[],
        };
        Self::watch_changes_and_inboxes(dirs, &[], files, listed, mode, on_change)
    }

    /// [`DirWatcher::watch_changes`], and `inboxes` too, where only a file's arrival
    /// (created, linked, renamed in, or closed after writing) is told when events are
    /// native: what a worker watches its slot's directory for. `listed` says which
    /// directories are read before their `stat` where the client caches (GlusterFS).
    pub fn watch_changes_and_inboxes(
        dirs: &[PathBuf],
        inboxes: &[PathBuf],
        files: &[PathBuf],
        listed: Listed<'_>,
        mode: WatchMode,
        on_change: OnChange,
    ) -> Result<Self> {
        let all: Vec<PathBuf> = inboxes.iter().chain(dirs).cloned().collect();
        let stat_poll = |interval: Duration, reason: String, on_change: OnChange| {
            // A path named both as a directory and as a file is looked at once.
            let mut unique = std::collections::HashSet::new();
            let mut paths: Vec<(PathBuf, poll::Look)> = all
                .iter()
                .chain(files)
                .filter(|p| unique.insert(*p))
                .map(|p| (p.clone(), look_for(p, listed)))
                .collect();
            // The directories always read come first: what they hold decides, in the
            // same tick, whether the others are read.
            paths.sort_by_key(|(_, look)| *look != poll::Look::ReadThenStat);
            let poller =
                poll::Poller::start(paths, interval, on_change).map_err(|e| Error::Watch {
                    path: all[0].clone(),
                    source: notify::Error::io(e),
                })?;
            Ok(DirWatcher {
                _inner: Inner::Poll(poller),
                kind: WatcherKind::Poll { interval, reason },
            })
        };
        if let Some((interval, reason)) = poll_reason(&all, mode) {
            return stat_poll(interval, reason, on_change);
        }
        let watched: Vec<_> = dirs
            .iter()
            .map(|d| (d, How::Changes))
            .chain(inboxes.iter().map(|d| (d, How::Arrivals)))
            .collect();
        match Self::native(&watched, on_change.clone())? {
            Ok(w) => Ok(w),
            Err(reason) => stat_poll(DEFAULT_POLL_INTERVAL, reason, on_change),
        }
    }

    /// The native watcher, or why it cannot be had (to poll instead).
    #[cfg(target_os = "linux")]
    fn native(
        dirs: &[(&PathBuf, How)],
        on_change: OnChange,
    ) -> Result<std::result::Result<Self, String>> {
        match native::Native::start(dirs, on_change) {
            Ok(n) => Ok(Ok(DirWatcher {
                _inner: Inner::Native(n),
                kind: WatcherKind::Native,
            })),
            Err(native::NativeError::Missing(path, e)) => Err(Error::Watch {
                path: path.clone(),
                source: notify::Error::io(e).add_path(path),
            }),
            Err(native::NativeError::Unavailable(e)) => {
                let limit_hit = matches!(
                    e.raw_os_error(),
                    Some(nix::libc::EMFILE | nix::libc::ENOSPC)
                );
                let reason = native_failure_advice(&e, limit_hit);
                tracing::warn!("{reason}");
                Ok(Err(reason))
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn native(
        dirs: &[(&PathBuf, How)],
        on_change: OnChange,
    ) -> Result<std::result::Result<Self, String>> {
        let native = RecommendedWatcher::new(notify_handler(on_change), Config::default())
            .and_then(|mut w| {
                for (d, _) in dirs {
                    w.watch(d, RecursiveMode::NonRecursive)?;
                }
                Ok(w)
            });
        match native {
            Ok(w) => Ok(Ok(DirWatcher {
                _inner: Inner::Notify(Box::new(w)),
                kind: WatcherKind::Native,
            })),
            Err(e) if matches!(e.kind, notify::ErrorKind::PathNotFound) => {
                let path = e.paths.first().cloned().unwrap_or_else(|| dirs[0].clone());
                Err(Error::Watch { path, source: e })
            }
            Err(e) => {
                let limit_hit = matches!(e.kind, notify::ErrorKind::MaxFilesWatch)
                    || matches!(&e.kind, notify::ErrorKind::Io(io) if matches!(io.raw_os_error(), Some(nix::libc::EMFILE | nix::libc::ENOSPC)));
                let reason = native_failure_advice(&e, limit_hit);
                tracing::warn!("{reason}");
                Ok(Err(reason))
            }
        }
    }

    /// `notify`'s poller: walks every entry of `dirs` each tick.
    fn walk_poll(
        dirs: &[PathBuf],
        interval: Duration,
        reason: String,
        on_change: OnChange,
    ) -> Result<Self> {
        let config = Config::default().with_poll_interval(interval);
        let mut w =
            PollWatcher::new(notify_handler(on_change), config).map_err(|e| Error::Watch {
                path: dirs[0].clone(),
                source: e,
            })?;
        for d in dirs {
            w.watch(d, RecursiveMode::NonRecursive)
                .map_err(|e| Error::Watch {
                    path: d.clone(),
                    source: e,
                })?;
        }
        Ok(DirWatcher {
            _inner: Inner::Notify(Box::new(w)),
            kind: WatcherKind::Poll { interval, reason },
        })
    }

    pub fn kind(&self) -> &WatcherKind {
        &self.kind
    }

    /// Whether changes are found by polling (events may then come late or be missed
    /// between polls), not reported by the kernel.
    pub fn is_polling(&self) -> bool {
        matches!(self.kind, WatcherKind::Poll { .. })
    }
}

/// Which polled directories are read before their `stat` on a filesystem whose client
/// caches a directory's attributes past a forced `stat` (GlusterFS): elsewhere none is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Listed<'a> {
    /// Read before each `stat`: where other hosts add entries of names nobody can
    /// predict, whose news matters at any time (the queue). Whether the last of them
    /// read held an entry (a queued task waits) is what `while_waiting` goes by.
    pub always: &'a [PathBuf],
    /// Read before their `stat` only while an `always` directory holds an entry: the
    /// locks and pauses a queued task may wait for (freed, lifted on another host).
    pub while_waiting: &'a [PathBuf],
}

/// How the poller looks at `path`: read first when `listed` names it and it is on a
/// filesystem whose client caches a directory's attributes past a forced `stat`.
fn look_for(path: &PathBuf, listed: Listed<'_>) -> poll::Look {
    let look = if listed.always.contains(path) {
        poll::Look::ReadThenStat
    } else if listed.while_waiting.contains(path) {
        poll::Look::ReadWhileWaiting
    } else {
        return poll::Look::Stat;
    };
    let read_first = crate::fs_kind::mount_of(path)
        .ok()
        .flatten()
        .is_some_and(|m| m.stat_needs_a_read_first());
    if read_first {
        tracing::debug!(
            "{} is read before its stat ({look:?}): its filesystem's client caches its \
             attributes",
            path.display()
        );
        look
    } else {
        poll::Look::Stat
    }
}

/// Why native events could not be used, phrased as what to do about it.
fn native_failure_advice(e: &dyn std::fmt::Display, limit_hit: bool) -> String {
    if limit_hit {
        format!(
            "native file events unavailable ({e}): the inotify limit is reached; raise it with \
             `sudo sysctl fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288`"
        )
    } else {
        format!("native file events unavailable ({e})")
    }
}
