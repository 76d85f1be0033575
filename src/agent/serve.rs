//! Serving a running agent's pipes: its prompt fed to stdin, its stdout and stderr
//! drained as they come, its leader's exit told — by one helper's poll loop, or inline
//! by the thread that spawned it.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::live::{self, SharedLog, StdoutForm};
use super::spawn::AgentProcess;
use super::helpers;
use super::output::SharedCapture;

/// How the agent's exit is told: by its pidfd, polled by the helper that reads its
/// output ([`serve_io`]), or — a kernel without `pidfd_open` — by a helper of its own.
pub(super) type ExitWatch = Option<(std::os::fd::OwnedFd, Sender<()>)>;

/// How much of stderr is kept (its tail): enough for the error line and some context.
const STDERR_TAIL: usize = 64 * 1024;

/// The threads feeding the agent its prompt and collecting its output.
pub(super) struct Streams {
    /// The output and exit watch, when the spawning thread serves them itself.
    pub(super) inline_io: Option<InlineIo>,
    pub(super) output_bytes: Arc<AtomicU64>,
    pub(super) stdout: SharedCapture,
    pub(super) stderr: SharedCapture,
    /// Gets one message from each output reader when it is done.
    pub(super) readers_done: Receiver<()>,
    pub(super) log: SharedLog,
}

impl Streams {
    /// Write `prompt` to the child's stdin; copy its stdout to `log` in `form` (keeping
    /// `inline_cap` bytes) and its stderr's lines, marked; keep the tail of its stderr;
    /// fire `exit` when the leader exits. Fails when a thread cannot be started.
    pub(super) fn start(
        child: &mut AgentProcess,
        prompt: String,
        (log, form): (SharedLog, StdoutForm),
        cap: usize,
        exit: ExitWatch,
        serve_inline: bool,
    ) -> io::Result<Streams> {
        let output_bytes = Arc::new(AtomicU64::new(0));
        let stdout: SharedCapture = Arc::default();
        let stderr: SharedCapture = Arc::default();
        let (done_tx, readers_done) = bounded::<()>(2);

        // What the pipe did not take before the agent started.
        let (stdin, written) = (child.stdin.take(), child.stdin_written);
        let out = child.stdout.take().expect("stdout piped");
        let err = child.stderr.take().expect("stderr piped");
        let out_drain = live::OutDrain::new(
            form,
            Arc::clone(&log),
            cap,
            Arc::clone(&output_bytes),
            Arc::clone(&stdout),
        );
        let err_drain = live::ErrDrain::new(STDERR_TAIL, Arc::clone(&stderr), Arc::clone(&log));
        if let Some(stdin) = stdin {
            feed_stdin(stdin, &prompt.as_bytes()[written..])?;
        }
        let inline_io = if serve_inline && exit.is_some() {
            // Read until the pipe is empty, never waiting: the caller polls.
            super::spawn::nonblocking_fresh(&out)?;
            super::spawn::nonblocking_fresh(&err)?;
            Some(InlineIo {
                out: Some((out, out_drain)),
                err: Some((err, err_drain)),
                exit,
                done: done_tx,
                buf: vec![0u8; FIRST_CHUNK],
            })
        } else {
            helpers::run(move || {
                serve_io(
                    Some((out, out_drain)),
                    Some((err, err_drain)),
                    exit,
                    &done_tx,
                )
            })?;
            None
        };
        Ok(Streams {
            inline_io,
            output_bytes,
            stdout,
            stderr,
            readers_done,
            log,
        })
    }
}

