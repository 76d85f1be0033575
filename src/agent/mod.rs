//! The agent process: spawned in its own group once recorded, prompt on stdin, output
//! drained concurrently, every process it left stopped when it ends.

mod helpers;
mod live;
mod low_fds;
mod output;
mod reap;
mod serve;
mod spawn;
pub mod stream;

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::error::{split_command_line, Error, Result};
use live::{LiveLog, SharedLog, StdoutForm};
use output::{LogSink, SharedCapture};
use serve::{ExitWatch, InlineIo, Streams};
use spawn::{AgentProcess, SelfRecord, SpawnSpec};
pub use low_fds::reserve_low_fds;
pub use output::ready_log;

/// The agent command line, split into argv (no shell unless the user writes `sh -c …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The program to run, found on `PATH` unless it has a slash.
    pub program: String,
    /// Its arguments; the prompt goes on stdin, not here.
    pub args: Vec<String>,
}

impl AgentCommand {
    /// Split a command line with shell-like quoting, e.g. `claude -p --model 'x y'`.
    pub fn parse(line: &str) -> Result<AgentCommand> {
        let mut words = split_command_line("agent", line)?;
        let program = words.remove(0);
        Ok(AgentCommand {
            program,
            args: words,
        })
    }

    /// The program as an absolute path, found on `PATH` now rather than by the child
    /// after every fork (each miss is a failed `execve`). `None` if it is not found;
    /// spawning then reports it per task.
    pub fn resolve(&self) -> Option<PathBuf> {
        let program = Path::new(&self.program);
        if program.components().count() > 1 {
            // Absolute now: the agent runs in the task's directory, not the worker's.
            let program = std::path::absolute(program).ok()?;
            return is_executable(&program).then_some(program);
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

impl AgentCommand {
    /// The program as [`AgentCommand::resolve`] finds it, or why it cannot run: not
    /// found on `PATH` (the directories searched named) or not executable.
    pub fn locate(&self) -> Result<PathBuf> {
        if let Some(p) = self.resolve() {
            return Ok(p);
        }
        let program = Path::new(&self.program);
        let path = std::env::var("PATH").unwrap_or_default();
        let problem = if program.components().count() > 1 {
            match std::fs::metadata(program) {
                Err(_) => "does not exist".to_string(),
                Ok(m) if !m.is_file() => "is not a file".to_string(),
                Ok(_) => "is not executable".to_string(),
            }
        } else {
            let found = path
                .split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| Path::new(d).join(program))
                .find(|p| p.exists());
            match found {
                Some(p) => format!(
                    "is not executable ({} is there but may not be run; searched PATH={path})",
                    p.display()
                ),
                None => format!("is not found on PATH={path}"),
            }
        };
        Err(Error::AgentNotFound {
            program: self.program.clone(),
            problem,
        })
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
    /// The task's id: set as [`ENV_TASK_ID`], the marker that tells the task's
    /// processes from any other (see [`task_marker`]).
    pub task_id: String,
    pub env: Vec<(&'static str, String)>,
    /// The task's own variables (its `env`), set before `env`, which wins.
    pub task_env: Vec<(String, String)>,
    pub prompt: String,
    /// Live copy of stdout (the head live, the tail at the end: see `log_cap`).
    pub output_log: &'a Path,
    /// Bytes of stdout kept in memory for the result; the rest is only in the log.
    pub inline_cap: usize,
    /// Most bytes `output_log` holds: beyond it the middle is cut, marked by a line.
    pub log_cap: u64,
    /// Set when stdout is Claude Code's `stream-json`: the live log then shows each
    /// event rendered readable, and the raw lines are kept here (capped like the log).
    pub stream_raw: Option<&'a Path>,
    /// The spawning thread serves the agent's output itself while it waits for the
    /// agent ([`Agent::io_fds`], [`Agent::pump`]), instead of a helper thread woken a few
    /// times a task and handing the exit over. Taken only where the leader has a pidfd;
    /// any other path than a plain exit ([`Agent::stop`], [`Agent::finish`] early) hands
    /// the output to a helper first, so it never waits unread.
    pub serve_inline: bool,
}

/// What a spawn error says when a helper thread could not be started.
const THREAD_HINT: &str = " (could not start a thread to serve it)";

/// Debug variable (like `CONDUCTOR_DEBUG_WATCH_EVENTS`): the first N agent spawns of
/// this process fail with EAGAIN, as they do past a process limit (`ulimit -u`), which
/// root, and so a test run as root, is not held to.
pub const ENV_DEBUG_SPAWN_EAGAIN: &str = "CONDUCTOR_DEBUG_SPAWN_EAGAIN";

fn injected_spawn_failure() -> bool {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static LEFT: OnceLock<AtomicU32> = OnceLock::new();
    let left = LEFT.get_or_init(|| {
        AtomicU32::new(
            std::env::var(ENV_DEBUG_SPAWN_EAGAIN)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        )
    });
    left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

fn spawn_error(launch: &Launch<'_>, hint: &'static str, source: io::Error) -> Error {
    Error::Spawn {
        program: launch.command.program.clone(),
        hint,
        source,
    }
}

/// What to start for `launch`: the program found now if the worker could not find it
/// at its start, argv, the worker's environment with the launch's and the task id on
/// top, the directory, and where the child records itself.
fn spawn_spec<'a>(
    launch: &'a Launch<'a>,
    program: Option<&'a Path>,
    record: &Path,
) -> Result<SpawnSpec<'a>> {
    let program = match program {
        Some(p) => p,
        None => {
            return Err(spawn_error(
                launch,
                " (is it installed and on PATH? or give the worker another agent command)",
                io::ErrorKind::NotFound.into(),
            ))
        }
    };
    // Over the worker's own environment: the task's, then ours (which win).
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    for (k, v) in &launch.task_env {
        env.push((k.into(), v.into()));
    }
    for (k, v) in &launch.env {
        env.push((k.into(), v.into()));
    }
    env.push((ENV_TASK_ID.into(), launch.task_id.clone().into()));
    let argv = std::iter::once(program.as_os_str())
        .chain(launch.command.args.iter().map(OsStr::new))
        .collect();
    Ok(SpawnSpec {
        program,
        argv,
        env,
        cwd: launch.cwd,
        record: SelfRecord::new(record, &launch.task_id)?,
        stdin: launch.prompt.as_bytes(),
    })
}

/// Start the agent, which records itself at `record` before it execs: the child, the
/// channel that fires on its exit, and what must fire it.
fn start_recorded(
    launch: &Launch<'_>,
    record: &Path,
) -> Result<(AgentProcess, Receiver<()>, ExitWatch)> {
    // Not found when the worker started: look again (it may be installed since).
    let found_now;
    let program = match launch.program_path {
        Some(p) => Some(p),
        None => {
            found_now = launch.command.resolve();
            found_now.as_deref()
        }
    };
    let child = spawn::spawn(spawn_spec(launch, program, record)?).map_err(|failed| {
        let source = failed.source;
        let hint = if failed.at_exec && source.kind() == io::ErrorKind::NotFound {
            " (is it installed and on PATH? or give the worker another agent command)"
        } else {
            ""
        };
        spawn_error(launch, hint, source)
    })?;
    let pid = child.id();
    reap::register_leader(pid);
    let (exit_tx, exited) = bounded(1);
    match pidfd_open(pid) {
        Ok(fd) => return Ok((child, exited, Some((fd, exit_tx)))),
        Err(e) => tracing::debug!("no pidfd for agent {pid} ({e}): a helper waits for it"),
    }
    let waiter = helpers::run(move || {
        wait_exited_unreaped(pid);
        let _ = exit_tx.send(());
    });
    if let Err(e) = waiter {
        signal_group(pid, Signal::SIGKILL);
        reap::forget_leader(pid);
        let mut child = child;
        let _ = child.wait();
        return Err(spawn_error(launch, THREAD_HINT, e));
    }
    Ok((child, exited, None))
}

use crate::host::pidfd_open;

/// The task's id in every agent's environment: its presence ties a process to its task.
pub use crate::env::ENV_TASK_ID;

/// The environment entry every process of task `id` carries (unless it cleared it).
pub fn task_marker(id: &str) -> String {
    format!("{ENV_TASK_ID}={id}")
}

/// How long to wait for the output readers after the agent's processes are gone. A
/// descendant that left the group and cleared its environment may hold the pipes open
/// for ever; we then keep what was read so far rather than hang.
const READER_GRACE: Duration = Duration::from_secs(2);

/// A running agent. Its process group is signalled as a whole.
///
/// The leader is not reaped until its group has been killed: while it is an unreaped
/// zombie its pid, and so the group id, cannot be given to another process, so the
/// final `killpg` can never hit a stranger.
#[derive(Debug)]
pub struct Agent {
    pid: u32,
    start_time: std::sync::OnceLock<Option<u64>>,
    marker: String,
    child: AgentProcess,
    /// Fires once the leader has exited (it is left unreaped).
    exit_rx: Receiver<()>,
    exit_seen: bool,
    /// The output and exit watch while the spawning thread serves them
    /// ([`Launch::serve_inline`]).
    inline_io: Option<InlineIo>,
    output_bytes: Arc<AtomicU64>,
    stdout: SharedCapture,
    stderr: SharedCapture,
    readers_done: Receiver<()>,
    log: SharedLog,
    finished: bool,
}

/// The finished run.
#[derive(Debug)]
pub struct AgentOutput {
    pub status: ExitStatus,
    /// What stdout said: as printed (up to the inline cap), or for a `stream-json` run
    /// that ended with one, its final `result` event line.
    pub stdout: Vec<u8>,
    pub stdout_total: u64,
    pub stdout_truncated: bool,
    /// Bytes of stdout cut out of the middle of the log file to keep it under its cap.
    pub log_cut: u64,
    pub stderr: Vec<u8>,
    /// A `stream-json` run's last `rate_limit_event` line.
    pub limit_event: Option<Vec<u8>>,
}

impl Agent {
    /// Start the agent. It does not run until it has written its pid at `record`
    /// (where recovery looks), and never runs if that fails or this process dies
    /// first. Must be called from a long-lived thread: the parent-death signal fires
    /// when the spawning *thread* exits.
    pub fn spawn(mut launch: Launch<'_>, record: &Path) -> Result<Agent> {
        if injected_spawn_failure() {
            return Err(spawn_error(
                &launch,
                "",
                io::Error::from_raw_os_error(nix::libc::EAGAIN),
            ));
        }
        spawn::become_subreaper();
        let log = output::open_log(launch.output_log)?;
        let log = LiveLog::shared(LogSink::new(log, launch.output_log, launch.log_cap), 2);
        let form = match launch.stream_raw {
            None => StdoutForm::Raw,
            Some(path) => StdoutForm::Stream {
                // The raw copy is a keepsake: without it (a full disk) the run goes on.
                raw: match output::create_fresh(path) {
                    Ok(f) => Some(LogSink::new(f, path, launch.log_cap)),
                    Err(e) => {
                        tracing::warn!("the raw event stream will not be kept: {e}");
                        None
                    }
                },
                line_cap: launch.inline_cap,
            },
        };
        let (mut child, exit_rx, exit_watch) = start_recorded(&launch, record)?;
        let pid = child.id();
        let prompt = std::mem::take(&mut launch.prompt);
        let streams = match Streams::start(
            &mut child,
            prompt,
            (log, form),
            launch.inline_cap,
            exit_watch,
            launch.serve_inline,
        ) {
            Ok(s) => s,
            Err(e) => {
                // Out of threads (a container's pids limit): do not leave the agent running.
                signal_group(pid, Signal::SIGKILL);
                reap::forget_leader(pid);
                let _ = child.wait();
                return Err(spawn_error(&launch, THREAD_HINT, e));
            }
        };
        Ok(Agent {
            pid,
            start_time: std::sync::OnceLock::new(),
            marker: task_marker(&launch.task_id),
            child,
            exit_rx,
            exit_seen: false,
            inline_io: streams.inline_io,
            output_bytes: streams.output_bytes,
            stdout: streams.stdout,
            stderr: streams.stderr,
            readers_done: streams.readers_done,
            log: streams.log,
            finished: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Clock ticks since boot at which the agent started (for pid-reuse checks). Read
    /// at the first ask, not at the spawn (a task that ends at once never needs it):
    /// the process stays ours, unreaped, until we wait for it, so its entry is there —
    /// ask before [`Agent::finish`] reaps it.
    pub fn start_time(&self) -> Option<u64> {
        *self
            .start_time
            .get_or_init(|| crate::procfs::stat(self.pid).map(|s| s.start_time))
    }

    /// Bytes of stdout so far.
    pub fn output_bytes(&self) -> u64 {
        self.output_bytes.load(Ordering::Relaxed)
    }

    /// Fires once the agent has exited (for `select!`); then call [`Agent::note_exit`].
    pub fn exit_channel(&self) -> &Receiver<()> {
        &self.exit_rx
    }

    /// The leader's pidfd while this thread serves the agent ([`Launch::serve_inline`]):
    /// readable once it has exited (then call [`Agent::note_exit`]). `None` otherwise — a
    /// helper serves it, and tells the exit on [`Agent::exit_channel`].
    pub fn exit_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let (fd, _) = self.inline_io.as_ref()?.exit.as_ref()?;
        Some(fd.as_fd())
    }

    /// The output pipes still open while this thread serves them
    /// ([`Launch::serve_inline`]): wait for them with [`Agent::exit_fd`], then
    /// [`Agent::pump`]. Empty otherwise.
    pub fn io_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let Some(io) = &self.inline_io else {
            return Vec::new();
        };
        let out = io.out.as_ref().map(|(f, _)| f.as_fd());
        let err = io.err.as_ref().map(|(f, _)| f.as_fd());
        out.into_iter().chain(err).collect()
    }

    /// Read what the agent has written so far, without waiting (this thread serves its
    /// output: [`Launch::serve_inline`]).
    pub fn pump(&mut self) {
        if let Some(io) = &mut self.inline_io {
            io.pump();
        }
    }

    /// Record that the agent's leader exited ([`Agent::exit_channel`] fired, or
    /// [`Agent::exit_fd`] became readable). Output this thread serves is read to its end
    /// if it has one already; whatever is still open (a process of the agent's holds the
    /// pipes) goes to a helper.
    pub fn note_exit(&mut self) {
        self.exit_seen = true;
        if let Some(mut io) = self.inline_io.take() {
            if let Some((_, tx)) = io.exit.take() {
                let _ = tx.send(());
            }
            io.pump();
            io.hand_off();
        }
    }

    /// The output this thread served, handed to a helper: for any wait that does not
    /// poll the pipes itself.
    fn serve_elsewhere(&mut self) {
        if let Some(io) = self.inline_io.take() {
            io.hand_off();
        }
    }

    /// SIGTERM the group, wait up to `grace` for the agent to exit, then SIGKILL it.
    pub fn stop(&mut self, grace: Duration) {
        if self.exit_seen {
            return;
        }
        self.serve_elsewhere();
        signal_group(self.pid, Signal::SIGTERM);
        if self.exit_rx.recv_timeout(grace).is_err() {
            tracing::warn!(
                "agent {} ignored SIGTERM for {grace:?}; killing its group",
                self.pid
            );
            signal_group(self.pid, Signal::SIGKILL);
            let _ = self.exit_rx.recv();
        }
        self.exit_seen = true;
    }

    /// Wait for the agent to exit (if not yet seen), stop whatever it left running (in
    /// its group or escaped from it), reap it, and collect the output.
    pub fn finish(mut self) -> AgentOutput {
        self.serve_elsewhere();
        if !self.exit_seen {
            let _ = self.exit_rx.recv();
            self.exit_seen = true;
        }
        // No agent process outlives its task; background children would also hold the
        // pipes open and stall the readers. The leader is still unreaped here.
        signal_group(self.pid, Signal::SIGKILL);
        reap::forget_leader(self.pid);
        let status = self.child.wait().unwrap_or_else(|e| {
            tracing::error!("reaping agent {}: {e}", self.pid);
            ExitStatus::from_raw(0xff00)
        });
        self.finished = true;
        reap::reap_leftovers(self.pid, &self.marker);
        let deadline = std::time::Instant::now() + READER_GRACE;
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if self.readers_done.recv_timeout(left).is_err() {
                tracing::warn!(
                    "agent {}'s output pipes are still held open by a process we cannot \
                     tell is its; keeping the output read so far",
                    self.pid
                );
                break;
            }
        }
        let out = std::mem::take(&mut *self.stdout.lock().unwrap_or_else(|p| p.into_inner()));
        let err = std::mem::take(&mut *self.stderr.lock().unwrap_or_else(|p| p.into_inner()));
        let log_cut = self.log.lock().unwrap_or_else(|p| p.into_inner()).cut;
        // A stream's answer is its final event, kept whole however long the stream was.
        let (stdout, stdout_truncated) = match out.final_event {
            Some(event) => (event, false),
            None => {
                let cut = out.total > out.kept.len() as u64;
                (out.kept, cut)
            }
        };
        AgentOutput {
            status,
            stdout_truncated,
            stdout_total: out.total,
            log_cut,
            stdout,
            stderr: err.kept,
            limit_event: out.limit_event,
        }
    }
}

impl Drop for Agent {
    /// An agent dropped before [`Agent::finish`] (the worker is failing) is killed with
    /// its group, never left running.
    fn drop(&mut self) {
        if !self.finished {
            signal_group(self.pid, Signal::SIGKILL);
            reap::forget_leader(self.pid);
            let _ = self.child.wait();
        }
    }
}

/// Block until `pid` (our child) has exited, without reaping it.
fn wait_exited_unreaped(pid: u32) {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    loop {
        match waitid(
            Id::Pid(Pid::from_raw(pid as i32)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            // Exited (or already reaped, or not ours: nothing more to wait for).
            _ => return,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch with a task id of its own: the tests of this binary run at once, and a
    /// reaping leftovers stops every child of this process that carries its task's marker.
    fn launch<'a>(cmd: &'a AgentCommand, dir: &'a Path, log: &'a Path) -> Launch<'a> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        Launch {
            command: cmd,
            program_path: None,
            cwd: dir,
            task_id: format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            env: Vec::new(),
            task_env: Vec::new(),
            prompt: String::new(),
            output_log: log,
            inline_cap: 1024,
            log_cap: 1 << 20,
            stream_raw: None,
            serve_inline: false,
        }
    }

    #[test]
    fn an_agent_whose_record_fails_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        let cmd = AgentCommand::parse(&format!("touch {}", ran.display())).unwrap();
        let log = dir.path().join("output.log");
        // The record cannot be written: its directory does not exist.
        let record = dir.path().join("missing").join(".agent.json");
        let err = Agent::spawn(launch(&cmd, dir.path(), &log), &record).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("No such file"), "{text}");
        assert!(text.contains("could not record itself in"), "{text}");
        assert!(!text.contains("is it installed"), "{text}");
        assert!(!ran.exists(), "the agent ran unrecorded");
    }

    /// A script without `#!` runs under /bin/sh, as it does from a shell or with
    /// `execvp` (the kernel alone refuses it with ENOEXEC).
    #[test]
    fn a_script_without_a_shebang_runs_under_sh() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent-script");
        std::fs::write(&script, "read line; echo \"got $line from $0\"\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cmd = AgentCommand::parse(&script.display().to_string()).unwrap();
        let log = dir.path().join("output.log");
        let mut l = launch(&cmd, dir.path(), &log);
        l.prompt = "hello\n".into();
        let out = Agent::spawn(l, &dir.path().join(".agent.json"))
            .unwrap()
            .finish();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(text, format!("got hello from {}\n", script.display()));
    }

    #[test]
    fn the_agent_is_recorded_before_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(".agent.json");
        // The agent prints the record it finds when it starts.
        let cmd = AgentCommand::parse(&format!("cat {}", record.display())).unwrap();
        let log = dir.path().join("output.log");
        let l = launch(&cmd, dir.path(), &log);
        let task_id = l.task_id.clone();
        let agent = Agent::spawn(l, &record).unwrap();
        let pid = agent.pid();
        let out = agent.finish();
        assert!(out.status.success());
        let seen: crate::protocol::AgentRecord = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen.agent_pid, pid);
        assert_eq!(seen.task_id.to_string(), task_id);
    }

    /// The agent starts clean whatever the spawning thread had: only its three stdio
    /// descriptors open, no signal blocked, SIGPIPE not ignored (std ignores it here).
    #[test]
    fn the_agent_gets_only_its_stdio_and_a_clean_signal_state() {
        use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(".agent.json");
        let log = dir.path().join("output.log");
        let run = |line: &str| -> String {
            let cmd = AgentCommand::parse(line).unwrap();
            let mut usr1 = SigSet::empty();
            usr1.add(Signal::SIGUSR1);
            let mut before = SigSet::empty();
            pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&usr1), Some(&mut before)).unwrap();
            let spawned = Agent::spawn(launch(&cmd, dir.path(), &log), &record);
            pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None).unwrap();
            let out = spawned.unwrap().finish();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "{line}: {text}");
            text
        };

        // Beyond 0–2: what whoever started this test left open for its children, and
        // the one descriptor `ls` opens to read the directory.
        let inherited: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|fd| {
                // SAFETY: only the flags of a descriptor number are read.
                let fd_ref = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
                let flags = nix::fcntl::fcntl(fd_ref, nix::fcntl::FcntlArg::F_GETFD);
                *fd > 2 && flags.is_ok_and(|f| f & nix::libc::FD_CLOEXEC == 0)
            })
            .map(|fd| fd.to_string())
            .collect();
        let listed = run("ls /proc/self/fd");
        let fds: Vec<&str> = listed.split_whitespace().collect();
        for std_fd in ["0", "1", "2"] {
            assert!(fds.contains(&std_fd), "{listed}");
        }
        let others: Vec<&&str> = fds
            .iter()
            .filter(|fd| !["0", "1", "2"].contains(fd) && !inherited.iter().any(|i| i == *fd))
            .collect();
        assert_eq!(
            others.len(),
            1,
            "descriptors leaked into the agent: {listed}"
        );

        let status = run("grep -E ^Sig(Blk|Ign) /proc/self/status");
        let mask = |name: &str| -> u64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{status}");
        let sigpipe = 1u64 << (Signal::SIGPIPE as i32 - 1);
        assert_eq!(mask("SigIgn:") & sigpipe, 0, "{status}");
    }
}
