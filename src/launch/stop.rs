//! Finding and stopping launched sessions: [`list`] and [`kill`].

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill as send_signal, Signal};
use nix::unistd::Pid;

use super::problem::Result;
use crate::gate::{self, Gate};
use crate::host;
use crate::layout::{Root, Slot};
use crate::protocol::{TaskId, WorkerState};

use super::tmux::{exact, Tmux};
use super::options::launch_gate;
use super::problem::{validate_session_name, LaunchProblem};
use super::tmux::{OPT_DIR, OPT_ROOT, OPT_WORKERS};

/// How often a worker's exit is re-checked: a process that is not our child offers no
/// event for its exit.
const POLL: Duration = Duration::from_millis(10);

/// How long [`kill`] waits for workers to die after SIGKILL.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// A conductor session on a tmux server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session: String,
    pub root: PathBuf,
    pub workers: u32,
    pub dir: Option<PathBuf>,
    /// Clients attached to it.
    pub attached: u32,
    /// Workers whose slot gate is held right now (serving).
    pub workers_up: u32,
    /// The private tmux server it runs on (`tmux -L NAME`); none: the default one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

/// The conductor sessions running on the server (sessions without `@conductor_root`
/// are not ours and are skipped). No server running: none.
pub fn list(tmux: &Tmux) -> Result<Vec<SessionInfo>> {
    tmux.version()?;
    let format = format!(
        "#{{session_name}}\t#{{{OPT_ROOT}}}\t#{{{OPT_WORKERS}}}\t#{{{OPT_DIR}}}\t#{{session_attached}}"
    );
    let args = ["list-sessions", "-F", format.as_str()];
    let out = tmux.output(&args)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("no server running") || err.contains("error connecting") {
            return Ok(Vec::new());
        }
        return Err(tmux.failed(&args, &out).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(session_info)
        .map(|s| SessionInfo {
            socket: tmux.socket().map(String::from),
            ..s
        })
        .collect())
}

/// One line of `list-sessions`; `None` for a session that is not ours.
fn session_info(line: &str) -> Option<SessionInfo> {
    let f: Vec<&str> = line.split('\t').collect();
    let (name, root) = (f.first()?, f.get(1)?);
    if root.is_empty() {
        return None;
    }
    let workers: u32 = f.get(2).and_then(|w| w.parse().ok()).unwrap_or(0);
    let root = Root::new(*root);
    let workers_up = (0..workers)
        .filter(|&i| {
            matches!(
                gate::probe(&root.worker(Slot(i)).worker_gate()),
                Ok(Some(_))
            )
        })
        .count() as u32;
    Some(SessionInfo {
        session: name.to_string(),
        root: root.path().to_path_buf(),
        workers,
        dir: f.get(3).filter(|d| !d.is_empty()).map(PathBuf::from),
        attached: f.get(4).and_then(|a| a.parse().ok()).unwrap_or(0),
        workers_up,
        socket: None,
    })
}

/// What [`kill`] did to one worker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoppedWorker {
    /// The worker slot number.
    pub slot: u32,
    pub pid: u32,
    /// The task it was running, which now has an `interrupted` result.
    pub task: Option<TaskId>,
    /// It did not stop within the bound and was killed (SIGKILL).
    pub forced: bool,
}

/// What [`kill`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KillReport {
    pub session: String,
    pub root: PathBuf,
    pub stopped: Vec<StoppedWorker>,
    /// Slots with no worker serving them in this session.
    pub not_running: Vec<u32>,
}

/// Stop `session`'s workers cleanly (SIGTERM; each writes `interrupted` for a running task),
/// wait up to `timeout` for them (then SIGKILL), then kill the session.
/// `Ok(None)`: no such session runs.
pub fn kill(tmux: &Tmux, session: &str, timeout: Duration) -> Result<Option<KillReport>> {
    validate_session_name(session)?;
    tmux.version()?;
    if !tmux.has_session(session)? {
        return Ok(None);
    }
    let (root, workers, _) = tmux.session_record(session)?;
    if root.is_empty() {
        return Err(LaunchProblem::NotOurSession {
            session: session.to_string(),
        }
        .into());
    }
    let workers: u32 = workers.parse().unwrap_or(0);
    let root = Root::new(root);
    let _gate = Gate::acquire(
        &launch_gate(&root, session),
        &format!("conductor-launch for session {session}"),
    )?;
    if !tmux.has_session(session)? {
        return Ok(None);
    }
    let (mut targets, not_running) = signal_workers(tmux, &root, session, workers)?;
    let gone = |w: &Target| {
        !host::same_process_alive(w.stopped.pid, w.start_time)
            || !matches!(gate::probe(&root.worker(Slot(w.stopped.slot)).worker_gate()),
                         Ok(Some(h)) if h.pid == w.stopped.pid)
    };
    wait_all(&targets, timeout, gone);
    for w in &mut targets {
        if !gone(w) {
            let (slot, pid) = (w.stopped.slot, w.stopped.pid);
            tracing::warn!("worker {slot} (pid {pid}) did not stop within {timeout:?}; killing it");
            let _ = send_signal(Pid::from_raw(pid as i32), Signal::SIGKILL);
            w.stopped.forced = true;
        }
    }
    wait_all(&targets, AFTER_KILL, gone);

    if let Err(e) = tmux.kill_session(session) {
        // Gone already (its last pane closed) is what we wanted.
        if tmux.has_session(session)? {
            return Err(e.into());
        }
    }
    Ok(Some(KillReport {
        session: session.to_string(),
        root: root.path().to_path_buf(),
        stopped: targets.into_iter().map(|t| t.stopped).collect(),
        not_running,
    }))
}

