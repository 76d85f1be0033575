//! Starting the agent so that it never runs unrecorded: the child waits, before exec,
//! until the worker has written its pid where recovery looks.
//!
//! `Command::spawn` returns only once the child has exec'd, so the record cannot be
//! written by the spawning thread: the child sends its pid on one pipe to a helper
//! thread, which records it and answers on another pipe. If the worker dies first,
//! that pipe's write end closes, the child reads end-of-file and exits without exec.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Once;

use crossbeam_channel::{bounded, Receiver, Sender};
use nix::fcntl::OFlag;
use nix::libc;

use crate::error::{Error, Result};
use crate::procfs;

/// Called with the agent's pid and start time before it may exec; an error keeps it
/// from ever running.
pub type Record = Box<dyn FnOnce(u32, Option<u64>) -> Result<()> + Send>;

/// Exit status of a child that was never released to exec (its worker died, or the
/// record could not be written).
pub const EXIT_UNRECORDED: i32 = 125;

/// The two pipes of the handshake, both close-on-exec: the agent keeps none of them.
pub(super) struct Handshake {
    pid_rx: OwnedFd,
    pid_tx: OwnedFd,
    go_rx: OwnedFd,
    go_tx: OwnedFd,
}

/// What the helper thread reports back to the spawning thread.
pub(super) struct Helper {
    /// The record's outcome with the agent's start time; closed without a message when
    /// no child ever reported its pid.
    pub recorded: Receiver<Result<Option<u64>>>,
    /// Send the pid once spawn succeeded: the helper then waits for the agent's exit.
    pub spawned: Sender<u32>,
    /// Fires once the agent has exited (left unreaped).
    pub exited: Receiver<()>,
}

impl Handshake {
    pub fn new() -> Result<Handshake> {
        let pipe = || {
            nix::unistd::pipe2(OFlag::O_CLOEXEC)
                .map_err(|e| Error::io("create a pipe for", "the agent", io::Error::from(e)))
        };
        let (pid_rx, pid_tx) = pipe()?;
        let (go_rx, go_tx) = pipe()?;
        Ok(Handshake {
            pid_rx,
            pid_tx,
            go_rx,
            go_tx,
        })
    }

    /// Arm `cmd` (already in its own process group) to wait for the record before exec.
    pub fn arm(&self, cmd: &mut Command) {
        let fds = ChildFds {
            pid_rx: self.pid_rx.as_raw_fd(),
            pid_tx: self.pid_tx.as_raw_fd(),
            go_rx: self.go_rx.as_raw_fd(),
            go_tx: self.go_tx.as_raw_fd(),
            parent: std::process::id(),
        };
        // SAFETY: `child_side` makes only async-signal-safe calls (close, prctl,
        // getppid, getpid, write, read, _exit) and neither allocates nor locks.
        unsafe {
            cmd.pre_exec(move || child_side(fds));
        }
    }

    /// Start the helper thread ("agent-wait"): it records the pid the child sends,
    /// releases the child, then waits for the agent to exit.
    pub fn serve(self, record: Record) -> io::Result<(Helper, SpawnSide)> {
        let (recorded_tx, recorded) = bounded(1);
        let (spawned, spawned_rx) = bounded::<u32>(1);
        let (exit_tx, exited) = bounded(1);
        let Handshake {
            pid_rx,
            pid_tx,
            go_rx,
            go_tx,
        } = self;
        std::thread::Builder::new()
            .name("agent-wait".into())
            .spawn(move || {
                let mut pid = [0u8; 4];
                if File::from(pid_rx).read_exact(&mut pid).is_err() {
                    return; // No child got that far: spawn itself failed.
                }
                let pid = u32::from_ne_bytes(pid);
                let start = procfs::stat(pid).map(|s| s.start_time);
                let outcome = record(pid, start).and_then(|()| {
                    File::from(go_tx)
                        .write_all(b"g")
                        .map_err(|e| Error::io("release", "the agent", e))
                });
                let _ = recorded_tx.send(outcome.map(|()| start));
                if let Ok(pid) = spawned_rx.recv() {
                    super::wait_exited_unreaped(pid);
                    let _ = exit_tx.send(());
                }
            })?;
        Ok((
            Helper {
                recorded,
                spawned,
                exited,
            },
            SpawnSide {
                _pid_tx: pid_tx,
                _go_rx: go_rx,
            },
        ))
    }
}

/// The parent's copies of the child's ends: dropped right after spawn returns, so the
/// helper sees end-of-file if no child ever wrote to it.
pub(super) struct SpawnSide {
    _pid_tx: OwnedFd,
    _go_rx: OwnedFd,
}

#[derive(Clone, Copy)]
struct ChildFds {
    pid_rx: RawFd,
    pid_tx: RawFd,
    go_rx: RawFd,
    go_tx: RawFd,
    parent: u32,
}

/// Runs in the forked child before exec: only async-signal-safe calls, no allocation
/// (errors are raw errnos).
fn child_side(fds: ChildFds) -> io::Result<()> {
    // SAFETY: plain syscalls on fds this child owns and on a stack buffer.
    unsafe {
        // Our copy of the answer's write end would keep the read below from ever
        // seeing the worker's death.
        libc::close(fds.go_tx);
        libc::close(fds.pid_rx);
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The worker may have died before prctl took effect.
        if libc::getppid() as u32 != fds.parent {
            libc::_exit(EXIT_UNRECORDED);
        }
        let pid = libc::getpid().to_ne_bytes();
        if libc::write(fds.pid_tx, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
            libc::_exit(EXIT_UNRECORDED);
        }
        let mut answer = 0u8;
        loop {
            let n = libc::read(fds.go_rx, (&mut answer as *mut u8).cast(), 1);
            if n == 1 {
                return Ok(());
            }
            if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // End-of-file: the worker died, or could not record us. Never run.
            libc::_exit(EXIT_UNRECORDED);
        }
    }
}

/// Make this process the reaper of its orphaned descendants, so that a process that
/// left the agent's session is reparented to us rather than to init, and can be found
/// and stopped when its task ends (see `sweep`). Once per process.
pub(super) fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
            tracing::warn!(
                "cannot become a child subreaper ({}); an agent's escaped descendants \
                 may outlive their task",
                io::Error::last_os_error()
            );
        }
    });
}

/// After a failed record the child exits on its own: reap it.
pub(super) fn reap_unreleased(mut child: Child) {
    let _ = child.wait();
}
