//! `InlineWatcher`: native events read by the waiting thread itself, with no thread of
//! its own; waiting on descriptors (`poll_readable`) and for a wake-up (`Waited`).

use std::path::PathBuf;
use std::time::Duration;

#[cfg(target_os = "linux")]
use super::native;
#[cfg(target_os = "linux")]
use super::pipe::{self, OnBytes, OnEnd};
use super::mode::{poll_reason, How, OnChange, WatchMode};
use super::ready_signal::ReadySignal;
#[cfg(target_os = "linux")]
use crate::error::Error;
use crate::error::Result;

/// A native watcher that the waiting thread reads itself ([`InlineWatcher::wait`]), with
/// no thread of its own. For a worker: the kernel's wake-up goes straight to it (no
/// reader thread in between), and the changes its own bookkeeping makes beside its inbox
/// while it works are read in one batch at its next wait, not by a reader woken a few
/// times a task. Only where events are native (Linux inotify): elsewhere, and where a
/// filesystem has no events, [`InlineWatcher::start`] answers `None` and the caller
/// uses a [`DirWatcher`](super::DirWatcher).
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
/// [`DirWatcher`](super::DirWatcher)'s reader closes its own: the close blocks ~12–20 ms here (its marks
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
    /// [`DirWatcher::watch_changes_and_inboxes`](super::DirWatcher::watch_changes_and_inboxes) does), telling `on_change` of each
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

    /// [`DirWatcher::published`](super::DirWatcher::published), read inline: each name appearing in `dirs` is told.
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
