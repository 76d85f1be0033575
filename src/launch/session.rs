//! Creating a session: checks, the launch gate, panes and layout, readiness, undo on failure.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::problem::Result;
use crate::agent::AgentCommand;
use crate::env::{project_dir, refuse_nested, ENV_HOME, ENV_WORKER};
use crate::error::{split_command_line, Error};
use crate::layout::{Root, Slot};
use crate::pool;

use super::guard::{check_slots_free, take_gate};
use super::layout::{self, slot_range, window_name, PLACEHOLDER};
use super::tmux::{exact, pane_target, Tmux};
use super::worktree::{Made, Repo};
use super::options::{LaunchOptions, Launched, LaunchedWorker, MAX_WORKERS};
use super::problem::{utf8, validate_session_name, LaunchProblem};
use super::tmux::{OPT_DIR, OPT_ROOT, OPT_WORKERS};

/// The name of the window holding the panes.
const WINDOW_NAME: &str = "conductor";

/// How often a pane's process is re-checked: a process in a tmux pane offers no event.
const POLL: Duration = Duration::from_millis(10);

/// The command a person types to stop `session` (shown in the orchestrator pane).
pub fn stop_command(tmux: &Tmux, session: &str) -> String {
    match tmux.socket() {
        Some(s) => format!("conductor-launch --kill --session {session} --socket {s}"),
        None => format!("conductor-launch --kill --session {session}"),
    }
}

/// Create the session: orchestrator pane, N worker panes, wait until every worker serves.
/// On failure nothing is left behind (session killed, fresh worktrees removed).
///
/// A session of that name already running (or being launched or stopped right now) is
/// refused with [`LaunchError::Refused`](super::LaunchError::Refused), saying how to attach to it; a launch from
/// inside an agent is refused with [`Error::Nested`] unless [`LaunchOptions::allow_nested`].
pub fn launch(opts: &LaunchOptions) -> Result<Launched> {
    refuse_nested("launch a tmux session", opts.allow_nested)?;
    let (dir, orchestrator) = check(opts)?;
    let tmux = &opts.tmux;
    tmux.version()?;
    crate::queue::init_root(&opts.root)?;
    let root_path = opts
        .root
        .path()
        .canonicalize()
        .map_err(|e| Error::io("resolve", opts.root.path(), e))?;
    let root = Root::new(&root_path);
    let session = opts.session.as_str();
    let slots: Vec<Slot> = (0..opts.workers).map(Slot).collect();
    let gate = take_gate(tmux, &root, session)?;
    check_slots_free(&root, &slots)?;
    // Each worker would refuse an agent that cannot run; say so before any pane opens.
    let line = opts.agent.clone().unwrap_or_else(|| {
        opts.preset
            .unwrap_or_default()
            .default_command()
            .to_string()
    });
    crate::agent::AgentCommand::parse(&line)?.locate()?;

    let mut undo = Undo {
        tmux,
        session: None,
        worktrees: Vec::new(),
    };
    let worker_dirs = worker_dirs(opts, &root, &dir, &slots, &mut undo)?;
    let (_, orch_pane) = new_window(&mut undo, session, &root_path, &dir, opts.workers)?;
    let plan = layout::plan(&slots, opts.dashboard);
    let (_, panes) = lay_out(tmux, session, &dir, &orch_pane, &plan)?;
    for (i, &slot) in slots.iter().enumerate() {
        start_worker(tmux, opts, &root_path, slot, &panes[i].1, &worker_dirs[i].0)?;
    }
    let hint = hint(tmux, &opts.session, &plan);
    start_orchestrator(tmux, opts, &root_path, &dir, &orch_pane, orchestrator, hint)?;
    let pane_ids: Vec<String> = panes.iter().map(|(_, p)| p.clone()).collect();
    let pids = wait_ready(tmux, &root, session, &slots, &pane_ids, opts.ready_timeout)?;

    let workers = slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| LaunchedWorker {
            slot,
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
        workers,
    })
}

