//! The tmux launcher: one session with an orchestrator pane and N worker panes.
//!
//! [`launch`] creates a tmux session with one window. Its first pane runs the
//! orchestrator (a command, by default the user's `$SHELL`, after a one-line hint of the
//! commands to use) with `CONDUCTOR_HOME` set; the other panes each run
//! `conductor-worker i DIR --root ROOT`, titled `worker i`. Up to four workers stand
//! stacked to the right of the orchestrator; more are tiled. Every pane stays usable at
//! 80x24 for up to [`MAX_WORKERS`] workers.
//!
//! **One launch per session.** Creation runs under the singleton gate
//! `<root>/.locks/launch-<session>.lock`, and a session that already runs (`tmux
//! has-session`) is refused ([`Error::Refused`]) with how to attach to it or stop it.
//! The workers' own gates still stop a duplicate worker started by hand.
//!
//! **The session remembers its root.** The session options `@conductor_root`,
//! `@conductor_workers` and `@conductor_dir` record where it runs; [`list`] and [`kill`]
//! read them back. `CONDUCTOR_HOME` is also set in the session environment, so panes the
//! user opens later see the same root.
//!
//! **Worktrees.** With [`LaunchOptions::worktrees`], worker `i` runs in its own git
//! worktree `<root>/worktrees/<session>/worker-i` of DIR's repository, on branch
//! `conductor/worker-i` (made from the current `HEAD` the first time; an existing branch or
//! worktree from an earlier launch is reused, never recreated).
//!
//! **Stopping.** [`kill`] sends SIGTERM to each worker — the pid recorded in its slot's
//! gate (`workers/i/.worker.lock`, cross-checked against `status.json`), accepted only if it
//! runs in one of the session's panes — so each writes an `interrupted` result for a running
//! task and exits; it waits (bounded) for them, then kills the session.
//!
//! **Nothing half-made.** When a step fails after something was created, the session is
//! killed and worktrees made by this launch are removed again. Every tmux command goes
//! through [`Tmux`], which adds `-L <socket>` when a socket name is given.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill as send_signal, Signal};
use nix::unistd::Pid;

use crate::agent::AgentCommand;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::fsio;
use crate::gate::{self, Gate, GateHolder};
use crate::host;
use crate::layout::{Root, Slot, ENV_HOME};
use crate::preset::Preset;
use crate::protocol::{TaskId, WorkerState};
use crate::worker::ENV_WORKER;

/// The session name used when none is given.
pub const DEFAULT_SESSION: &str = "conductor";

/// The most workers one session holds: beyond this, panes get too small at 80x24.
pub const MAX_WORKERS: u32 = 12;

/// Up to this many workers stand stacked beside the orchestrator; more are tiled.
const STACKED_MAX: u32 = 4;

/// How long [`launch`] waits for every worker to publish its status.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`kill`] waits for workers to stop after SIGTERM before SIGKILL. A worker
/// gives its agent 5 s (its default `--kill-grace`) between SIGTERM and SIGKILL.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Session options that record a launched session.
const OPT_ROOT: &str = "@conductor_root";
const OPT_WORKERS: &str = "@conductor_workers";
const OPT_DIR: &str = "@conductor_dir";

/// The name of the window holding the panes.
const WINDOW_NAME: &str = "conductor";

/// What a pane runs until the layout is done and it is respawned with its real command.
const PLACEHOLDER: &str = "cat";

/// How often conditions without an event (a pane's process, a pid) are re-checked.
const POLL: Duration = Duration::from_millis(10);

const INSTALL_TMUX: &str = "tmux is not installed or not on PATH; install it \
    (`apt install tmux` on Debian/Ubuntu, `dnf install tmux` on Fedora, `brew install tmux` on macOS) \
    and try again";

/// Every tmux invocation goes through here, so `-L <socket>` is never forgotten.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tmux {
    socket: Option<String>,
}

impl Tmux {
    /// tmux's default server (`None`) or the server on socket `name` (`tmux -L name`).
    pub fn new(socket: Option<String>) -> Tmux {
        Tmux { socket }
    }

    pub fn socket(&self) -> Option<&str> {
        self.socket.as_deref()
    }

