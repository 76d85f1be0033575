//! News read from a pipe instead of inotify: a process that owns the other end wakes its
//! reader with a byte (`conductor run` and its workers, see `pool::WakePipes`).
//!
//! Why: every inotify instance costs its process ~20 ms at exit here (its marks wait out
//! an SRCU grace period), and each file operation in a watched directory costs the
//! kernel an event. Between a process and the workers it started and owns, a pipe says
//! the same — "look again" — for neither.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use nix::errno::Errno;

use super::mode::OnChange;

/// What to do once every writer has closed its end (once).
pub type OnEnd = Box<dyn FnOnce() + Send>;

/// What to do with the bytes read, as they are read (before `on_change` is told): for
/// a reader whose writers say more than "look again". Returns whether `on_change` is
/// still to be told "anything may have changed" (`false`: the bytes said what changed,
/// and `on_bytes` has told its reader itself).
pub type OnBytes = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

pub(super) struct PipeNews {
    /// The read end, non-blocking.
    fd: OwnedFd,
    on_change: OnChange,
    on_bytes: Option<OnBytes>,
    on_end: Mutex<Option<OnEnd>>,
    /// Until every writer has closed its end: then it is readable for ever, and not
    /// waited on any more.
    open: AtomicBool,
    /// The last read found the pipe empty (a short read): the next [`PipeNews::wait`]
    /// polls at once instead of reading first only to hear `EAGAIN` — a byte written
    /// since makes the poll return at once. Two wake-ups a task in `conductor run`.
    drained: AtomicBool,
}

impl PipeNews {
    pub fn new(fd: OwnedFd, on_change: OnChange, on_end: OnEnd) -> std::io::Result<PipeNews> {
        crate::fsio::set_nonblocking(&fd, true)?;
        Ok(PipeNews {
            fd,
            on_change,
            on_bytes: None,
            on_end: Mutex::new(Some(on_end)),
            open: AtomicBool::new(true),
            drained: AtomicBool::new(false),
        })
    }

    /// Hand every byte read to `on_bytes` too.
    pub fn reading_bytes(mut self, on_bytes: OnBytes) -> PipeNews {
        self.on_bytes = Some(on_bytes);
        self
    }