/// A worker [`kill`] sent SIGTERM to, and its process start time (against pid reuse).
struct Target {
    stopped: StoppedWorker,
    start_time: Option<u64>,
}

/// SIGTERM every worker of `session` that runs in one of its panes; the signalled ones,
/// and the slots nobody in the session serves.
fn signal_workers(
    tmux: &Tmux,
    root: &Root,
    session: &str,
    workers: u32,
) -> Result<(Vec<Target>, Vec<u32>)> {
    let pane_pids: HashSet<u32> = tmux
        .run(&[
            "list-panes",
            "-s",
            "-t",
            &exact(session),
            "-F",
            "#{pane_pid}",
        ])?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let mut targets = Vec::new();
    let mut not_running = Vec::new();
    for slot in (0..workers).map(Slot) {
        // Another host's worker is never signalled from here: its pid is a stranger.
        let holder = gate::probe(&root.worker(slot).worker_gate())
            .ok()
            .flatten()
            .filter(gate::GateHolder::is_this_host);
        let status = crate::protocol::Status::read(&root.worker(slot).status())
            .ok()
            .flatten();
        // The gate's record names the live holder; status.json's workerPid is the
        // fallback while the holder has not recorded itself yet.
        let pid = holder
            .as_ref()
            .map(|h| h.pid)
            .filter(|&p| p != 0)
            .or_else(|| holder.as_ref().and(status.as_ref()?.worker_pid));
        let Some(pid) = pid else {
            not_running.push(slot.0);
            continue;
        };
        if !in_session(pid, &pane_pids) {
            tracing::warn!(
                "worker {slot} is served by pid {pid}, which does not run in session {session}; leaving it alone"
            );
            not_running.push(slot.0);
            continue;
        }
        let task = status
            .filter(|s| s.status == WorkerState::Working && s.worker_pid == Some(pid))
            .and_then(|s| s.task_id);
        let start_time = host::process_start_time(pid);
        let _ = send_signal(Pid::from_raw(pid as i32), Signal::SIGTERM);
        let stopped = StoppedWorker {
            slot: slot.0,
            pid,
            task,
            forced: false,
        };
        targets.push(Target {
            stopped,
            start_time,
        });
    }
    Ok((targets, not_running))
}

/// Wait until every target is `gone`, or `bound` passes.
fn wait_all(targets: &[Target], bound: Duration, gone: impl Fn(&Target) -> bool) {
    let deadline = Instant::now() + bound;
    while !targets.iter().all(&gone) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
}

/// Whether `pid` is one of the panes' processes or runs under one (Linux: walks the
/// parent chain in /proc).
fn in_session(pid: u32, pane_pids: &HashSet<u32>) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        if pane_pids.contains(&p) {
            return true;
        }
        match parent_pid(p) {
            Some(pp) if pp > 1 && pp != p => p = pp,
            _ => return false,
        }
    }
    false
}

fn parent_pid(pid: u32) -> Option<u32> {
    crate::procfs::stat(pid).map(|s| s.ppid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_in_a_session_of_its_parent() {
        let me = std::process::id();
        let parent = parent_pid(me).unwrap();
        assert!(in_session(me, &[parent].into()));
        assert!(!in_session(me, &[u32::MAX].into()));
    }

    #[test]
    fn sessions_without_a_root_are_not_ours() {
        assert_eq!(session_info("mine\t\t\t\t0"), None);
        let s = session_info("work\t/nonexistent/root\t2\t/src\t1").unwrap();
        assert_eq!(s.session, "work");
        assert_eq!(s.workers, 2);
        assert_eq!(s.dir, Some(PathBuf::from("/src")));
        assert_eq!((s.attached, s.workers_up), (1, 0));
    }
}