    /// `tmux [-L socket]`, ready for arguments. Output is not captured.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        if let Some(s) = &self.socket {
            cmd.arg("-L").arg(s);
        }
        cmd
    }

    /// Run tmux with `args`, capturing its output; a missing tmux says how to install it.
    fn output(&self, args: &[&str]) -> Result<Output> {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                let source = if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(io::ErrorKind::NotFound, INSTALL_TMUX)
                } else {
                    e
                };
                Error::io("run", "tmux", source)
            })
    }

    /// Run tmux with `args`; its stdout on success, else an error with its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(self.failed(args, &out))
        }
    }

    /// Run tmux with `args`; whether it succeeded (its stderr is dropped).
    pub fn succeeds(&self, args: &[&str]) -> Result<bool> {
        Ok(self.output(args)?.status.success())
    }

    fn failed(&self, args: &[&str], out: &Output) -> Error {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let what = match self.socket() {
            Some(s) => format!("tmux -L {s} {}", args.first().unwrap_or(&"")),
            None => format!("tmux {}", args.first().unwrap_or(&"")),
        };
        Error::io(
            "run",
            what,
            io::Error::other(format!("{} ({})", stderr.trim(), out.status)),
        )
    }

    /// `tmux -V`: its version line, or an error saying how to install tmux.
    pub fn version(&self) -> Result<String> {
        let out = Command::new("tmux")
            .arg("-V")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                let source = if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(io::ErrorKind::NotFound, INSTALL_TMUX)
                } else {
                    e
                };
                Error::io("run", "tmux", source)
            })?;
        if !out.status.success() {
            return Err(Error::io(
                "run",
                "tmux -V",
                io::Error::other(format!(
                    "{} ({}); {INSTALL_TMUX}",
                    String::from_utf8_lossy(&out.stderr).trim(),
                    out.status
                )),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Whether a session named exactly `name` runs on this server.
    pub fn has_session(&self, name: &str) -> Result<bool> {
        self.succeeds(&["has-session", "-t", &exact(name)])
    }

    /// The command a person types to attach to `session` on this server.
    pub fn attach_hint(&self, session: &str) -> String {
        match self.socket() {
            Some(s) => format!("tmux -L {s} attach -t {session}"),
            None => format!("tmux attach -t {session}"),
        }
    }

    /// The command a person types to stop `session` on this server.
    pub fn kill_hint(&self, session: &str) -> String {
        match self.socket() {
            Some(s) => format!("conductor-launch --kill --session {session} --socket {s}"),
            None => format!("conductor-launch --kill --session {session}"),
        }
    }

    /// Session options of `session`: `(root, workers, dir)` as recorded by [`launch`].
    fn session_record(&self, session: &str) -> Result<(String, String, String)> {
        let format = format!("#{{{OPT_ROOT}}}\t#{{{OPT_WORKERS}}}\t#{{{OPT_DIR}}}");
        let out = self.run(&[
            "display-message",
            "-p",
            "-t",
            &pane_target(session),
            &format,
        ])?;
        let line = out.lines().next().unwrap_or("");
        let mut f = line.split('\t').map(str::to_string);
        Ok((
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
        ))
    }
}

/// A session target matching `name` exactly (tmux otherwise matches prefixes).
fn exact(name: &str) -> String {
    format!("={name}")
}

/// A pane-style target for the session (its current window and pane), for commands
/// such as `set-option` whose `-t` takes a pane.
fn pane_target(name: &str) -> String {
    format!("={name}:")
}

/// Check a session name: it names a tmux session and the gate file, so only
/// `A-Z a-z 0-9 _ -`, 1–64 characters, not starting with `-`.
pub fn validate_session_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "invalid session name {name:?}: use 1 to 64 characters of A-Z a-z 0-9 _ - (not starting with -)"
        )))
    }
}

/// Where the launcher's gate for `session` lives.
pub fn launch_gate(root: &Root, session: &str) -> PathBuf {
    root.gates_dir().join(format!("launch-{session}.lock"))
}

/// Where worker `slot`'s worktree lives for `session` (with `--worktrees`).
pub fn worktree_path(root: &Root, session: &str, slot: Slot) -> PathBuf {
    root.path()
        .join("worktrees")
        .join(session)
        .join(format!("worker-{slot}"))
}

/// The branch worker `slot` works on (with `--worktrees`).
pub fn worktree_branch(slot: Slot) -> String {
    format!("conductor/worker-{slot}")
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    pub root: Root,
    /// tmux session name (see [`validate_session_name`]).
    pub session: String,
    /// Number of worker panes, slots `0..workers`.
    pub workers: u32,
    /// The project directory (the workers' cwd, or the repository with `worktrees`).
    pub dir: PathBuf,
    /// The `conductor-worker` binary each worker pane runs.
    pub worker_bin: PathBuf,
    /// `--agent` for the workers.
    pub agent: Option<String>,
    /// `--preset` for the workers.
    pub preset: Option<Preset>,
    /// Give each worker its own git worktree and branch.
    pub worktrees: bool,
    /// The orchestrator pane's command line; `None`: `$SHELL` (else `/bin/sh`).
    pub orchestrator: Option<String>,
    pub tmux: Tmux,
    /// Launch even inside a conductor agent (`CONDUCTOR_WORKER` set).
    pub allow_nested: bool,
    /// How long to wait for every worker to come up.
    pub ready_timeout: Duration,
}

