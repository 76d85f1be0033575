//! The agent process: spawned in its own group, prompt on stdin, output drained concurrently.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::host;

/// The agent command line, split into argv (no shell unless the user writes `sh -c …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: String,
    pub args: Vec<String>,
}

impl AgentCommand {
    /// Split a command line with shell-like quoting, e.g. `claude -p --model 'x y'`.
    pub fn parse(line: &str) -> Result<AgentCommand> {
        let words = shlex::split(line)
            .ok_or_else(|| Error::Usage(format!("agent command {line:?} has unbalanced quotes")))?;
        let mut it = words.into_iter();
        let program = it
            .next()
            .ok_or_else(|| Error::Usage("agent command is empty".into()))?;
        Ok(AgentCommand {
            program,
            args: it.collect(),
        })
    }

    /// The program as an absolute path, found on `PATH` now rather than by the child
    /// after every fork (each miss is a failed `execve`). `None` if it is not found;
    /// spawning then reports it per task.
    pub fn resolve(&self) -> Option<PathBuf> {
        let program = Path::new(&self.program);
        if program.components().count() > 1 {
            return is_executable(program).then(|| program.to_path_buf());
        }
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            // Relative entries would mean the worker's cwd, not the agent's.
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(program))
            .find(|p| is_executable(p))
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl std::fmt::Display for AgentCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<&str> = std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect();
        f.write_str(&shlex::try_join(words.iter().copied()).unwrap_or_else(|_| words.join(" ")))
    }
}

/// Everything needed to start one agent run.
#[derive(Debug)]
pub struct Launch<'a> {
    pub command: &'a AgentCommand,
    /// `command.program` resolved on `PATH` (see [`AgentCommand::resolve`]).
    pub program_path: Option<&'a Path>,
    pub cwd: &'a Path,
    pub env: Vec<(&'static str, String)>,
    pub prompt: String,
    /// Live copy of stdout; truncated at the start of every run.
    pub output_log: &'a Path,
    /// Bytes of stdout kept in memory for the result; the rest is only in the log.
    pub inline_cap: usize,
}

/// What a stream reader collected.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

/// How much of stderr is kept (its tail): enough for the error line and some context.
const STDERR_TAIL: usize = 64 * 1024;

/// A running agent. Its process group is signalled as a whole.
#[derive(Debug)]
pub struct Agent {
    pid: u32,
    start_time: Option<u64>,
    exit_rx: Receiver<io::Result<ExitStatus>>,
    exited: Option<ExitStatus>,
    output_bytes: Arc<AtomicU64>,
    stdout: JoinHandle<io::Result<Captured>>,
    stderr: JoinHandle<io::Result<Captured>>,
    stdin: JoinHandle<()>,
}

/// The finished run.
#[derive(Debug)]
pub struct AgentOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stdout_total: u64,
    pub stdout_truncated: bool,
    pub stderr: Vec<u8>,
}

impl Agent {
    /// Start the agent. Must be called from a long-lived thread: the parent-death
    /// signal fires when the spawning *thread* exits.
    pub fn spawn(launch: Launch<'_>) -> Result<Agent> {
        let log = open_log(launch.output_log)?;
        let mut cmd = match launch.program_path {
            Some(p) => Command::new(p),
            None => Command::new(&launch.command.program),
        };
        cmd.args(&launch.command.args)
            .current_dir(launch.cwd)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id();
            // SAFETY: prctl and getppid are async-signal-safe; nothing here allocates.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                    // The worker may have died before prctl took effect.
                    if nix::unistd::getppid().as_raw() as u32 != parent {
                        return Err(io::Error::other("worker exited during spawn"));
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            program: launch.command.program.clone(),
            hint: if source.kind() == io::ErrorKind::NotFound {
                " (is it installed and on PATH? set the agent with --agent)"
            } else {
                ""
            },
            source,
        })?;
        let pid = child.id();
        let start_time = host::process_start_time(pid);
        let output_bytes = Arc::new(AtomicU64::new(0));