/// Check what can be checked before anything is made: the project directory (returned
/// canonical) and the orchestrator's argv.
fn check(opts: &LaunchOptions) -> Result<(PathBuf, Vec<String>)> {
    validate_session_name(&opts.session)?;
    if opts.workers == 0 || opts.workers > MAX_WORKERS {
        return Err(LaunchProblem::WorkerCount {
            workers: opts.workers,
        }
        .into());
    }
    if let Some(a) = &opts.agent {
        AgentCommand::parse(a)?;
    }
    let orchestrator = orchestrator_argv(opts.orchestrator.as_deref())?;
    if opts.dashboard && !conductor_bin(opts).is_file() {
        return Err(LaunchProblem::NoWorkerBinary {
            path: conductor_bin(opts),
        }
        .into());
    }
    if !opts.worker_bin.is_file() {
        return Err(LaunchProblem::NoWorkerBinary {
            path: opts.worker_bin.clone(),
        }
        .into());
    }
    let dir = project_dir(&opts.dir)?;
    Ok((dir, orchestrator))
}

/// Each worker's directory and branch: DIR itself, or its own worktree.
fn worker_dirs(
    opts: &LaunchOptions,
    root: &Root,
    dir: &Path,
    slots: &[Slot],
    undo: &mut Undo<'_>,
) -> Result<Vec<(PathBuf, Option<String>)>> {
    if !opts.worktrees {
        return Ok(slots.iter().map(|_| (dir.to_path_buf(), None)).collect());
    }
    let repo = Repo::for_workers(dir)?;
    let mut dirs = Vec::new();
    for &slot in slots {
        let wt = repo.worktree(root, &opts.session, slot)?;
        undo.worktrees.extend(wt.made);
        dirs.push((wt.dir, Some(wt.branch)));
    }
    Ok(dirs)
}

/// Create the session with its one window and the orchestrator's (placeholder) pane,
/// record the root in the session options (and in `undo`); returns the window and pane ids.
///
/// The layout is made first, with a placeholder (`cat`) in every pane; then each pane
/// is respawned with its real command at its final size, so nothing it prints at start
/// (the hint, the worker's banner) is lost to reflowing while panes are split.
fn new_window(
    undo: &mut Undo<'_>,
    session: &str,
    root: &Path,
    dir: &Path,
    workers: u32,
) -> Result<(String, String)> {
    let (root_str, dir_str) = (utf8(root)?, utf8(dir)?);
    let tmux = undo.tmux;
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
    let (Some(window), Some(orch_pane)) = (ids.next(), ids.next()) else {
        return Err(Error::io(
            "read the ids of",
            format!("tmux session {session}"),
            io::Error::other(format!("new-session printed {out:?}")),
        )
        .into());
    };
    let target = pane_target(session);
    let workers = workers.to_string();
    for (option, value) in [
        (OPT_ROOT, root_str),
        (OPT_WORKERS, &workers),
        (OPT_DIR, dir_str),
    ] {
        tmux.run(&["set-option", "-t", &target, option, value])?;
    }
    tmux.run(&["set-environment", "-t", &exact(session), ENV_HOME, root_str])?;
    // The orchestrator's pane closes when it exits (pane option; older tmux: stays).
    layout::window_options(tmux, window)?;
    let _ = tmux.succeeds(&["set-option", "-p", "-t", orch_pane, "remain-on-exit", "off"]);
    tmux.run(&["select-pane", "-t", orch_pane, "-T", "orchestrator"])?;
    Ok((window.to_string(), orch_pane.to_string()))
}

/// A worker's window name and pane id.
type WorkerPane = (String, String);

/// Make every worker's (placeholder) pane, window by window as `plan` says: the first
/// window's workers in a grid below the orchestrator, each further window a grid of its
/// own. Returns every window id, and each worker's window name and pane id in slot order.
fn lay_out(
    tmux: &Tmux,
    session: &str,
    dir: &Path,
    orch_pane: &str,
    plan: &[Vec<Slot>],
) -> Result<(Vec<String>, Vec<WorkerPane>)> {
    let mut windows = Vec::new();
    let mut panes = Vec::new();
    for (i, slots) in plan.iter().enumerate() {
        let (name, first) = if i == 0 {
            if slots.is_empty() {
                continue;
            }
            // The orchestrator keeps the top half, across the whole width.
            (
                WINDOW_NAME.to_string(),
                layout::split(tmux, orch_pane, "-v", 50)?,
            )
        } else {
            let name = window_name(i);
            let (window, pane) = layout::new_window(tmux, session, &name, utf8(dir)?)?;
            layout::window_options(tmux, &window)?;
            windows.push(window);
            (name, pane)
        };
        for pane in layout::grid(tmux, &first, slots)? {
            panes.push((name.clone(), pane));
        }
    }
    Ok((windows, panes))
}