impl LaunchOptions {
    /// Defaults: session `conductor`, 3 workers, DIR `.`, `$SHELL` as orchestrator,
    /// tmux's default server.
    pub fn new(root: Root, worker_bin: PathBuf) -> LaunchOptions {
        LaunchOptions {
            root,
            session: DEFAULT_SESSION.to_string(),
            workers: 3,
            dir: PathBuf::from("."),
            worker_bin,
            agent: None,
            preset: None,
            worktrees: false,
            orchestrator: None,
            tmux: Tmux::default(),
            allow_nested: false,
            ready_timeout: DEFAULT_READY_TIMEOUT,
        }
    }
}

/// A session that [`launch`] created.
#[derive(Debug, Clone)]
pub struct Launched {
    pub session: String,
    pub root: PathBuf,
    pub dir: PathBuf,
    /// tmux window id (`@3`) and the orchestrator's pane id (`%7`).
    pub window: String,
    pub orchestrator_pane: String,
    pub workers: Vec<LaunchedWorker>,
}

/// One worker pane of a launched session.
#[derive(Debug, Clone)]
pub struct LaunchedWorker {
    pub slot: Slot,
    /// tmux pane id, e.g. `%8`.
    pub pane: String,
    /// The `conductor-worker` process.
    pub pid: u32,
    /// Its project directory (its worktree with `worktrees`).
    pub dir: PathBuf,
    /// Its branch, with `worktrees`.
    pub branch: Option<String>,
}

/// Why [`launch`] refused: the session already runs, or another launcher is at it.
struct Refusal {
    session: String,
    /// The running session's recorded root and worker count, when it runs.
    running: Option<(String, String)>,
    /// The process holding the launch gate, when another launch (or kill) is under way.
    launcher: Option<GateHolder>,
    /// How to attach to it and how to stop it.
    attach: String,
    kill: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.running, &self.launcher) {
            (_, Some(h)) => write!(
                f,
                "refusing to launch session {}: another conductor-launch (pid {}, since {}) is \
                 creating or stopping it right now; once it is up, attach with `{}` or stop it \
                 with `{}`",
                self.session, h.pid, h.since, self.attach, self.kill
            )?,
            (Some((root, workers)), None) => write!(
                f,
                "refusing to launch session {}: it is already running ({} workers on {}); \
                 attach with `{}` or stop it with `{}`",
                self.session,
                if workers.is_empty() { "?" } else { workers },
                if root.is_empty() {
                    "an unknown root"
                } else {
                    root
                },
                self.attach,
                self.kill
            )?,
            (None, None) => write!(
                f,
                "refusing to launch session {}: it is already running; attach with `{}` or \
                 stop it with `{}`",
                self.session, self.attach, self.kill
            )?,
        }
        Ok(())
    }
}