        let mut stdin = child.stdin.take().expect("stdin piped");
        let prompt = launch.prompt;
        let stdin = spawn_named("agent-stdin", move || {
            // EPIPE just means the agent does not read its stdin: not our failure.
            let _ = stdin.write_all(prompt.as_bytes());
        });
        let out = child.stdout.take().expect("stdout piped");
        let counter = Arc::clone(&output_bytes);
        let cap = launch.inline_cap;
        let stdout = spawn_named("agent-stdout", move || {
            drain_stdout(out, log, cap, &counter)
        });
        let err = child.stderr.take().expect("stderr piped");
        let stderr = spawn_named("agent-stderr", move || drain_tail(err, STDERR_TAIL));
        let (tx, exit_rx) = bounded(1);
        spawn_named("agent-wait", move || {
            let _ = tx.send(wait_child(child));
        });
        Ok(Agent {
            pid,
            start_time,
            exit_rx,
            exited: None,
            output_bytes,
            stdout,
            stderr,
            stdin,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Clock ticks since boot at which the agent started (for pid-reuse checks).
    pub fn start_time(&self) -> Option<u64> {
        self.start_time
    }

    /// Bytes of stdout so far.
    pub fn output_bytes(&self) -> u64 {
        self.output_bytes.load(Ordering::Relaxed)
    }

    /// Delivers the exit status once the agent exits (for `select!`).
    pub fn exit_channel(&self) -> &Receiver<io::Result<ExitStatus>> {
        &self.exit_rx
    }

    /// Record an exit status received from [`Agent::exit_channel`].
    pub fn note_exit(&mut self, status: io::Result<ExitStatus>) {
        self.exited = Some(status.unwrap_or_else(|e| {
            tracing::error!("waiting for agent {}: {e}", self.pid);
            ExitStatus::from_raw(0xff00)
        }));
    }

    /// SIGTERM the group, wait up to `grace`, then SIGKILL it; returns the exit status.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited.is_some() {
            return;
        }
        signal_group(self.pid, Signal::SIGTERM);
        match self.exit_rx.recv_timeout(grace) {
            Ok(st) => self.note_exit(st),
            Err(_) => {
                tracing::warn!(
                    "agent {} ignored SIGTERM for {grace:?}; killing its group",
                    self.pid
                );
                signal_group(self.pid, Signal::SIGKILL);
                let st = self
                    .exit_rx
                    .recv()
                    .unwrap_or_else(|_| Err(io::Error::other("agent waiter vanished")));
                self.note_exit(st);
            }
        }
    }

    /// Wait for exit (if not yet seen), kill whatever the agent left running in its
    /// group, and collect the output.
    pub fn finish(mut self) -> AgentOutput {
        if self.exited.is_none() {
            let st = self
                .exit_rx
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("agent waiter vanished")));
            self.note_exit(st);
        }
        // No agent process outlives its task: background children would also hold the
        // pipes open and stall the readers.
        signal_group(self.pid, Signal::SIGKILL);
        let _ = self.stdin.join();
        let out = join_capture(self.stdout, "stdout");
        let err = join_capture(self.stderr, "stderr");
        AgentOutput {
            status: self.exited.expect("exit recorded"),
            stdout_truncated: out.total > out.kept.len() as u64,
            stdout_total: out.total,
            stdout: out.kept,
            stderr: err.kept,
        }
    }
}

/// Send `sig` to the process group led by `pgid`; a group already gone is fine.
pub fn signal_group(pgid: u32, sig: Signal) {
    if let Ok(raw) = i32::try_from(pgid) {
        if raw > 1 {
            let _ = killpg(Pid::from_raw(raw), sig);
        }
    }
}

fn spawn_named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn thread")
}

fn wait_child(mut child: Child) -> io::Result<ExitStatus> {
    child.wait()
}

fn join_capture(h: JoinHandle<io::Result<Captured>>, what: &str) -> Captured {
    match h.join() {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::warn!("reading agent {what}: {e}");
            Captured::default()
        }
        Err(_) => Captured::default(),
    }
}

/// Open `output.log` empty: the worker readies an empty one after each task (the
/// finished run's log moves to `tasks/<id>.log`), so this truncates nothing.
fn open_log(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| Error::io("open", PathBuf::from(path), e))
}

fn drain_stdout(
    mut out: impl Read,
    mut log: File,
    cap: usize,
    counter: &AtomicU64,
) -> io::Result<Captured> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut c = Captured::default();
    let mut log_ok = true;
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buf[..n];
        if log_ok {
            if let Err(e) = log.write_all(chunk) {
                // Keep draining: a full disk must not block the agent on a full pipe.
                tracing::warn!("writing output.log: {e}");
                log_ok = false;
            }
        }
        let room = cap.saturating_sub(c.kept.len());
        c.kept.extend_from_slice(&chunk[..n.min(room)]);
        c.total += n as u64;
        counter.store(c.total, Ordering::Relaxed);
    }
    Ok(c)
}

fn drain_tail(mut err: impl Read, keep: usize) -> io::Result<Captured> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut c = Captured::default();
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        c.kept.extend_from_slice(&buf[..n]);
        c.total += n as u64;
        if c.kept.len() > 2 * keep {
            c.kept.drain(..c.kept.len() - keep);
        }
    }
    if c.kept.len() > keep {
        c.kept.drain(..c.kept.len() - keep);
    }
    Ok(c)
}