    /// Read every byte waiting; told as "anything may have changed" when there was any,
    /// or when the writers are gone (then `on_end` too). Whether anything was read.
    pub fn tell_waiting(&self) -> bool {
        if !self.open.load(Ordering::SeqCst) {
            return false;
        }
        let mut buf = [0u8; 256];
        let (mut told, mut read_any) = (false, false);
        loop {
            match nix::unistd::read(&self.fd, &mut buf) {
                Ok(0) | Err(Errno::EBADF | Errno::EINVAL | Errno::EIO) => {
                    self.open.store(false, Ordering::SeqCst);
                    (self.on_change)(None);
                    let end = self.on_end.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(end) = end {
                        end();
                    }
                    return true;
                }
                Ok(n) => {
                    told |= match &self.on_bytes {
                        Some(on_bytes) => on_bytes(&buf[..n]),
                        None => true,
                    };
                    read_any = true;
                    if n < buf.len() {
                        // Empty as of this read: no second read to hear EAGAIN (a
                        // byte written since leaves the pipe readable for the next
                        // look or poll, and so does its writers' end).
                        self.drained.store(true, Ordering::SeqCst);
                        break;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    self.drained.store(true, Ordering::SeqCst);
                    break;
                }
                Err(_) => break,
            }
        }
        if told {
            (self.on_change)(None);
        }
        read_any
    }

    /// As [`super::InlineWatcher::wait`]: tell what is waiting, or wait at most
    /// `timeout` for a byte or for one of `fds`; the readable ones among `fds`.
    pub fn wait(&self, fds: &[BorrowedFd<'_>], timeout: Duration) -> u64 {
        // Found empty by the last read, a pipe is looked at by the poll alone.
        if !self.drained.swap(false, Ordering::SeqCst) && self.tell_waiting() {
            return 0;
        }
        // Once every writer is gone the pipe is readable for ever: not waited on.
        let own = self.open.load(Ordering::SeqCst).then(|| self.fd.as_fd());
        let (news, ready) = match super::readable::poll_readable(own, fds, timeout) {
            Ok(seen) => seen,
            Err(_) => {
                (self.on_change)(None);
                std::thread::sleep(Duration::from_millis(10).min(timeout));
                return 0;
            }
        };
        if news {
            self.tell_waiting();
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    fn news() -> (PipeNews, OwnedFd, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let told = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicBool::new(false));
        let (t, e) = (told.clone(), ended.clone());
        let on_change: OnChange = Arc::new(move |p| {
            assert!(
                p.is_none(),
                "a pipe tells only that anything may have changed"
            );
            t.fetch_add(1, Ordering::SeqCst);
        });
        let news = PipeNews::new(
            r,
            on_change,
            Box::new(move || e.store(true, Ordering::SeqCst)),
        )
        .unwrap();
        (news, w, told, ended)
    }

    #[test]
    fn bytes_waiting_are_told_once_and_a_quiet_pipe_times_out() {
        let (news, w, told, _) = news();
        nix::unistd::write(&w, b"abc").unwrap();
        assert_eq!(news.wait(&[], Duration::from_secs(30)), 0);
        assert_eq!(told.load(Ordering::SeqCst), 1, "one batch, one telling");
        assert_eq!(news.wait(&[], Duration::from_millis(20)), 0);
        assert_eq!(told.load(Ordering::SeqCst), 1);
    }

    /// A wait after a read that found the pipe empty polls without reading first: a
    /// byte written in between is told by that wait, and so is the writers' end.
    #[test]
    fn what_comes_after_the_pipe_was_found_empty_is_told_by_the_next_wait() {
        let (news, w, told, ended) = news();
        nix::unistd::write(&w, b"a").unwrap();
        assert_eq!(news.wait(&[], Duration::from_secs(30)), 0);
        assert_eq!(told.load(Ordering::SeqCst), 1);
        nix::unistd::write(&w, b"b").unwrap();
        news.wait(&[], Duration::from_secs(30));
        assert_eq!(told.load(Ordering::SeqCst), 2, "the byte after the short read");
        drop(w);
        news.wait(&[], Duration::from_secs(30));
        assert!(ended.load(Ordering::SeqCst), "the writers' end after the short read");
    }

    #[test]
    fn the_bytes_read_are_handed_on_before_the_telling() {
        let (news, w, told, _) = news();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, t) = (seen.clone(), told.clone());
        let news = news.reading_bytes(Box::new(move |b| {
            assert_eq!(t.load(Ordering::SeqCst), 0, "handed on before the telling");
            s.lock().unwrap().extend_from_slice(b);
            true
        }));
        nix::unistd::write(&w, b"r\x83r").unwrap();
        assert_eq!(news.wait(&[], Duration::from_secs(30)), 0);
        assert_eq!(*seen.lock().unwrap(), b"r\x83r");
        assert_eq!(told.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn bytes_that_say_what_changed_are_not_told_as_anything() {
        let (news, w, told, _) = news();
        let news = news.reading_bytes(Box::new(|_| false));
        nix::unistd::write(&w, b"s").unwrap();
        assert_eq!(
            news.wait(&[], Duration::from_secs(30)),
            0,
            "read, so no wait"
        );
        assert_eq!(told.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_writers_gone_is_told_once_then_the_pipe_is_not_waited_on() {
        let (news, w, told, ended) = news();
        drop(w);
        assert_eq!(news.wait(&[], Duration::from_secs(30)), 0);
        assert!(ended.load(Ordering::SeqCst));
        assert_eq!(told.load(Ordering::SeqCst), 1);
        // Readable for ever now, but not waited on: nothing more is told.
        news.wait(&[], Duration::from_millis(20));
        assert_eq!(told.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn another_descriptor_ends_the_wait_with_its_bit() {
        let (news, _w, _, _) = news();
        let (r2, w2) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        nix::unistd::write(&w2, b"x").unwrap();
        assert_eq!(news.wait(&[r2.as_fd()], Duration::from_secs(30)), 1);
    }
}
