//! `conductor launch` / `conductor-launch`: an orchestrator pane and N worker panes in tmux.

use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use crate::cli::usage::CliError;
use crate::launch::{self, LaunchOptions, Tmux};
use crate::preset::Preset;
use crate::Root;
use anyhow::Context as _;

use crate::cli::common::{self, exit};

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Layout: the orchestrator pane across the top half, workers 0-3 two by two below it; \
further workers go four to a window (`workers-2`, `workers-3`…; Ctrl-b n goes to the next), \
so that at 80x24 every pane keeps about 40x5 or more. The hint line printed in the \
orchestrator pane says which window holds which workers. Each worker pane runs \
`conductor-worker i DIR` and is titled `worker i`.

With --dashboard the orchestrator pane runs `conductor dashboard` (then the --orchestrator \
command, by default $SHELL, once you quit it with q) and has the first window to itself; \
all workers are in the windows after it.

With --worktrees, worker i runs in its own git worktree <root>/worktrees/<session>/worker-i \
on branch conductor/worker-i (made from HEAD the first time, reused by later launches).

The session records its root and worker count in the tmux options @conductor_root and \
@conductor_workers; --list shows them and --kill uses them.

Exit codes: 0 ok, 1 error, 2 usage, 3 refused (session already running, slot already \
served, nested start)")]
pub struct Args {
    /// Number of worker panes (slots 0..N).
    #[arg(short = 'n', long, default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=launch::MAX_WORKERS as i64))]
    pub workers: u32,
    /// Project directory the workers run in (the repository with --worktrees).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// tmux session name.
    #[arg(long, value_name = "NAME", default_value = launch::DEFAULT_SESSION)]
    pub session: String,
    /// Agent command line for the workers (prompt on stdin). [default: the preset's, else `claude -p`]
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
    /// Agent kind for the workers: claude, codex, gemini or command.
    #[arg(long, value_name = "PRESET", value_parser = super::args::parse_preset)]
    pub preset: Option<Preset>,
    /// Give each worker its own git worktree of DIR on branch conductor/worker-i.
    #[arg(long)]
    pub worktrees: bool,
    /// Command for the orchestrator pane [default: $SHELL].
    #[arg(long, value_name = "CMD")]
    pub orchestrator: Option<String>,
    /// Run `conductor dashboard` in the orchestrator pane (the first window, to itself);
    /// the orchestrator command follows when it quits.
    #[arg(long)]
    pub dashboard: bool,
    /// Do not attach to (or switch to) the session after creating it.
    #[arg(long)]
    pub no_attach: bool,
    /// tmux server socket name (`tmux -L NAME`) [default: tmux's default server].
    #[arg(long, value_name = "NAME")]
    pub socket: Option<String>,
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Launch even inside a conductor agent (CONDUCTOR_WORKER is set).
    #[arg(long)]
    pub allow_nested: bool,
    /// Stop the session's workers cleanly (running tasks end `interrupted`), then kill it.
    #[arg(long, conflicts_with_all = ["list", "workers", "dir", "agent", "preset", "worktrees",
          "orchestrator", "no_attach", "allow_nested", "dashboard"])]
    pub kill: bool,
    /// List running conductor sessions with their roots and worker counts.
    #[arg(long, conflicts_with_all = ["session", "workers", "dir", "agent", "preset",
          "worktrees", "orchestrator", "no_attach", "allow_nested", "dashboard"])]
    pub list: bool,
    /// With --list or --kill: print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let tmux = Tmux::new(args.socket.clone());
    if args.list {
        return list(&tmux, args.json);
    }
    if args.kill {
        return kill(&tmux, &args.session, args.json);
    }
    if args.json {
        anyhow::bail!(CliError::Usage("--json goes with --list or --kill".into()));
    }
    crate::env::refuse_nested("launch a tmux session", args.allow_nested)?;
    let root = Root::resolve(args.root.as_deref())?;
    crate::trust::verify_root(&root)?;
    let worker_bin = std::env::current_exe()
        .context("finding this program's path")?
        .with_file_name("conductor-worker");
    let mut opts = LaunchOptions::new(root, worker_bin);
    opts.session = args.session.clone();
    opts.workers = args.workers;
    opts.dir = args.dir.clone();
    opts.agent = args.agent.clone();
    opts.preset = args.preset;
    opts.worktrees = args.worktrees;
    opts.orchestrator = args.orchestrator.clone();
    opts.dashboard = args.dashboard;
    opts.tmux = tmux.clone();
    opts.allow_nested = args.allow_nested;

    let stop = launch::stop_command(&tmux, &opts.session);
    let launched = launch::launch(&opts).map_err(|e| match e {
        // The session runs (or is being made): say how to stop it, too.
        launch::LaunchError::Refused(why) => {
            anyhow::Error::from(CliError::Refused(format!("{why}; stop it with `{stop}`")))
        }
        e => anyhow::Error::from(e),
    })?;
    super::output::emit(&describe(&launched, &tmux, args.dashboard))?;
    if args.no_attach {
        return Ok(exit::OK);
    }
    attach(&tmux, &launched.session)
}

