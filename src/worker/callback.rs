//! The root's `callback` (config.json): a shell command run when a task a worker ran
//! has ended, off the worker's path.
//!
//! It starts once the result is published and the task's locks are released, in a
//! process group of its own, with the task's id, state, slot, exit code and result
//! path in its environment. A thread of its own waits for it: past
//! `callbackTimeoutSecs` its group gets SIGTERM, then SIGKILL after [`KILL_GRACE`];
//! the thread reaps it and logs its output and how it ended. Nothing it does reaches
//! the task (its result is already written) or the worker's next pickup. Each is
//! recorded in the slot until reaped, so that if the worker dies first, whoever
//! recovers the slot ends it ([`crate::recovery::callbacks`]).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use nix::sys::signal::Signal;

use crate::config::Config;
use crate::env::{ENV_HOME, ENV_TASK_ID, ENV_WORKER};
use crate::layout::{Root, Slot};
use crate::protocol::{Outcome, TaskId, TaskResult};
use crate::tasks::TaskState;

/// The callback's environment: the task's state (`done`, `failed`, `timeout`,
/// `cancelled`, `interrupted`, `rejected`, as `conductor tasks` says).
pub const ENV_TASK_STATE: &str = "CONDUCTOR_TASK_STATE";
/// The slot whose worker ran the task.
pub const ENV_SLOT: &str = "CONDUCTOR_SLOT";
/// The agent's exit code (empty when it had none: killed by a signal, never started).
pub const ENV_EXIT_CODE: &str = "CONDUCTOR_EXIT_CODE";
/// The path of the task's result file (`workers/<N>/results/<id>.json`).
pub const ENV_RESULT: &str = "CONDUCTOR_RESULT";

/// How long a callback gets after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = crate::recovery::callbacks::KILL_GRACE;
/// Most bytes of each of its stdout and stderr that are logged.
const OUTPUT_KEPT: usize = 8 * 1024;

/// The process groups of the callbacks this process started and has not reaped yet.
static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops the callbacks still running when dropped (the worker's loop ended): after
/// [`KILL_GRACE`] for them to end on their own, SIGTERM to each group, SIGKILL to what
/// is left after another. A callback outlives
/// its worker no more than it outlives its timeout.
pub(super) struct StopOnDrop;

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let groups = live().clone();
        if groups.is_empty() {
            return;
        }
        // A callback started by the stop itself (a result whose commit the stop paid)
        // gets a grace to end on its own before it is told to stop.
        if ended_within_grace() {
            return;
        }
        let groups = live().clone();
        tracing::info!("stopping {} callback(s) still running", groups.len());
        for g in &groups {
            crate::agent::signal_group(*g, Signal::SIGTERM);
        }
        if ended_within_grace() {
            return;
        }
        for g in live().iter() {
            crate::agent::signal_group(*g, Signal::SIGKILL);
        }
    }
}

/// Whether every callback ended within [`KILL_GRACE`] (their watching threads reap them
/// and take them off the list).
fn ended_within_grace() -> bool {
    let deadline = std::time::Instant::now() + KILL_GRACE;
    while !live().is_empty() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Start the root's callback for task `id`, which this worker refused at pickup
/// (answered `rejected` with `reason`, at `result_path`).
pub(super) fn run_rejected(
    config: &Config,
    root: &Root,
    slot: Slot,
    id: &TaskId,
    reason: &str,
    result_path: PathBuf,
) {
    if config.callback.is_some() {
        let r = TaskResult::failed(id.clone(), Outcome::Rejected, format!("rejected: {reason}"));
        run(config, root, slot, &r, result_path);
    }
}

/// Start the root's callback for `result` (ended on `slot`, published at
/// `result_path`) if one is configured. Returns at once; a failure to start it is logged.
pub(super) fn run(
    config: &Config,
    root: &Root,
    slot: Slot,
    result: &TaskResult,
    result_path: PathBuf,
) {
    let Some(command) = config.callback.clone() else {
        return;
    };
    let id = result.task_id.to_string();
    let state = TaskState::of_result(result).as_str();
    let exit_code = result.exit_code.map(|c| c.to_string()).unwrap_or_default();
    let mut cmd = shell_command(&command, root, slot, &id, state, &exit_code, &result_path);
    let timeout = config.callback_timeout();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("callback for task {id}: cannot start `sh -c {command}`: {e}");
            return;
        }
    };
    let pid = child.id();
    let forget = track(root, slot, pid, &result.task_id);
    let out = child.stdout.take().map(collect);
    let err = child.stderr.take().map(collect);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::Builder::new()
        .name(format!("callback-wait-{id}"))
        .spawn(move || {
            let _ = tx.send(child.wait());
        });
    if let Err(e) = waiter {
        // The child is reaped by nobody now: stop it rather than leave it unbounded.
        crate::agent::signal_group(pid, Signal::SIGKILL);
        forget();
        tracing::warn!("callback for task {id}: cannot start a thread to wait for it: {e}");
        return;
    }
    let forget_after = forget.clone();
    let watch = move || {
        let ended = ended_within(&rx, pid, timeout);
        forget_after();
        log_ending(&id, state, &ended, out, err);
    };
    if let Err(e) = std::thread::Builder::new()
        .name("callback".into())
        .spawn(watch)
    {
        // Its waiter reaps it: the group id may be someone else's after that.
        crate::agent::signal_group(pid, Signal::SIGKILL);
        forget();
        tracing::warn!(
            "callback for task {}: cannot start a thread to watch it: {e}",
            result.task_id
        );
    }
}