/// Create the session: orchestrator pane, N worker panes, wait until every worker serves.
/// On failure nothing is left behind (session killed, fresh worktrees removed).
///
/// A session of that name already running (or being launched or stopped right now) is
/// refused with [`Error::Refused`], saying how to attach to it or stop it; so is a launch
/// from inside an agent without `allow_nested`.
pub fn launch(opts: &LaunchOptions) -> Result<Launched> {
    if !opts.allow_nested && std::env::var_os(ENV_WORKER).is_some() {
        return Err(Error::Refused(format!(
            "refusing to launch a tmux session: this shell runs inside a conductor agent \
             ({ENV_WORKER} is set); pass --allow-nested if you really mean it"
        )));
    }
    validate_session_name(&opts.session)?;
    if opts.workers == 0 || opts.workers > MAX_WORKERS {
        return Err(Error::Usage(format!(
            "--workers must be 1 to {MAX_WORKERS} (panes get too small for more), not {}",
            opts.workers
        )));
    }
    if let Some(a) = &opts.agent {
        AgentCommand::parse(a)?;
    }
    let orchestrator = orchestrator_argv(opts.orchestrator.as_deref())?;
    if !opts.worker_bin.is_file() {
        return Err(Error::Usage(format!(
            "cannot find the worker binary {}; install conductor-worker next to this program",
            opts.worker_bin.display()
        )));
    }
    let dir = opts
        .dir
        .canonicalize()
        .map_err(|e| Error::Usage(format!("project directory {}: {e}", opts.dir.display())))?;
    if !dir.is_dir() {
        return Err(Error::Usage(format!(
            "project directory {} is not a directory",
            dir.display()
        )));
    }
    let tmux = &opts.tmux;
    tmux.version()?;

    let client = Client::new(opts.root.clone());
    client.init_queue()?;
    let root_path = opts
        .root
        .path()
        .canonicalize()
        .map_err(|e| Error::io("resolve", opts.root.path(), e))?;
    let root = Root::new(&root_path);
    let client = Client::new(root.clone());
    let session = opts.session.as_str();

    let refusal = |running: Option<(String, String)>, launcher: Option<GateHolder>| Refusal {
        session: session.to_string(),
        running,
        launcher,
        attach: tmux.attach_hint(session),
        kill: tmux.kill_hint(session),
    };
    let gate = match Gate::acquire(
        &launch_gate(&root, session),
        &format!("conductor-launch for session {session}"),
    ) {
        Ok(g) => g,
        Err(Error::GateHeld { path, .. }) => {
            let holder = gate::probe(&path).ok().flatten().unwrap_or(GateHolder {
                pid: 0,
                role: String::new(),
                host: String::new(),
                since: "just now".into(),
            });
            return Err(Error::Refused(refusal(None, Some(holder)).to_string()));
        }
        Err(e) => return Err(e),
    };
    if tmux.has_session(session)? {
        let record = tmux
            .session_record(session)
            .ok()
            .map(|(root, workers, _)| (root, workers));
        return Err(Error::Refused(refusal(record, None).to_string()));
    }
    let slots: Vec<Slot> = (0..opts.workers).map(Slot).collect();
    for &slot in &slots {
        let path = root.worker(slot).worker_gate();
        // An unreadable gate is left for the worker to report in its pane.
        if let Ok(Some(h)) = gate::probe(&path) {
            let who = if h.pid == 0 {
                "a worker starting or stopping right now".to_string()
            } else {
                format!("pid {}, since {}", h.pid, h.since)
            };
            return Err(Error::GateHeld {
                role: format!("worker {slot}"),
                holder: format!(
                    "{who}; is another session using root {}?",
                    root.path().display()
                ),
                path,
            });
        }
    }

    let mut undo = Undo {
        tmux,
        session: None,
        worktrees: Vec::new(),
    };
    let mut worker_dirs: Vec<(PathBuf, Option<String>)> = Vec::new();
    if opts.worktrees {
        let repo = Repo::of(&dir)?;
        repo.check_has_commit()?;
        for &slot in &slots {
            let wt = repo.worktree(&root, session, slot, &mut undo)?;
            worker_dirs.push(wt);
        }
    } else {
        worker_dirs.extend(slots.iter().map(|_| (dir.clone(), None)));
    }

    let root_str = utf8(&root_path)?;
    let dir_str = utf8(&dir)?;
    let home = format!("{ENV_HOME}={root_str}");
    let mut orch_argv: Vec<String> =
        vec!["env".into(), "-u".into(), ENV_WORKER.into(), home.clone()];
    if let Some(path) = path_with(opts.worker_bin.parent()) {
        orch_argv.push(format!("PATH={path}"));
    }
    orch_argv.extend([
        "sh".into(),
        "-c".into(),
        r#"printf '%s\n' "$1"; shift; exec "$@""#.into(),
        "conductor-launch".into(),
        hint(tmux, session, opts.workers),
    ]);
    orch_argv.extend(orchestrator);

    // The layout is made first, with a placeholder (`cat`) in every pane; then each pane
    // is respawned with its real command at its final size, so nothing it prints at
    // start (the hint, the worker's banner) is lost to reflowing while panes are split.
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        session,
        "-n",
        WINDOW_NAME,
        "-c",
        dir_str,
        "-P",
        "-F",
        "#{window_id} #{pane_id}",
        "--",
        PLACEHOLDER,
    ])?;
    undo.session = Some(session.to_string());
    let mut ids = out.split_whitespace();
    let (window, orch_pane) = match (ids.next(), ids.next()) {
        (Some(w), Some(p)) => (w.to_string(), p.to_string()),
        _ => {
            return Err(Error::io(
                "read the ids of",
                format!("tmux session {session}"),
                io::Error::other(format!("new-session printed {out:?}")),
            ))
        }
    };
    let target = pane_target(session);
    let workers_str = opts.workers.to_string();
    tmux.run(&["set-option", "-t", &target, OPT_ROOT, root_str])?;
    tmux.run(&["set-option", "-t", &target, OPT_WORKERS, &workers_str])?;
    tmux.run(&["set-option", "-t", &target, OPT_DIR, dir_str])?;
    tmux.run(&["set-environment", "-t", &exact(session), ENV_HOME, root_str])?;
    // A worker that stops keeps its pane, showing why (and `respawn-pane` restarts it);
    // the orchestrator's pane closes when it exits (pane option; older tmux: stays too).
    tmux.run(&["set-option", "-w", "-t", &window, "remain-on-exit", "on"])?;
    let _ = tmux.succeeds(&[
        "set-option",
        "-p",
        "-t",
        &orch_pane,
        "remain-on-exit",
        "off",
    ]);
    for (option, value) in [
        ("pane-border-status", "top"),
        ("pane-border-format", " #{pane_title} "),
    ] {
        tmux.run(&["set-option", "-w", "-t", &window, option, value])?;
    }
    tmux.run(&["select-pane", "-t", &orch_pane, "-T", "orchestrator"])?;

    let n = opts.workers as usize;
    let mut panes: Vec<String> = Vec::new();
    for (i, &slot) in slots.iter().enumerate() {
        // Stacked: the first worker takes the right half, each next one splits the one
        // above so that all end up equally tall. Tiled: split, then re-tile every time
        // (so no pane is ever too small to split).
        let (split_target, dir_flag, percent) = if opts.workers <= STACKED_MAX {
            if i == 0 {
                (orch_pane.clone(), "-h", 50)
            } else {
                (panes[i - 1].clone(), "-v", 100 * (n - i) / (n - i + 1))
            }
        } else {
            (panes.last().unwrap_or(&orch_pane).clone(), "-v", 50)
        };
        let percent = percent.to_string();
        let pane = tmux
            .run(&[
                "split-window",
                "-d",
                dir_flag,
                "-p",
                &percent,
                "-t",
                &split_target,
                "-P",
                "-F",
                "#{pane_id}",
                "--",
                PLACEHOLDER,
            ])?
            .trim()
            .to_string();
        tmux.run(&["select-pane", "-t", &pane, "-T", &format!("worker {slot}")])?;
        if opts.workers > STACKED_MAX {
            tmux.run(&["select-layout", "-t", &window, "tiled"])?;
        }
        panes.push(pane);
    }

    let bin = utf8(&opts.worker_bin)?;
    let preset = opts.preset.map(|p| p.to_string());
    for (i, &slot) in slots.iter().enumerate() {
        let wdir_str = utf8(&worker_dirs[i].0)?;
        let slot_str = slot.to_string();
        let mut args: Vec<&str> = vec![
            "respawn-pane",
            "-k",
            "-t",
            &panes[i],
            "-c",
            wdir_str,
            "--",
            "env",
            "-u",
            ENV_WORKER,
            &home,
            bin,
            &slot_str,
            wdir_str,
            "--root",
            root_str,
        ];
        if let Some(a) = &opts.agent {
            args.extend(["--agent", a]);
        }
        if let Some(p) = &preset {
            args.extend(["--preset", p]);
        }
        tmux.run(&args)?;
    }
    let mut args: Vec<&str> = vec!["respawn-pane", "-k", "-t", &orch_pane, "-c", dir_str, "--"];
    args.extend(orch_argv.iter().map(String::as_str));
    tmux.run(&args)?;
    tmux.run(&["select-pane", "-t", &orch_pane])?;

    let pids = wait_ready(
        tmux,
        &client,
        session,
        &window,
        &slots,
        &panes,
        opts.ready_timeout,
    )?;

    let workers = slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| LaunchedWorker {
            slot,
            pane: panes[i].clone(),
            pid: pids[i],
            dir: worker_dirs[i].0.clone(),
            branch: worker_dirs[i].1.clone(),
        })
        .collect();
    undo.disarm();
    drop(gate);
    Ok(Launched {
        session: session.to_string(),
        root: root_path,
        dir,
        window,
        orchestrator_pane: orch_pane,
        workers,
    })
}

