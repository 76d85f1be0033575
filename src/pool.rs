//! Worker processes this process starts and owns: spawn them, wait until each serves, stop them.
//!
//! [`serving`] is the one readiness check: `conductor run` (through [`WorkerPool`]), the
//! tmux launcher and the tests all ask it whether a worker process has come up.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::env::{ENV_HOME, ENV_WORKER};
use crate::error::{Error, Result};
use crate::fsio;
use crate::gate;
use crate::layout::{Root, Slot};

/// How long [`WorkerPool::wait_ready`] callers usually give workers to come up.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a dropped pool gives its workers between SIGTERM and SIGKILL.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

/// How often a child's start is re-checked at most: it offers no event. The first looks
/// come sooner (see [`next_pause`]): a worker is up within a few milliseconds, and a
/// fixed 10 ms look put up to 10 ms on each end of every `conductor run`. A child's exit
/// is waited for on its pidfd, to the instant (this pause only without one).
const POLL: Duration = Duration::from_millis(10);

/// The longest pause between looks at workers of fewer than [`MANY_SLOT_FROM`] slots in
/// all: a look reads each slot's status and gate (~10 calls), so for a few slots a
/// millisecond costs nothing, and a worker seen up at 5.5 ms is not seen at 7.75 ms.
const POLL_FEW: Duration = Duration::from_millis(1);

/// The first pause between looks at a starting or stopping child.
const FIRST_POLL: Duration = Duration::from_micros(250);

/// The next pause between looks: doubling from [`FIRST_POLL`] up to `cap`.
fn next_pause(pause: Duration, cap: Duration) -> Duration {
    (pause * 2).min(cap)
}

/// Wait at most `limit` for child `pid` (not reaped) to exit: on its pidfd, to the
/// instant; without one, by sleeping `pause` (which grows).
fn wait_for_exit(pid: u32, limit: Duration, pause: &mut Duration) {
    use std::os::fd::AsFd;
    match crate::host::pidfd_open(pid) {
        Ok(fd) => {
            // Woken early or late, or failed: the caller looks again either way.
            let _ = crate::watch::poll_readable(None, &[fd.as_fd()], limit);
        }
        Err(_) => {
            std::thread::sleep((*pause).min(limit));
            *pause = next_pause(*pause, POLL);
        }
    }
}

/// Whether process `pid` serves `slot` of `root`: it has published the slot's
/// `status.json` under its own pid (idle, working, or done/error for a task it recovered
/// at start) and holds the slot's gate (so it has not died since).
pub fn serving(root: &Root, slot: Slot, pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // status.json first: the gate is only probed once the worker is past taking it.
    let published = matches!(
        crate::protocol::Status::read(&root.worker(slot).status()),
        Ok(Some(s)) if s.worker_pid == Some(pid)
    );
    published
        && matches!(
            gate::probe(&root.worker(slot).worker_gate()),
            Ok(Some(h)) if h.pid == pid
        )
}

/// The error for a worker that could not come up, naming its slot directory.
pub fn start_failed(root: &Root, slot: Slot, detail: String) -> Error {
    Error::io(
        "start the worker for",
        root.worker(slot).dir,
        io::Error::other(detail),
    )
}

/// The timeout for workers `late` that did not come up within `after` (`place`: where).
pub fn late_error(late: &[Slot], place: &str, after: Duration) -> Error {
    let late: Vec<String> = late.iter().map(Slot::to_string).collect();
    Error::Timeout {
        what: format!("worker(s) {} to start{place}", late.join(", ")),
        after,
    }
}

/// How to start one worker: `program [leading_args] SLOT DIR --root ROOT [extra_args]`.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// `conductor-worker`, or `conductor` with `worker` in `leading_args`.
    pub program: PathBuf,
    pub leading_args: Vec<OsString>,
    /// The project directory the worker's agents run in.
    pub dir: PathBuf,
    /// After the slot, DIR and `--root`: `--agent`, `--preset`, `--timeout` …
    pub extra_args: Vec<OsString>,
}

/// Worker processes started by [`WorkerPool::spawn`]; stopped (SIGTERM, then SIGKILL
/// after a grace period) by [`WorkerPool::stop`] or when dropped.
#[derive(Debug)]
pub struct WorkerPool {
    root: Root,
    /// Each process with the slots it serves (one, or many for a many-slot worker).
    children: Vec<(Vec<Slot>, Child)>,
}

/// From this many slots on, `conductor run --workers N` starts one many-slot worker
/// instead of N processes: one inotify instance instead of N (128 per user by
/// default), a few MB of memory instead of a few per slot. Below it, a process per
/// slot keeps a crash to one slot and gives each slot its own `worker.log`.
pub const MANY_SLOT_FROM: usize = 16;