/// Replace `pane`'s placeholder with `conductor-worker SLOT WDIR --root ROOT`.
fn start_worker(
    tmux: &Tmux,
    opts: &LaunchOptions,
    root: &Path,
    slot: Slot,
    pane: &str,
    wdir: &Path,
) -> Result<()> {
    let (root_str, wdir_str, bin) = (utf8(root)?, utf8(wdir)?, utf8(&opts.worker_bin)?);
    let home = format!("{ENV_HOME}={root_str}");
    let slot_str = slot.to_string();
    let mut args: Vec<&str> = vec![
        "respawn-pane",
        "-k",
        "-t",
        pane,
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
    // You watch each agent: its live output in its pane, under the worker's lines.
    args.push("--show-output");
    if let Some(a) = &opts.agent {
        args.extend(["--agent", a]);
    }
    let preset = opts.preset.map(|p| p.to_string());
    if let Some(p) = &preset {
        args.extend(["--preset", p]);
    }
    Ok(tmux.run(&args).map(drop)?)
}

/// Replace the orchestrator pane's placeholder with its command, after the hint line,
/// and select it.
fn start_orchestrator(
    tmux: &Tmux,
    opts: &LaunchOptions,
    root: &Path,
    dir: &Path,
    pane: &str,
    orchestrator: Vec<String>,
    hint: String,
) -> Result<()> {
    let home = format!("{ENV_HOME}={}", utf8(root)?);
    let mut argv: Vec<String> = vec!["env".into(), "-u".into(), ENV_WORKER.into(), home];
    if let Some(path) = path_with(opts.worker_bin.parent()) {
        argv.push(format!("PATH={path}"));
    }
    if opts.dashboard {
        // The dashboard first; the orchestrator's command (a shell) when it quits.
        argv.extend([
            "sh".into(),
            "-c".into(),
            r#"printf '%s\n' "$1"; "$2" dashboard --root "$3"; shift 3; exec "$@""#.into(),
            "conductor-launch".into(),
            hint,
            utf8(&conductor_bin(opts))?.to_string(),
            utf8(root)?.to_string(),
        ]);
    } else {
        argv.extend([
            "sh".into(),
            "-c".into(),
            r#"printf '%s\n' "$1"; shift; exec "$@""#.into(),
            "conductor-launch".into(),
            hint,
        ]);
    }
    argv.extend(orchestrator);
    let mut args: Vec<&str> = vec!["respawn-pane", "-k", "-t", pane, "-c", utf8(dir)?, "--"];
    args.extend(argv.iter().map(String::as_str));
    tmux.run(&args)?;
    Ok(tmux.run(&["select-pane", "-t", pane]).map(drop)?)
}

/// Wait until every worker pane's process [serves](pool::serving) its slot, or fail as
/// soon as one pane's process dies, quoting what it printed.
fn wait_ready(
    tmux: &Tmux,
    root: &Root,
    session: &str,
    slots: &[Slot],
    panes: &[String],
    timeout: Duration,
) -> Result<Vec<u32>> {
    let deadline = Instant::now() + timeout;
    let mut pids: Vec<Option<u32>> = vec![None; slots.len()];
    loop {
        let format = "#{pane_id} #{pane_pid} #{pane_dead} #{pane_dead_status}";
        let listing = tmux.run(&["list-panes", "-s", "-t", &exact(session), "-F", format])?;
        for (i, &slot) in slots.iter().enumerate() {
            if pids[i].is_some() {
                continue;
            }
            let fields: Vec<&str> = listing
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|f| f.first() == Some(&panes[i].as_str()))
                .ok_or_else(|| {
                    let gone = format!("its pane {} in tmux session {session} is gone", panes[i]);
                    pool::start_failed(root, slot, gone)
                })?;
            if fields.get(2) == Some(&"1") {
                let status = fields.get(3).copied().unwrap_or("?");
                let said = pane_tail(tmux, &panes[i]);
                let detail = format!("it exited at start (status {status}): {said}");
                return Err(pool::start_failed(root, slot, detail).into());
            }
            let pane_pid: u32 = fields.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            pids[i] = pool::serving(root, slot, pane_pid).then_some(pane_pid);
        }
        if pids.iter().all(Option::is_some) {
            return Ok(pids.into_iter().flatten().collect());
        }
        if Instant::now() >= deadline {
            let late: Vec<Slot> = slots
                .iter()
                .zip(&pids)
                .filter(|(_, p)| p.is_none())
                .map(|(s, _)| *s)
                .collect();
            let place = format!(" in tmux session {session}");
            return Err(pool::late_error(&late, &place, timeout).into());
        }
        std::thread::sleep(POLL);
    }
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

/// The hint printed in the orchestrator pane before its command starts: its parts
/// joined by ` | ` on lines of at most [`HINT_WIDTH`] columns, broken only between
/// parts (the narrowest orchestrator pane is 80 columns: no command is cut in two).
fn hint(tmux: &Tmux, session: &str, plan: &[Vec<Slot>]) -> String {
    let parts = [
        format!("conductor: {}", where_workers_are(plan)),
        "conductor send N \"PROMPT\" --wait".to_string(),
        "conductor status".to_string(),
        "conductor logs N -f".to_string(),
        format!("stop: {}", stop_command(tmux, session)),
    ];
    join_within(&parts, " | ", HINT_WIDTH)
}

/// Columns of one hint line.
const HINT_WIDTH: usize = 78;

/// `parts` joined by `sep`, a new line started instead wherever the next part would go
/// past `width` (a part longer than that has a line of its own).
fn join_within(parts: &[String], sep: &str, width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    for part in parts {
        match lines.last_mut() {
            Some(line)
                if line.chars().count() + sep.chars().count() + part.chars().count() <= width =>
            {
                line.push_str(sep);
                line.push_str(part);
            }
            _ => lines.push(part.clone()),
        }
    }
    lines.join("\n")
}

/// `workers 0-3 below, 4-7 in window workers-2 (Ctrl-b n: next window)`: where each
/// worker's pane is, for the hint line and the launcher's report.
pub fn where_workers_are(plan: &[Vec<Slot>]) -> String {
    let parts: Vec<String> = plan
        .iter()
        .enumerate()
        .filter(|(_, slots)| !slots.is_empty())
        .map(|(i, slots)| {
            let place = match i {
                0 => "below".to_string(),
                _ => format!("in window {}", window_name(i)),
            };
            format!("{} {place}", slot_range(slots))
        })
        .collect();
    let mut text = format!("workers {}", parts.join(", "));
    if plan.len() > 1 {
        text.push_str(" (Ctrl-b n: next window)");
    }
    text
}

/// The `conductor` binary beside the worker's, which runs the dashboard.
fn conductor_bin(opts: &LaunchOptions) -> PathBuf {
    opts.worker_bin.with_file_name("conductor")
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
    Ok(split_command_line("orchestrator", &line)?)
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

/// What to take down again if a launch fails halfway.
struct Undo<'a> {
    tmux: &'a Tmux,
    session: Option<String>,
    /// Worktrees made by this launch, in the order they were made.
    worktrees: Vec<Made>,
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
            if let Err(e) = self.tmux.kill_session(&s) {
                tracing::warn!("cannot remove the half-made tmux session {s}: {e}");
            }
        }
        for made in self.worktrees.drain(..).rev() {
            made.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_says_which_window_holds_which_workers() {
        let slots: Vec<Slot> = (0..8).map(Slot).collect();
        assert_eq!(
            where_workers_are(&layout::plan(&slots, false)),
            "workers 0-3 below, 4-7 in window workers-2 (Ctrl-b n: next window)"
        );
        assert_eq!(
            where_workers_are(&layout::plan(&slots[..3], false)),
            "workers 0-2 below"
        );
        assert_eq!(
            where_workers_are(&layout::plan(&slots[..3], true)),
            "workers 0-2 in window workers-2 (Ctrl-b n: next window)"
        );
    }

    #[test]
    fn the_stop_command_names_the_socket() {
        let t = Tmux::new(Some("s1".into()));
        assert_eq!(
            stop_command(&t, "w"),
            "conductor-launch --kill --session w --socket s1"
        );
        assert_eq!(
            stop_command(&Tmux::default(), "w"),
            "conductor-launch --kill --session w"
        );
    }
}