/// Wait until every worker pane's process publishes its slot's status (it serves), or
/// fail as soon as one pane's process dies, quoting what it printed.
fn wait_ready(
    tmux: &Tmux,
    client: &Client,
    session: &str,
    window: &str,
    slots: &[Slot],
    panes: &[String],
    timeout: Duration,
) -> Result<Vec<u32>> {
    let deadline = Instant::now() + timeout;
    let mut pids: Vec<Option<u32>> = vec![None; slots.len()];
    loop {
        let listing = tmux.run(&[
            "list-panes",
            "-t",
            window,
            "-F",
            "#{pane_id} #{pane_pid} #{pane_dead} #{pane_dead_status}",
        ])?;
        for (i, &slot) in slots.iter().enumerate() {
            if pids[i].is_some() {
                continue;
            }
            let Some(fields) = listing
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| f.first() == Some(&panes[i].as_str()))
            else {
                return Err(worker_failed(
                    client,
                    slot,
                    format!("its pane {} in tmux session {session} is gone", panes[i]),
                ));
            };
            let pane_pid: u32 = fields.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            if fields.get(2) == Some(&"1") {
                let status = fields.get(3).copied().unwrap_or("?");
                let said = pane_tail(tmux, &panes[i]);
                return Err(worker_failed(
                    client,
                    slot,
                    format!("it exited at start (status {status}): {said}"),
                ));
            }
            let serving = matches!(
                client.read_status(slot),
                Ok(Some(s)) if s.worker_pid == Some(pane_pid) && pane_pid != 0
            );
            if serving {
                pids[i] = Some(pane_pid);
            }
        }
        if pids.iter().all(Option::is_some) {
            return Ok(pids.into_iter().flatten().collect());
        }
        if Instant::now() >= deadline {
            let late: Vec<String> = slots
                .iter()
                .zip(&pids)
                .filter(|(_, p)| p.is_none())
                .map(|(s, _)| s.to_string())
                .collect();
            return Err(Error::Timeout {
                what: format!(
                    "worker(s) {} to start in tmux session {session}",
                    late.join(", ")
                ),
                after: timeout,
            });
        }
        // A process in a tmux pane offers no event to wait on.
        std::thread::sleep(POLL);
    }
}

