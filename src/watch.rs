//! Directory watching: change events used only as wake-ups, with an explicit poll mode.
//!
//! On Linux the native watcher is inotify itself ([`native`]) with a mask of changes
//! only; elsewhere `notify`'s. The cheap poller ([`poll`]) stats, never walks.

#[cfg(target_os = "linux")]
mod native;
#[cfg(target_os = "linux")]
mod pipe;
#[cfg(target_os = "linux")]
pub use pipe::{OnBytes, OnEnd};
mod poll;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_channel::Sender;
#[cfg(not(target_os = "linux"))]
use notify::RecommendedWatcher;
use notify::{Config, Event, PollWatcher, RecursiveMode, Watcher};

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

/// Set to a file path, every process that watches writes there how many events its
/// watchers have received so far (a debugging and test aid: a read of a watched
/// directory must not count).
pub const ENV_DEBUG_WATCH_EVENTS: &str = "CONDUCTOR_DEBUG_WATCH_EVENTS";

static EVENTS_SEEN: AtomicU64 = AtomicU64::new(0);

/// How many raw events (native events, or changes a poller saw) this process's
/// watchers have received: each one woke a watcher thread.
pub fn events_seen() -> u64 {
    EVENTS_SEEN.load(Ordering::Relaxed)
}

/// Count `n` events, the last of them at `last`; written to the debug file if asked.
fn count_events(n: u64, last: Option<&Path>) {
    if n == 0 {
        return;
    }
    EVENTS_SEEN.fetch_add(n, Ordering::Relaxed);
    if let Some(counter) = DebugCounter::get() {
        counter.note(last);
    }
}

/// The debug counter's file ([`ENV_DEBUG_WATCH_EVENTS`]), kept by a thread of its own
/// that writes at most every [`DebugCounter::EVERY`]: written on the watcher's thread
/// for every batch of events, it took 40 % of that thread in a 1,000-task burst of the
/// very worker a benchmark counted events of. The last count is always written,
/// at most that interval late.
struct DebugCounter {
    path: PathBuf,
    /// The last changed path not yet written, if any is waiting.
    waiting: Mutex<Option<Option<PathBuf>>>,
    woken: Condvar,
}

impl DebugCounter {
    const EVERY: Duration = Duration::from_millis(50);

    /// The process's counter, started on first use; `None` unless asked for.
    fn get() -> Option<&'static DebugCounter> {
        static COUNTER: OnceLock<Option<&'static DebugCounter>> = OnceLock::new();
        *COUNTER.get_or_init(|| {
            let path = PathBuf::from(std::env::var_os(ENV_DEBUG_WATCH_EVENTS)?);
            let counter: &'static DebugCounter = Box::leak(Box::new(DebugCounter {
                path,
                waiting: Mutex::new(None),
                woken: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("conductor-events".into())
                .spawn(move || counter.keep())
                .ok()?;
            Some(counter)
        })
    }

    fn note(&self, last: Option<&Path>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        *waiting = Some(last.map(Path::to_path_buf));
        self.woken.notify_one();
    }

    fn keep(&self) {
        loop {
            let last = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(last) = waiting.take() {
                        break last;
                    }
                    waiting = self.woken.wait(waiting).unwrap_or_else(|p| p.into_inner());
                }
            };
            self.write(last.as_deref());
            // Events meanwhile wait for the next write: one per interval at most.
            std::thread::sleep(Self::EVERY);
        }
    }

    fn write(&self, last: Option<&Path>) {
        let text = serde_json::json!({
            "pid": std::process::id(),
            "events": events_seen(),
            "last": last.map(|p| p.display().to_string()),
        });
        let text = format!("{text}\n");
        // Swapped with a second name of this process's own: a write must not make and
        // free a file each time.
        let Some(name) = self.path.file_name() else {
            return;
        };
        let next = format!(".{}.{}.next", name.to_string_lossy(), std::process::id());
        let _ = crate::fsio::write_swapped_via(&self.path, OsStr::new(&next), text.as_bytes());
    }
}

/// How a directory is watched where events are native (polling looks at everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
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

