//! Directory watching: `notify` events used only as wake-ups, with an explicit poll mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use notify::{Config, Event, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher};

use crate::error::{Error, Result};

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
    _inner: Box<dyn Watcher + Send>,
    kind: WatcherKind,
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

impl DirWatcher {
    pub fn new(
        dirs: &[PathBuf],
        mode: WatchMode,
        interest: Interest,
        wake: Sender<()>,
    ) -> Result<Self> {
        let handler = move |res: notify::Result<Event>| {
            let relevant = match &res {
                // Reads change nothing: waking on them would make every reader of a
                // watched directory (and our own reads of task.json) wake us.
                Ok(ev) if is_read_only(&ev.kind) => false,
                Ok(ev) => {
                    ev.need_rescan() || ev.paths.is_empty() || ev.paths.iter().any(|p| interest(p))
                }
                // An error from the backend: re-read to be safe.
                Err(_) => true,
            };
            if relevant {
                // A full channel already holds a pending wake-up: nothing is lost.
                let _ = wake.try_send(());
            }
        };
        let poll_reason = match mode {
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
        };
        if let Some((interval, reason)) = poll_reason {
            return Self::poll(dirs, interval, reason, handler);
        }
        let native =
            RecommendedWatcher::new(handler.clone(), Config::default()).and_then(|mut w| {
                for d in dirs {
                    w.watch(d, RecursiveMode::NonRecursive)?;
                }
                Ok(w)
            });
        match native {
            Ok(w) => Ok(DirWatcher {
                _inner: Box::new(w),
                kind: WatcherKind::Native,
            }),
            Err(e) => {
                if matches!(e.kind, notify::ErrorKind::PathNotFound) {
                    let path = e.paths.first().cloned().unwrap_or_else(|| dirs[0].clone());
                    return Err(Error::Watch { path, source: e });
                }
                let reason = native_failure_advice(&e);
                tracing::warn!("{reason}");
                Self::poll(dirs, DEFAULT_POLL_INTERVAL, reason, handler)
            }
        }
    }

    fn poll<F>(dirs: &[PathBuf], interval: Duration, reason: String, handler: F) -> Result<Self>
    where
        F: notify::EventHandler,
    {
        let mut w = PollWatcher::new(handler, Config::default().with_poll_interval(interval))
            .map_err(|e| Error::Watch {
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
            _inner: Box::new(w),
            kind: WatcherKind::Poll { interval, reason },
        })
    }

    pub fn kind(&self) -> &WatcherKind {
        &self.kind
    }
}

/// Why native events could not be used, phrased as what to do about it.
fn native_failure_advice(e: &notify::Error) -> String {
    let limit_hit = matches!(e.kind, notify::ErrorKind::MaxFilesWatch)
        || matches!(&e.kind, notify::ErrorKind::Io(io) if io.raw_os_error() == Some(nix::libc::EMFILE) || io.raw_os_error() == Some(nix::libc::ENOSPC));
    if limit_hit {
        format!(
            "native file events unavailable ({e}): the inotify limit is reached; raise it with \
             `sudo sysctl fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288`"
        )
    } else {
        format!("native file events unavailable ({e})")
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