/// What `conductor-launch` prints once the session is up.
fn describe(launched: &launch::Launched, tmux: &Tmux, dashboard: bool) -> String {
    use std::fmt::Write as _;
    let session = &launched.session;
    let mut text = format!(
        "launched tmux session {session}: orchestrator + {} workers on {}\n",
        launched.workers.len(),
        launched.root.display()
    );
    for w in &launched.workers {
        let branch = w
            .branch
            .as_ref()
            .map(|b| format!("  (branch {b})"))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "  worker {}  pid {}  {}{branch}",
            w.slot,
            w.pid,
            w.dir.display()
        );
    }
    let slots: Vec<_> = launched.workers.iter().map(|w| w.slot).collect();
    let plan = launch::layout::plan(&slots, dashboard);
    let first = if dashboard {
        "the dashboard in the first window"
    } else {
        "the orchestrator on top"
    };
    let _ = writeln!(
        text,
        "panes:  {first}; {}",
        launch::where_workers_are(&plan)
    );
    let _ = writeln!(text, "attach: {}", tmux.attach_hint(session));
    let _ = writeln!(text, "stop:   {}", launch::stop_command(tmux, session));
    text
}

/// Attach to the session, or switch this tmux client to it when already inside tmux.
fn attach(tmux: &Tmux, session: &str) -> anyhow::Result<i32> {
    let target = format!("={session}");
    if let Some(inside) = std::env::var_os("TMUX").filter(|v| !v.is_empty()) {
        // $TMUX is "<socket path>,<pid>,<session>": switch only on that same server.
        let inside = inside.to_string_lossy().into_owned();
        let socket_path = inside.split(',').next().unwrap_or("");
        let socket_name = std::path::Path::new(socket_path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let same_server = match tmux.socket() {
            None => true,
            Some(s) => socket_name.as_deref() == Some(s),
        };
        if !same_server {
            super::output::emit(&format!(
                "this terminal is inside another tmux server; attach from outside it with `{}`\n",
                tmux.attach_hint(session)
            ))?;
            return Ok(exit::OK);
        }
        let status = tmux
            .command()
            .args(["switch-client", "-t", &target])
            .status()
            .context("running tmux switch-client")?;
        return Ok(if status.success() {
            exit::OK
        } else {
            exit::FAILURE
        });
    }
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        super::output::emit(&format!(
            "not on a terminal, so not attaching; attach with `{}`\n",
            tmux.attach_hint(session)
        ))?;
        return Ok(exit::OK);
    }
    let err = tmux
        .command()
        .args(["attach-session", "-t", &target])
        .exec();
    Err(anyhow::Error::new(err).context("running tmux attach-session"))
}