/// Why we poll without being asked: a filesystem that delivers no events.
fn poll_reason(dirs: &[PathBuf], mode: WatchMode) -> Option<(Duration, String)> {
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
        Self::watch_changes_and_inboxes(dirs, &[], files, listed, mode, on_change)
    }

    /// [`DirWatcher::watch_changes`], and `inboxes` too, where only a file's arrival
    /// (created, linked, renamed in, or closed after writing) is told when events are
    /// native: what a worker watches its slot's directory for.
    pub fn watch_changes_and_inboxes(
        dirs: &[PathBuf],
        inboxes: &[PathBuf],
        files: &[PathBuf],
        listed: &[PathBuf],
        mode: WatchMode,
        on_change: OnChange,
    ) -> Result<Self> {
        let all: Vec<PathBuf> = inboxes.iter().chain(dirs).cloned().collect();
        let stat_poll = |interval: Duration, reason: String, on_change: OnChange| {
            // A path named both as a directory and as a file is looked at once.
            let mut unique = std::collections::HashSet::new();
            let paths: Vec<(PathBuf, poll::Look)> = all
                .iter()
                .chain(files)
                .filter(|p| unique.insert(*p))
                .map(|p| (p.clone(), look_for(p, listed)))
                .collect();
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

/// A native watcher that the waiting thread reads itself ([`InlineWatcher::wait`]), with
/// no thread of its own. For a worker: the kernel's wake-up goes straight to it (no
/// reader thread in between), and the changes its own bookkeeping makes beside its inbox
/// while it works are read in one batch at its next wait, not by a reader woken a few
/// times a task. Only where events are native (Linux inotify): elsewhere, and where a
/// filesystem has no events, [`InlineWatcher::start`] answers `None` and the caller
/// uses a [`DirWatcher`].
pub struct InlineWatcher {
    /// Taken only by `drop`.
    #[cfg(target_os = "linux")]
    inner: std::mem::ManuallyDrop<Source>,
}

/// Where an [`InlineWatcher`]'s news comes from.
#[cfg(target_os = "linux")]
enum Source {
    Inotify(native::Inline),
    /// Bytes on a pipe from a process that owns the other end: "look again".
    Pipe(pipe::PipeNews),
}

/// The inotify instance is closed on a short-lived thread of its own, as a
/// [`DirWatcher`]'s reader closes its own: the close blocks ~12–20 ms here (its marks
/// wait for an SRCU grace period), and the owner has better things to do meanwhile — a
/// `conductor run` stops its workers, whose own closes then wait out the same period.
#[cfg(target_os = "linux")]
impl Drop for InlineWatcher {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.inner` is not used again.
        let inner = unsafe { std::mem::ManuallyDrop::take(&mut self.inner) };
        if let Source::Inotify(inotify) = inner {
            // Not spawned (no thread to be had): the closure, and the instance with it,
            // is dropped here instead.
            let _ = std::thread::Builder::new()
                .name("watch-close".into())
                .spawn(move || drop(inotify));
        }
    }
}

impl std::fmt::Debug for InlineWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InlineWatcher")
    }
}

impl InlineWatcher {
    /// Watch `dirs` for every change and `inboxes` for files arriving (as
    /// [`DirWatcher::watch_changes_and_inboxes`] does), telling `on_change` of each
    /// changed path when the owner waits. `None` when events would not be native.
    pub fn start(
        dirs: &[PathBuf],
        inboxes: &[PathBuf],
        mode: WatchMode,
        on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        let all: Vec<PathBuf> = inboxes.iter().chain(dirs).cloned().collect();
        if poll_reason(&all, mode).is_some() {
            return Ok(None);
        }
        Self::start_native(dirs, inboxes, on_change)
    }

    /// News from the read end of a pipe instead of the filesystem: each batch of bytes is
    /// told as "anything may have changed" (`on_change(None)`), and once every writer
    /// has closed its end, `on_end` runs (once). For a process and the workers it owns
    /// (`pool::WakePipes`): no inotify instance, no event per file operation.
    #[cfg(target_os = "linux")]
    pub fn from_pipe(
        read_end: std::os::fd::OwnedFd,
        on_change: OnChange,
        on_end: OnEnd,
    ) -> std::io::Result<InlineWatcher> {
        Ok(InlineWatcher {
            inner: std::mem::ManuallyDrop::new(Source::Pipe(pipe::PipeNews::new(
                read_end, on_change, on_end,
            )?)),
        })
    }

    /// [`InlineWatcher::from_pipe`], each byte read also handed to `on_bytes`.
    #[cfg(target_os = "linux")]
    pub fn from_pipe_reading_bytes(
        read_end: std::os::fd::OwnedFd,
        on_bytes: OnBytes,
        on_change: OnChange,
        on_end: OnEnd,
    ) -> std::io::Result<InlineWatcher> {
        let news = pipe::PipeNews::new(read_end, on_change, on_end)?.reading_bytes(on_bytes);
        Ok(InlineWatcher {
            inner: std::mem::ManuallyDrop::new(Source::Pipe(news)),
        })
    }

    /// [`DirWatcher::published`], read inline: each name appearing in `dirs` is told.
    pub fn published(
        dirs: &[PathBuf],
        mode: WatchMode,
        on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        if poll_reason(dirs, mode).is_some() {
            return Ok(None);
        }
        let watched: Vec<_> = dirs.iter().map(|d| (d, How::Published)).collect();
        Self::start_watched(&watched, on_change)
    }

    #[cfg(target_os = "linux")]
    fn start_native(
        dirs: &[PathBuf],
        inboxes: &[PathBuf],
        on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        let watched: Vec<_> = dirs
            .iter()
            .map(|d| (d, How::Changes))
            .chain(inboxes.iter().map(|d| (d, How::Arrivals)))
            .collect();
        Self::start_watched(&watched, on_change)
    }

    #[cfg(target_os = "linux")]
    fn start_watched(
        watched: &[(&PathBuf, How)],
        on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        match native::Inline::start(watched, on_change) {
            Ok(inner) => Ok(Some(InlineWatcher {
                inner: std::mem::ManuallyDrop::new(Source::Inotify(inner)),
            })),
            Err(native::NativeError::Missing(path, e)) => Err(Error::Watch {
                path: path.clone(),
                source: notify::Error::io(e).add_path(path),
            }),
            // The caller's `DirWatcher` tries again, and says why it polls instead.
            Err(native::NativeError::Unavailable(_)) => Ok(None),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn start_native(
        _dirs: &[PathBuf],
        _inboxes: &[PathBuf],
        _on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        Ok(None)
    }

    #[cfg(not(target_os = "linux"))]
    fn start_watched(
        _watched: &[(&PathBuf, How)],
        _on_change: OnChange,
    ) -> Result<Option<InlineWatcher>> {
        Ok(None)
    }

    /// Tell what changed since the last wait, then wait at most `timeout` for a change
    /// or for one of `fds` to become readable (or hang up); what changed is told before
    /// this returns. Returns the readable ones, bit `i` for `fds[i]`. Returns after any
    /// change, wanted or not: the caller waits again for what it wants.
    #[cfg(target_os = "linux")]
    pub fn wait(&self, fds: &[std::os::fd::BorrowedFd<'_>], timeout: Duration) -> u64 {
        match &*self.inner {
            Source::Inotify(i) => i.wait(fds, timeout),
            Source::Pipe(p) => p.wait(fds, timeout),
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub fn wait(&self, _fds: &[std::os::fd::BorrowedFd<'_>], _timeout: Duration) -> u64 {
        unreachable!("never started off Linux")
    }

    /// Tell the changes already waiting, without waiting for any (one `read` when there
    /// are none): for a caller about to trust that nothing it was not told of changed.
    #[cfg(target_os = "linux")]
    pub fn tell_waiting(&self) {
        match &*self.inner {
            Source::Inotify(i) => i.tell_waiting(),
            Source::Pipe(p) => {
                p.tell_waiting();
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub fn tell_waiting(&self) {
        unreachable!("never started off Linux")
    }

    /// Wait until `wake` holds a wake-up (taken) — sent by this watcher's `on_change` for
    /// a change worth one —, `stop` is readable, or `timeout` passes.
    pub fn wait_for_wake(
        &self,
        wake: &crossbeam_channel::Receiver<()>,
        stop: Option<&ReadySignal>,
        timeout: Duration,
    ) -> Waited {
        let deadline = std::time::Instant::now() + timeout;
        let fds: Vec<_> = stop.map(ReadySignal::fd).into_iter().collect();
        loop {
            if wake.try_recv().is_ok() {
                return Waited::Wake;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Waited::Timeout;
            }
            if self.wait(&fds, left) & 1 != 0 {
                return Waited::Stop;
            }
        }
    }
}

/// Wait at most `timeout` (whole milliseconds, rounded up: a shorter wait must not spin)
/// for `own` (a watcher's own descriptor, when it has one to wait on) or one of `fds` to
/// be readable or hung up: whether `own` is, and the readable ones among `fds`, bit `i`
/// for `fds[i]`. Interrupted by a signal: nothing ready (the caller looks again).
pub fn poll_readable(
    own: Option<std::os::fd::BorrowedFd<'_>>,
    fds: &[std::os::fd::BorrowedFd<'_>],
    timeout: Duration,
) -> nix::Result<(bool, u64)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut polled: Vec<PollFd<'_>> = Vec::with_capacity(fds.len() + 1);
    polled.extend(own.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
    let first = polled.len();
    polled.extend(fds.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    match poll(
        &mut polled,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok((false, 0)),
        Err(e) => return Err(e),
    }
    let ready = |p: &PollFd<'_>| p.revents().is_some_and(|r| !r.is_empty());
    let bits = polled[first..]
        .iter()
        .enumerate()
        .filter(|(_, p)| ready(p))
        .fold(0u64, |bits, (i, _)| bits | (1 << i));
    Ok((first == 1 && ready(&polled[0]), bits))
}

/// Why [`InlineWatcher::wait_for_wake`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// A wake-up was taken from the channel.
    Wake,
    /// The stop descriptor is readable.
    Stop,
    /// The time ran out.
    Timeout,
}

/// A descriptor that becomes readable once a channel is ready (a message waiting, or
/// its senders gone), for a thread that waits on descriptors ([`InlineWatcher::wait`])
/// rather than on channels. A thread of its own only *looks* at the channel
/// (`Select::ready`): the message stays there for whoever takes it. Dropped, the thread
/// ends.
pub struct ReadySignal {
    fd: std::os::fd::OwnedFd,
    _done: crossbeam_channel::Sender<()>,
}

impl std::fmt::Debug for ReadySignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadySignal").field("fd", &self.fd).finish()
    }
}

impl ReadySignal {
    /// Watch `channel`; `whose` (a slot's directory, a root) names the waiter in an
    /// error (out of descriptors or threads).
    pub fn of(channel: &crossbeam_channel::Receiver<()>, whose: &Path) -> Result<ReadySignal> {
        use nix::fcntl::OFlag;
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .map_err(|e| Error::io("make a stop signal's pipe for", whose, e.into()))?;
        let (done, ended) = crossbeam_channel::bounded::<()>(0);
        let channel = channel.clone();
        std::thread::Builder::new()
            .name("stop-signal".into())
            .spawn(move || {
                let mut select = crossbeam_channel::Select::new();
                let ready = select.recv(&channel);
                select.recv(&ended);
                if select.ready() == ready {
                    let _ = nix::unistd::write(&write, b"x");
                }
                // Dropping `write` hangs the pipe up: readable too, if nobody wrote.
            })
            .map_err(|e| Error::io("start a stop signal's thread for", whose, e))?;
        Ok(ReadySignal {
            fd: read,
            _done: done,
        })
    }

    /// Readable once the channel was ready (and for good after).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

/// How the poller looks at `path`: read first when it is one of `listed` and on a
/// filesystem whose client caches a directory's attributes past a forced `stat`.
fn look_for(path: &PathBuf, listed: &[PathBuf]) -> poll::Look {
    if !listed.contains(path) {
        return poll::Look::Stat;
    }
    let read_first = crate::fs_kind::mount_of(path)
        .ok()
        .flatten()
        .is_some_and(|m| m.stat_needs_a_read_first());
    if read_first {
        tracing::debug!(
            "{} is read before each stat: its filesystem's client caches its attributes",
            path.display()
        );
        poll::Look::ReadThenStat
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

/// The name of the filesystem `dir` is on, if it is known not to deliver change
/// events to local watchers.
fn eventless_filesystem(dir: &Path) -> Option<String> {
    crate::fs_kind::of(dir)
        .ok()
        .flatten()
        .filter(|k| k.eventless)
        .map(|k| k.name)
}