/// A running agent's one helper: reads its stdout and stderr as they come (each end
/// sends on `done`) and tells of the leader's exit by its pidfd — the work of three
/// blocking threads, and their wake-ups, in one poll loop.
fn serve_io(
    out: Option<(File, live::OutDrain)>,
    err: Option<(File, live::ErrDrain)>,
    exit: ExitWatch,
    done: &Sender<()>,
) {
    use std::os::fd::AsFd;
    let (mut out, mut err, mut exit) = (out, err, exit);
    // Small until an agent fills it: a thousand agents at once each had 64 KiB of
    // zeroed (so resident) buffer, however little they printed.
    let mut buf = vec![0u8; FIRST_CHUNK];
    while out.is_some() || err.is_some() || exit.is_some() {
        let ready = {
            let mut fds = Vec::with_capacity(3);
            let mut which = Vec::with_capacity(3);
            if let Some((f, _)) = &out {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
                which.push(Source::Out);
            }
            if let Some((f, _)) = &err {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
                which.push(Source::Err);
            }
            if let Some((fd, _)) = &exit {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                which.push(Source::Exit);
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    // Only a shortage (ENOMEM) with these descriptors: ending here would
                    // tell of an exit that did not happen. Look again in a moment.
                    tracing::warn!("polling the agent's output: {e}; trying again");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
            fds.iter()
                .zip(&which)
                .filter(|(f, _)| f.revents().is_some_and(|r| !r.is_empty()))
                .map(|(_, w)| *w)
                .collect::<Vec<_>>()
        };
        for source in ready {
            match source {
                Source::Out => {
                    read_out(&mut out, &mut buf, done);
                }
                Source::Err => {
                    read_err(&mut err, &mut buf, done);
                }
                Source::Exit => {
                    let _ = exit.take().expect("polled").1.send(());
                }
            }
        }
    }
}

/// One read of an agent's output pipe (`what`: "stdout", "stderr") into its drain, at
/// most `room` bytes of `buf`: `Some(n)` when `n` bytes were fed (0: interrupted, read
/// again), `None` when there is nothing to read now (a non-blocking pipe, empty) or the
/// stream is gone. At its end (or a failed read) the drain is finished, the stream
/// dropped and `done` told.
fn read_stream<D: live::Drain>(
    stream: &mut Option<(File, D)>,
    buf: &mut [u8],
    done: &Sender<()>,
    what: &str,
) -> Option<usize> {
    use std::io::Read;
    let (f, drain) = stream.as_mut()?;
    match f.read(buf) {
        Ok(n) if n > 0 => {
            drain.feed(&buf[..n]);
            Some(n)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Some(0),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        ended => {
            if let Err(e) = ended {
                tracing::warn!("reading agent {what}: {e}");
            }
            stream.take().expect("open").1.finish();
            let _ = done.send(());
            None
        }
    }
}

/// [`read_stream`] for stdout, whose buffer doubles, up to [`live::OUT_CHUNK`], each
/// time a read fills it; whether to read again.
fn read_out(
    out: &mut Option<(File, live::OutDrain)>,
    buf: &mut Vec<u8>,
    done: &Sender<()>,
) -> bool {
    let Some(n) = read_stream(out, buf, done, "stdout") else {
        return false;
    };
    if n == buf.len() && n < live::OUT_CHUNK {
        buf.resize(n * 2, 0);
    }
    true
}

/// [`read_stream`] for stderr, at most [`live::ERR_CHUNK`] at a time.
fn read_err(err: &mut Option<(File, live::ErrDrain)>, buf: &mut [u8], done: &Sender<()>) -> bool {
    let room = buf.len().min(live::ERR_CHUNK);
    read_stream(err, &mut buf[..room], done, "stderr").is_some()
}

/// An agent's output and exit watch served by the thread that spawned it (see
/// [`Launch::serve_inline`]).
pub(super) struct InlineIo {
    pub(super) out: Option<(File, live::OutDrain)>,
    pub(super) err: Option<(File, live::ErrDrain)>,
    pub(super) exit: ExitWatch,
    done: Sender<()>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for InlineIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineIo")
            .field("out", &self.out.is_some())
            .field("err", &self.err.is_some())
            .field("exit", &self.exit.is_some())
            .finish()
    }
}

/// Most reads of each pipe one [`InlineIo::pump`] makes: an agent that writes faster than
/// its output is handled would otherwise keep the worker's thread reading, away from its
/// deadlines, cancels and heartbeats; what is left is read at the next wait.
const PUMP_READS: usize = 16;

impl InlineIo {
    /// Read what both pipes hold now, without waiting (at most [`PUMP_READS`] reads each).
    pub(super) fn pump(&mut self) {
        for _ in 0..PUMP_READS {
            if !read_out(&mut self.out, &mut self.buf, &self.done) {
                break;
            }
        }
        for _ in 0..PUMP_READS {
            if !read_err(&mut self.err, &mut self.buf, &self.done) {
                break;
            }
        }
    }

    fn is_done(&self) -> bool {
        self.out.is_none() && self.err.is_none() && self.exit.is_none()
    }

    /// Hand what is left to a helper (as if it had been served there from the start).
    /// Without a thread to be had (a pids limit reached meanwhile) the rest of the
    /// output is not kept, and the exit is told at once: a caller stopping the agent
    /// then goes on to kill its group without its grace.
    pub(super) fn hand_off(self) {
        if self.is_done() {
            return;
        }
        let InlineIo {
            out,
            err,
            exit,
            done,
            ..
        } = self;
        let told = exit.as_ref().map(|(_, tx)| tx.clone());
        if let Err(e) = helpers::run(move || serve_io(out, err, exit, &done)) {
            tracing::warn!("no thread to read the agent's output ({e}): the rest is not kept");
            if let Some(tx) = told {
                let _ = tx.send(());
            }
        }
    }
}

/// [`serve_io`]'s first read size; it doubles, up to [`live::OUT_CHUNK`], each time
/// stdout fills it.
const FIRST_CHUNK: usize = 4096;

/// What [`serve_io`] polls.
#[derive(Clone, Copy)]
enum Source {
    Out,
    Err,
    Exit,
}

/// Give the agent the rest of its prompt (what did not fit in the pipe before it
/// started) and close its stdin: what the pipe takes now is written at once, the rest
/// by a thread of its own, as the agent reads. EPIPE just means the agent does not read
/// its stdin: not our failure.
fn feed_stdin(stdin: File, bytes: &[u8]) -> io::Result<()> {
    let mut stdin = stdin;
    crate::fsio::set_nonblocking(&stdin, true)?;
    let mut written = 0;
    while written < bytes.len() {
        match stdin.write(&bytes[written..]) {
            Ok(0) => return Ok(()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                crate::fsio::set_nonblocking(&stdin, false)?;
                let rest = bytes[written..].to_vec();
                return helpers::run(move || {
                    let _ = stdin.write_all(&rest);
                })
                .map(drop);
            }
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}