impl WorkerPool {
    /// Start one worker per slot on `root`, each writing its output to its private
    /// `workers/N/worker.log` (mode 0600: it quotes prompts and agent output). Does not wait: see [`WorkerPool::wait_ready`].
    pub fn spawn(root: &Root, slots: &[Slot], cmd: &WorkerCommand) -> Result<WorkerPool> {
        let groups: Vec<Vec<Slot>> = slots.iter().map(|&s| vec![s]).collect();
        Self::spawn_groups(root, groups, cmd, Owner::None)
    }

    /// [`WorkerPool::spawn`], each worker woken through a pipe of ours rather than by
    /// file events (`--wake-pipes`): for a root nobody else uses. The pipes' ends to
    /// wake them by, and to be told on.
    pub fn spawn_woken(
        root: &Root,
        slots: &[Slot],
        cmd: &WorkerCommand,
    ) -> Result<(WorkerPool, WakePipes)> {
        Self::spawn_telling(root, slots, cmd, true)
    }

    /// [`WorkerPool::spawn`], each worker telling us through a pipe when it starts and
    /// ends a task (`--tell-owner`) while it watches its files as any worker does: for a
    /// root others may use too (`conductor run --root R`). The pipe to be told on, and
    /// the end of their stdin whose closing (ours gone) stops them; no waking ends.
    pub fn spawn_told(
        root: &Root,
        slots: &[Slot],
        cmd: &WorkerCommand,
    ) -> Result<(WorkerPool, WakePipes)> {
        Self::spawn_telling(root, slots, cmd, false)
    }

    fn spawn_telling(
        root: &Root,
        slots: &[Slot],
        cmd: &WorkerCommand,
        woken: bool,
    ) -> Result<(WorkerPool, WakePipes)> {
        let (told, tell) =
            cloexec_pipe().map_err(|e| Error::io("make a pipe for", root.path(), e))?;
        let mut pipes = WakePipes {
            told: Some(told),
            wake: Vec::new(),
            alive: None,
        };
        let groups: Vec<Vec<Slot>> = slots.iter().map(|&s| vec![s]).collect();
        let alive_end;
        let owner = if woken {
            Owner::Woken(&tell, &mut pipes.wake)
        } else {
            let (read_end, write_end) =
                cloexec_pipe().map_err(|e| Error::io("make a pipe for", root.path(), e))?;
            pipes.alive = Some(write_end);
            alive_end = read_end;
            Owner::Told(&tell, &alive_end)
        };
        let pool = Self::spawn_groups(root, groups, cmd, owner)?;
        // Ours closed now: the workers hold the only writing ends, so the pipe ends
        // when they have all gone.
        drop(tell);
        Ok((pool, pipes))
    }

    /// Start one many-slot worker serving all of `slots`; its output goes to the first
    /// slot's `worker.log`.
    pub fn spawn_many(root: &Root, slots: &[Slot], cmd: &WorkerCommand) -> Result<WorkerPool> {
        Self::spawn_groups(root, vec![slots.to_vec()], cmd, Owner::None)
    }

    /// `owner`: the pipe every worker tells on, and where each worker's waking end goes.
    fn spawn_groups(
        root: &Root,
        groups: Vec<Vec<Slot>>,
        cmd: &WorkerCommand,
        mut owner: Owner<'_>,
    ) -> Result<WorkerPool> {
        // The root once, not once per slot (a thousand slots made it quadratic).
        crate::trust::verify_root(root)?;
        let mut pool = WorkerPool {
            root: root.clone(),
            children: Vec::new(),
        };
        for slots in groups {
            let Some(&first) = slots.first() else {
                continue;
            };
            for &slot in &slots {
                root.worker(slot).create_files()?;
            }
            let log = fsio::create_private(&log_path(root, first))?;
            let mut command = Command::new(&cmd.program);
            command
                .args(&cmd.leading_args)
                .arg(crate::layout::SlotList(slots.clone()).to_string())
                .arg(&cmd.dir)
                .arg("--root")
                .arg(root.path())
                .args(&cmd.extra_args)
                .env(ENV_HOME, root.path())
                .env_remove(ENV_WORKER);
            let dup_err = |e| Error::io("duplicate", log_path(root, first), e);
            match &mut owner {
                Owner::Woken(tell, wake) => {
                    let (woken_end, waking_end) =
                        cloexec_pipe().map_err(|e| Error::io("make a pipe for", root.path(), e))?;
                    // Ours never blocks: a full pipe already holds news enough.
                    fsio::set_nonblocking(&waking_end, true)
                        .map_err(|e| Error::io("make a pipe for", root.path(), e))?;
                    wake.push((first, std::fs::File::from(waking_end)));
                    command
                        .arg("--wake-pipes")
                        .stdin(Stdio::from(woken_end))
                        .stdout(Stdio::from(tell.try_clone().map_err(dup_err)?));
                }
                Owner::Told(tell, alive) => {
                    command
                        .arg("--tell-owner")
                        .stdin(Stdio::from(alive.try_clone().map_err(dup_err)?))
                        .stdout(Stdio::from(tell.try_clone().map_err(dup_err)?));
                }
                Owner::None => {
                    command
                        .stdin(Stdio::null())
                        .stdout(log.try_clone().map_err(dup_err)?);
                }
            }
            let child = command
                .stderr(log)
                .spawn()
                .map_err(|e| Error::io("run", &cmd.program, e))?;
            pool.children.push((slots, child));
        }
        Ok(pool)
    }