fn worker_failed(client: &Client, slot: Slot, detail: String) -> Error {
    Error::io(
        "start the worker for",
        client.worker(slot).dir,
        io::Error::other(detail),
    )
}

/// The last lines a (dead) pane printed, without tmux's own "Pane is dead" line.
fn pane_tail(tmux: &Tmux, pane: &str) -> String {
    let text = tmux
        .run(&["capture-pane", "-p", "-t", pane])
        .unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("Pane is dead"))
        .collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    if tail.is_empty() {
        "(it printed nothing)".to_string()
    } else {
        tail
    }
}

/// The one-line hint printed in the orchestrator pane before its command starts.
fn hint(tmux: &Tmux, session: &str, workers: u32) -> String {
    let last = workers - 1;
    format!(
        "conductor: workers 0-{last} | conductor send N \"PROMPT\" --wait | conductor status | \
         conductor logs N -f | stop: {}",
        tmux.kill_hint(session)
    )
}

/// The orchestrator's argv: `cmd` split like a shell would, else `$SHELL`, else `/bin/sh`.
fn orchestrator_argv(cmd: Option<&str>) -> Result<Vec<String>> {
    let line = match cmd {
        Some(c) => c.to_string(),
        None => std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/bin/sh".into()),
    };
    let words = shlex::split(&line).ok_or_else(|| {
        Error::Usage(format!(
            "orchestrator command {line:?} has unbalanced quotes"
        ))
    })?;
    if words.is_empty() {
        return Err(Error::Usage("orchestrator command is empty".into()));
    }
    Ok(words)
}

/// `$PATH` with `dir` appended, when `dir` is not on it yet (so the orchestrator pane
/// finds `conductor` beside the launcher); `None` when nothing needs to change.
fn path_with(dir: Option<&Path>) -> Option<String> {
    let dir = dir?.to_str()?;
    let path = std::env::var("PATH").unwrap_or_default();
    if path.split(':').any(|p| p == dir) {
        return None;
    }
    Some(if path.is_empty() {
        dir.to_string()
    } else {
        format!("{path}:{dir}")
    })
}

fn utf8(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| {
        Error::Usage(format!(
            "{} is not valid UTF-8; tmux panes need UTF-8 paths",
            p.display()
        ))
    })
}

/// What to take down again if a launch fails halfway.
struct Undo<'a> {
    tmux: &'a Tmux,
    session: Option<String>,
    /// Worktrees made by this launch: (repository top, path, branch made too).
    worktrees: Vec<(PathBuf, PathBuf, Option<String>)>,
}

