//! `ReadySignal`: a descriptor that becomes readable once a channel is ready, for a
//! thread that waits on descriptors rather than on channels.

use std::path::Path;

use crate::error::{Error, Result};

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