    /// The workers' process ids, in slot order.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|(_, c)| c.id()).collect()
    }

    /// Wait until every worker [`serving`]s its slot; fail as soon as one exits
    /// (quoting its log), or after `timeout`.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut ready = vec![false; self.children.len()];
        let mut pause = FIRST_POLL;
        let slots: usize = self.children.iter().map(|(s, _)| s.len()).sum();
        let cap = if slots < MANY_SLOT_FROM {
            POLL_FEW
        } else {
            POLL
        };
        loop {
            for (i, (slots, child)) in self.children.iter_mut().enumerate() {
                if ready[i] {
                    continue;
                }
                ready[i] = slots.iter().all(|&s| serving(&self.root, s, child.id()));
                if let Some(st) = child
                    .try_wait()
                    .map_err(|e| Error::io("wait for", log_path(&self.root, slots[0]), e))?
                {
                    let log =
                        std::fs::read_to_string(log_path(&self.root, slots[0])).unwrap_or_default();
                    return Err(start_failed(
                        &self.root,
                        slots[0],
                        format!("it exited at start ({st}):\n{}", log.trim_end()),
                    ));
                }
            }
            if ready.iter().all(|r| *r) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let late: Vec<Slot> = self
                    .children
                    .iter()
                    .zip(&ready)
                    .filter(|(_, r)| !**r)
                    .flat_map(|((slots, child), _)| {
                        let (root, pid) = (&self.root, child.id());
                        slots
                            .iter()
                            .copied()
                            .filter(move |&s| !serving(root, s, pid))
                    })
                    .collect();
                return Err(late_error(&late, "", timeout));
            }
            std::thread::sleep(pause);
            pause = next_pause(pause, cap);
        }
    }

    /// SIGTERM every worker (each interrupts its task and exits), wait up to `grace`,
    /// then SIGKILL the ones still running; all are reaped. The pool is empty afterwards.
    pub fn stop(&mut self, grace: Duration) {
        for (_, c) in &self.children {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        let mut pause = FIRST_POLL;
        for (slots, c) in &mut self.children {
            let slot = crate::layout::SlotList(slots.clone());
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        tracing::warn!("worker {slot} did not stop within {grace:?}; killing it");
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => wait_for_exit(
                        c.id(),
                        deadline.saturating_duration_since(Instant::now()),
                        &mut pause,
                    ),
                }
            }
        }
        self.children.clear();
    }
}

/// What the workers [`WorkerPool::spawn_groups`] starts say to the process that starts them.
enum Owner<'a> {
    /// Nothing: their stdout goes to the log.
    None,
    /// Each is woken through a pipe of its own (pushed here) and tells on the one given.
    Woken(&'a OwnedFd, &'a mut Vec<(Slot, std::fs::File)>),
    /// Each tells on the first pipe given, watches its files, and stops when the second
    /// (its stdin) ends.
    Told(&'a OwnedFd, &'a OwnedFd),
}

/// The pipes a process wakes the workers it started through, and is told on
/// ([`WorkerPool::spawn_woken`]; [`WorkerPool::spawn_told`]: told on only).
#[derive(Debug)]
pub struct WakePipes {
    /// Readable when a worker has started or ended a task; at its end when every worker
    /// is gone.
    pub told: Option<OwnedFd>,
    /// Each slot's waking end.
    pub wake: Vec<(Slot, std::fs::File)>,
    /// Told workers' stdin, at our end: never written, it closes with this process
    /// (killed outright too), and they stop then ([`WorkerPool::spawn_told`]).
    pub alive: Option<OwnedFd>,
}