impl Undo<'_> {
    fn disarm(&mut self) {
        self.session = None;
        self.worktrees.clear();
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if let Err(e) = self.tmux.run(&["kill-session", "-t", &exact(&s)]) {
                tracing::warn!("cannot remove the half-made tmux session {s}: {e}");
            }
        }
        for (top, path, branch) in self.worktrees.drain(..).rev() {
            let removed = git(
                &top,
                &["worktree", "remove", "--force", &path.to_string_lossy()],
            );
            if let Err(e) = removed {
                tracing::warn!("cannot remove the worktree {}: {e}", path.display());
            }
            if let Some(b) = branch {
                if let Err(e) = git(&top, &["branch", "-D", &b]) {
                    tracing::warn!("cannot delete the branch {b}: {e}");
                }
            }
        }
    }
}

/// Run git in `dir`; its stdout, or an error with its stderr.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::io(
            "run",
            format!("git {}", args.join(" ")),
            io::Error::other(format!(
                "{} ({})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            )),
        ))
    }
}

fn git_output(dir: &Path, args: &[&str]) -> Result<Output> {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            let source = if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "git is not installed or not on PATH; --worktrees needs it",
                )
            } else {
                e
            };
            Error::io("run", "git", source)
        })
}

/// The git repository holding DIR.
struct Repo {
    /// The main worktree's top directory.
    top: PathBuf,
    /// The repository's shared `.git` directory (the same from every worktree).
    common_dir: PathBuf,
    /// DIR relative to `top` (workers run in the same place inside their worktree).
    prefix: PathBuf,
}

impl Repo {
    /// The repository `dir` is in, or a clear error if it is in none.
    fn of(dir: &Path) -> Result<Repo> {
        let out = git_output(
            dir,
            &[
                "rev-parse",
                "--show-toplevel",
                "--git-common-dir",
                "--show-prefix",
            ],
        )?;
        if !out.status.success() {
            return Err(Error::Usage(format!(
                "--worktrees needs a git repository, but {} is not in one ({}); \
                 run `git init` there and commit, or drop --worktrees",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let top = PathBuf::from(lines.next().unwrap_or_default());
        let common = PathBuf::from(lines.next().unwrap_or_default());
        let prefix = PathBuf::from(lines.next().unwrap_or_default());
        let common = if common.is_absolute() {
            common
        } else {
            dir.join(common)
        };
        let common_dir = common
            .canonicalize()
            .map_err(|e| Error::io("resolve the git directory", &common, e))?;
        let top = top
            .canonicalize()
            .map_err(|e| Error::io("resolve the repository", &top, e))?;
        Ok(Repo {
            top,
            common_dir,
            prefix,
        })
    }

    fn check_has_commit(&self) -> Result<()> {
        let out = git_output(
            &self.top,
            &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        )?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "--worktrees branches from HEAD, but the repository {} has no commit yet; \
                 commit something first",
                self.top.display()
            )))
        }
    }