fn list(tmux: &Tmux, json: bool) -> anyhow::Result<i32> {
    // Without --socket: the default server and every private one.
    let sessions = launch::list_everywhere(tmux)?;
    if json {
        super::output::emit_json(&sessions)?;
        return Ok(exit::OK);
    }
    if sessions.is_empty() {
        super::output::emit("no conductor sessions running\n")?;
        return Ok(exit::OK);
    }
    // A SOCKET column only when a session runs on a private server.
    let sockets = sessions.iter().any(|s| s.socket.is_some());
    let mut cols = vec![
        ("SESSION", super::table::Col::Keep),
        ("WORKERS", super::table::Col::Keep),
        ("ATTACHED", super::table::Col::Keep),
        ("ROOT", super::table::Col::Shrink),
    ];
    if sockets {
        cols.insert(1, ("SOCKET", super::table::Col::Keep));
    }
    let mut t = super::table::Table::new(&cols);
    t.wrap();
    for s in &sessions {
        let mut row = vec![
            s.session.clone(),
            format!("{}/{}", s.workers_up, s.workers),
            if s.attached > 0 { "yes" } else { "no" }.to_string(),
            s.root.display().to_string(),
        ];
        if sockets {
            row.insert(1, s.socket.clone().unwrap_or_else(|| "-".into()));
        }
        t.row(row);
    }
    let text = t.render(super::table::width());
    super::output::emit(&text)?;
    Ok(exit::OK)
}

fn kill(tmux: &Tmux, session: &str, json: bool) -> anyhow::Result<i32> {
    let mut found = launch::kill(tmux, session, launch::DEFAULT_STOP_TIMEOUT)?;
    if found.is_none() && tmux.socket().is_none() {
        // Not on the default server: on a private one (launched with --socket)?
        match launch::servers_with(tmux, session).as_slice() {
            [] => {}
            [one] => found = launch::kill(one, session, launch::DEFAULT_STOP_TIMEOUT)?,
            many => {
                let names: Vec<&str> = many.iter().filter_map(Tmux::socket).collect();
                anyhow::bail!(CliError::Usage(format!(
                    "a session {session} runs on each of the tmux sockets {}: name one with \
                     --socket",
                    names.join(", ")
                )));
            }
        }
    }
    let Some(report) = found else {
        common::report(&anyhow::anyhow!(
            "no tmux session {session} is running{}; `conductor-launch --list{}` shows the running ones",
            tmux.socket().map(|s| format!(" on socket {s}")).unwrap_or_default(),
            tmux.socket().map(|s| format!(" --socket {s}")).unwrap_or_default(),
        ));
        return Ok(exit::FAILURE);
    };
    if json {
        super::output::emit_json(&report)?;
        return Ok(exit::OK);
    }
    let mut text = String::new();
    for w in &report.stopped {
        let how = if w.forced {
            "killed (did not stop in time)"
        } else {
            "stopped"
        };
        let task = w
            .task
            .as_ref()
            .map(|t| format!(": task {t} interrupted"))
            .unwrap_or_default();
        text.push_str(&format!("{how} worker {} (pid {}){task}\n", w.slot, w.pid));
    }
    for slot in &report.not_running {
        text.push_str(&format!("worker {slot}: not running\n"));
    }
    text.push_str(&format!("killed tmux session {}\n", report.session));
    super::output::emit(&text)?;
    Ok(exit::OK)
}

/// `conductor-launch …`: parse the command line, lay out the session, return the exit code.
pub fn launch_main() -> i32 {
    let cli = <LaunchCli as clap::Parser>::parse();
    cli.verbosity.init_logging();
    match run(cli.launch) {
        Ok(code) => code,
        Err(e) => common::report(&e),
    }
}

/// `conductor-launch`'s command line (also walked for docs/CLI.md).
#[derive(Debug, clap::Parser)]
#[command(
    name = "conductor-launch",
    version,
    about = "Lay out an orchestrator pane and N worker panes in tmux"
)]
pub struct LaunchCli {
    #[command(flatten)]
    launch: Args,
    #[command(flatten)]
    verbosity: common::Verbosity,
}