impl WakePipes {
    /// Wake `slot`'s worker: a task is in its inbox.
    pub fn wake(&self, slot: Slot) {
        use std::io::Write;
        if let Some((_, end)) = self.wake.iter().find(|(s, _)| *s == slot) {
            let mut end: &std::fs::File = end;
            // Full (it has news waiting) or gone (its exit is seen elsewhere): nothing to do.
            let _ = end.write(b"w");
        }
    }
}

/// The byte a woken worker of `slot` writes to ask its owner for its inbox back (it must
/// put its stopped task there: a `pause --now`), when the slot has one (below 127).
/// Other bytes: see [`news_of`].
pub(crate) fn inbox_wanted_byte(slot: Slot) -> Option<u8> {
    u8::try_from(slot.0)
        .ok()
        .filter(|&s| s < 0x7f)
        .map(|s| 0x80 | s)
}

/// The slot whose worker asks for its inbox back with `byte`, if it is such a byte.
pub(crate) fn slot_wanting_inbox(byte: u8) -> Option<Slot> {
    (byte & 0x80 != 0 && byte != 0xff).then(|| Slot(u32::from(byte & 0x7f)))
}

/// The byte a woken worker writes when an agent started: its inbox is free for the
/// next task, and no result is there to collect yet.
pub(crate) const STARTED_BYTE: u8 = b's';

/// The byte a woken worker writes when a task ended: for a slot below 64 the slot
/// itself (its owner looks for the result there only, not in every slot with a task
/// out, which is a failed `open` each); else `r`, "look everywhere".
pub(crate) fn result_byte(slot: Slot) -> u8 {
    u8::try_from(slot.0)
        .ok()
        .filter(|&s| s < 0x40)
        .unwrap_or(b'r')
}

/// What a byte from a woken worker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum News {
    /// An agent started: an inbox is free.
    Started,
    /// A task's result is in this slot.
    ResultIn(Slot),
    /// Anything may have changed (a result somewhere, a swept slot).
    Anything,
    /// This slot asks for its inbox back.
    InboxWanted(Slot),
}

/// Read a byte from a woken worker.
pub(crate) fn news_of(byte: u8) -> News {
    if let Some(slot) = slot_wanting_inbox(byte) {
        News::InboxWanted(slot)
    } else if byte < 0x40 {
        News::ResultIn(Slot(u32::from(byte)))
    } else if byte == STARTED_BYTE {
        News::Started
    } else {
        News::Anything
    }
}

/// A close-on-exec pipe: (read end, write end).
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop(DEFAULT_STOP_GRACE);
    }
}

/// Where a pooled worker's output goes.
pub fn log_path(root: &Root, slot: Slot) -> PathBuf {
    root.worker(slot).dir.join("worker.log")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    #[test]
    fn a_slots_ask_for_its_inbox_is_told_from_a_tell() {
        for n in [0, 1, 15, 126] {
            let byte = inbox_wanted_byte(Slot(n)).unwrap();
            assert_eq!(slot_wanting_inbox(byte), Some(Slot(n)));
        }
        assert_eq!(inbox_wanted_byte(Slot(127)), None);
        assert_eq!(inbox_wanted_byte(Slot(4000)), None);
        for tell in [b'r', b'w', 0, 0x7f, 0xff] {
            assert_eq!(slot_wanting_inbox(tell), None, "{tell}");
        }
    }

    #[test]
    fn a_tell_names_the_slot_of_a_result_or_a_start() {
        for n in [0, 1, 63] {
            assert_eq!(news_of(result_byte(Slot(n))), News::ResultIn(Slot(n)));
        }
        for n in [64, 126, 4000] {
            assert_eq!(news_of(result_byte(Slot(n))), News::Anything);
        }
        assert_eq!(news_of(STARTED_BYTE), News::Started);
        for n in [0, 63, 126] {
            let byte = inbox_wanted_byte(Slot(n)).unwrap();
            assert_eq!(news_of(byte), News::InboxWanted(Slot(n)));
        }
        for other in [b'r', b'w', 0x7f, 0xff] {
            assert_eq!(news_of(other), News::Anything, "{other}");
        }
    }

    #[test]
    fn a_worker_log_is_private_and_an_old_one_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.log");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        fsio::create_private(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        // One left 0644 by an older conductor is narrowed too.
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        fsio::create_private(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn nobody_serves_a_slot_without_status_and_gate() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert!(!serving(&root, Slot(0), std::process::id()));
        assert!(!serving(&root, Slot(0), 0));
    }
}