    /// Worker `slot`'s worktree (reused if it exists, else made on `conductor/worker-i`):
    /// the directory the worker runs in, and the branch.
    fn worktree(
        &self,
        root: &Root,
        session: &str,
        slot: Slot,
        undo: &mut Undo<'_>,
    ) -> Result<(PathBuf, Option<String>)> {
        let path = worktree_path(root, session, slot);
        let branch = worktree_branch(slot);
        if path.symlink_metadata().is_ok() {
            // From an earlier launch: reuse it, but only if it is ours.
            let other = Repo::of(&path).ok();
            let same = other.as_ref().is_some_and(|o| {
                o.common_dir == self.common_dir && path.canonicalize().is_ok_and(|p| p == o.top)
            });
            if !same {
                return Err(Error::Usage(format!(
                    "{} exists but is not a worktree of {}; remove it or launch under \
                     another --session",
                    path.display(),
                    self.top.display()
                )));
            }
        } else {
            if let Some(parent) = path.parent() {
                fsio::ensure_dir(parent)?;
            }
            // A worktree deleted by hand is still registered; forget it so `add` works.
            git(&self.top, &["worktree", "prune"])?;
            let path_str = utf8(&path)?;
            let branch_ref = format!("refs/heads/{branch}");
            let branch_exists =
                git_output(&self.top, &["show-ref", "--verify", "--quiet", &branch_ref])?
                    .status
                    .success();
            if branch_exists {
                git(&self.top, &["worktree", "add", path_str, &branch])?;
            } else {
                git(
                    &self.top,
                    &["worktree", "add", "-b", &branch, path_str, "HEAD"],
                )?;
            }
            undo.worktrees.push((
                self.top.clone(),
                path.clone(),
                (!branch_exists).then(|| branch.clone()),
            ));
        }
        let top = path
            .canonicalize()
            .map_err(|e| Error::io("resolve the worktree", &path, e))?;
        let inside = top.join(&self.prefix);
        let dir = if self.prefix.as_os_str().is_empty() {
            top
        } else if inside.is_dir() {
            inside
        } else {
            tracing::warn!(
                "{} is not in worker {slot}'s worktree (not committed?); it runs at the top",
                self.prefix.display()
            );
            top
        };
        Ok((dir, Some(branch)))
    }
}

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
        return Err(tmux.failed(&args, &out));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sessions = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (Some(name), Some(root)) = (f.first(), f.get(1)) else {
            continue;
        };
        if root.is_empty() {
            continue;
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
        sessions.push(SessionInfo {
            session: name.to_string(),
            root: root.path().to_path_buf(),
            workers,
            dir: f.get(3).filter(|d| !d.is_empty()).map(PathBuf::from),
            attached: f.get(4).and_then(|a| a.parse().ok()).unwrap_or(0),
            workers_up,
        });
    }
    Ok(sessions)
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
        return Err(Error::Usage(format!(
            "tmux session {session} was not made by conductor-launch (it has no {OPT_ROOT}); \
             stop it with tmux kill-session if you mean to"
        )));
    }
    let workers: u32 = workers.parse().unwrap_or(0);
    let root = Root::new(root);
    let client = Client::new(root.clone());
    let _gate = Gate::acquire(
        &launch_gate(&root, session),
        &format!("conductor-launch for session {session}"),
    )?;
    if !tmux.has_session(session)? {
        return Ok(None);
    }
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

    let mut targets: Vec<(StoppedWorker, Option<u64>)> = Vec::new();
    let mut not_running = Vec::new();
    for slot in (0..workers).map(Slot) {
        let w = root.worker(slot);
        let holder = gate::probe(&w.worker_gate()).ok().flatten();
        let status = client.read_status(slot).ok().flatten();
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
        let start = host::process_start_time(pid);
        let _ = send_signal(Pid::from_raw(pid as i32), Signal::SIGTERM);
        targets.push((
            StoppedWorker {
                slot: slot.0,
                pid,
                task,
                forced: false,
            },
            start,
        ));
    }

    let gone = |w: &StoppedWorker, start: Option<u64>| {
        !host::same_process_alive(w.pid, start)
            || !matches!(gate::probe(&root.worker(Slot(w.slot)).worker_gate()), Ok(Some(h)) if h.pid == w.pid)
    };
    let deadline = Instant::now() + timeout;
    while !targets.iter().all(|(w, st)| gone(w, *st)) && Instant::now() < deadline {
        // A process that is not our child offers no event for its exit.
        std::thread::sleep(POLL);
    }
    for (w, st) in &mut targets {
        if !gone(w, *st) {
            tracing::warn!(
                "worker {} (pid {}) did not stop within {timeout:?}; killing it",
                w.slot,
                w.pid
            );
            let _ = send_signal(Pid::from_raw(w.pid as i32), Signal::SIGKILL);
            w.forced = true;
        }
    }
    let bound = Instant::now() + Duration::from_secs(5);
    while !targets.iter().all(|(w, st)| gone(w, *st)) && Instant::now() < bound {
        std::thread::sleep(POLL);
    }

    if let Err(e) = tmux.run(&["kill-session", "-t", &exact(session)]) {
        // Gone already (its last pane closed) is what we wanted.
        if tmux.has_session(session)? {
            return Err(e);
        }
    }
    Ok(Some(KillReport {
        session: session.to_string(),
        root: root.path().to_path_buf(),
        stopped: targets.into_iter().map(|(w, _)| w).collect(),
        not_running,
    }))
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
    crate::host::proc_stat(pid).map(|s| s.ppid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_are_checked() {
        for ok in ["conductor", "a", "work-2_x"] {
            assert!(validate_session_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a.b", "a:b", "a b", "é", &"x".repeat(65)] {
            assert!(validate_session_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_tmux_call_gets_the_socket() {
        let t = Tmux::new(Some("s1".into()));
        let args: Vec<_> = t.command().get_args().map(|a| a.to_owned()).collect();
        assert_eq!(args, ["-L", "s1"]);
        assert_eq!(Tmux::default().command().get_args().count(), 0);
        assert_eq!(t.attach_hint("w"), "tmux -L s1 attach -t w");
        assert_eq!(
            t.kill_hint("w"),
            "conductor-launch --kill --session w --socket s1"
        );
    }

    #[test]
    fn own_process_is_in_a_session_of_its_parent() {
        let me = std::process::id();
        let parent = parent_pid(me).unwrap();
        assert!(in_session(me, &[parent].into()));
        assert!(!in_session(me, &[u32::MAX].into()));
    }
}