/// How the callback ended, waited for at most `timeout` (then stopped: SIGTERM to its
/// group, SIGKILL after a grace).
fn ended_within(
    rx: &crossbeam_channel::Receiver<std::io::Result<std::process::ExitStatus>>,
    pid: u32,
    timeout: Duration,
) -> String {
    match rx.recv_timeout(timeout) {
        Ok(status) => describe(status),
        Err(RecvTimeoutError::Disconnected) => "ended (not seen how)".to_string(),
        Err(RecvTimeoutError::Timeout) => {
            crate::agent::signal_group(pid, Signal::SIGTERM);
            let how = match rx.recv_timeout(KILL_GRACE) {
                Ok(_) => "stopped with SIGTERM",
                Err(_) => {
                    crate::agent::signal_group(pid, Signal::SIGKILL);
                    let _ = rx.recv_timeout(KILL_GRACE);
                    "killed with SIGKILL"
                }
            };
            format!("ran over its {}s timeout: {how}", timeout.as_secs())
        }
    }
}

/// The callback's ending logged with what it wrote: at INFO when it exited 0, else at
/// WARN.
fn log_ending(id: &str, state: &str, ended: &str, out: Option<Collected>, err: Option<Collected>) {
    // The output is whatever was written before the pipes closed; a process
    // that escaped the group and holds them is not waited for.
    let text = |o: Option<Collected>| o.map(|c| c.take()).unwrap_or_default();
    let (stdout, stderr) = (text(out), text(err));
    let ok = ended == "exited 0";
    let mut line = format!("callback for task {id} ({state}) {ended}");
    for (name, s) in [("stdout", stdout), ("stderr", stderr)] {
        let s = s.trim_end();
        if !s.is_empty() {
            line.push_str(&format!("; {name}: {}", s.replace('\n', " | ")));
        }
    }
    if ok {
        tracing::info!("{line}");
    } else {
        tracing::warn!("{line}");
    }
}

/// `sh -c CALLBACK` in a group of its own, with the task's facts in its environment.
fn shell_command(
    command: &str,
    root: &Root,
    slot: Slot,
    id: &str,
    state: &str,
    exit_code: &str,
    result_path: &std::path::Path,
) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Not an agent: sub-commands it runs (`conductor submit`) are not nested.
        .env_remove(ENV_WORKER)
        .env(ENV_HOME, root.path())
        .env(crate::hooks::ENV_EVENT, "finished")
        .env(ENV_TASK_ID, id)
        .env(ENV_TASK_STATE, state)
        .env(ENV_SLOT, slot.to_string())
        .env(ENV_EXIT_CODE, exit_code)
        .env(ENV_RESULT, result_path);
    cmd
}

/// List callback group `pid` as live in this process, and record it in the slot for
/// whoever recovers the slot should this worker die before reaping it. Returns what
/// undoes both, once it is reaped.
fn track(root: &Root, slot: Slot, pid: u32, id: &TaskId) -> impl Fn() + Clone {
    live().push(pid);
    let record = crate::recovery::callbacks::record(&root.worker(slot), pid, id);
    move || {
        live().retain(|p| *p != pid);
        if let Some(r) = &record {
            crate::recovery::callbacks::forget(r);
        }
    }
}

fn describe(status: std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited {c}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            _ => format!("ended ({s})"),
        },
        Err(e) => format!("could not be waited for: {e}"),
    }
}

/// A pipe read to its end by a thread, keeping its first [`OUTPUT_KEPT`] bytes.
struct Collected {
    rx: crossbeam_channel::Receiver<Vec<u8>>,
}

impl Collected {
    /// What was read, waiting a moment for the reader to finish.
    fn take(self) -> String {
        let bytes = self.rx.recv_timeout(KILL_GRACE).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

fn collect(mut pipe: impl Read + Send + 'static) -> Collected {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = std::thread::Builder::new()
        .name("callback-output".into())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let room = OUTPUT_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            let _ = tx.send(kept);
        });
    Collected { rx }
}
