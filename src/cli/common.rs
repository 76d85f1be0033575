//! Pieces every binary shares: logging, exit codes, error reports, the worker command.

use std::path::Path;
use std::time::Duration;

use super::usage::CliError;
pub use super::worker_args::WorkerArgs;
use super::worker_args::PRESETS_HELP;
use crate::agent::AgentCommand;
use crate::error::ExitClass;
use crate::launch::LaunchError;
use crate::preset::Preset;
use crate::watch::WatchMode;
use crate::worker::{MultiWorker, Worker, WorkerOptions};
use crate::{Error, Root};

/// Exit codes as the binaries return them: each is [`ExitClass::code`] of its class,
/// where the codes are defined and documented.
pub mod exit {
    use crate::error::ExitClass;

    pub const OK: i32 = ExitClass::Ok.code();
    pub const FAILURE: i32 = ExitClass::Failure.code();
    pub const USAGE: i32 = ExitClass::Usage.code();
    #[cfg(test)]
    pub const REFUSED: i32 = ExitClass::Refused.code();
    pub const NOBODY: i32 = ExitClass::Nobody.code();
    pub const NEEDS_PERSON: i32 = ExitClass::NeedsPerson.code();
    pub const INTERRUPTED: i32 = ExitClass::Interrupted.code();
}

pub use crate::error::EXIT_CODES_HELP;

/// `-v` / `-q`, shared by every binary.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Verbosity {
    /// More logging (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true,
          help_heading = super::help::GLOBAL, hide_short_help = true)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true, help_heading = super::help::GLOBAL, hide_short_help = true)]
    pub quiet: bool,
}

impl Verbosity {
    pub fn init_logging(self) {
        init_logging(self.verbose, self.quiet);
    }
}

/// Set up `tracing` on stderr: `-v` for debug, `-vv` for trace, `-q` for warnings only;
/// `RUST_LOG` overrides. Lines are compact ([`CompactLines`]), coloured only on a
/// terminal without `NO_COLOR`.
pub fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("conductor={level},warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(super::table::color(true))
        .event_format(CompactLines)
        .init();
}

/// One log line as a person in a narrow pane reads it: `14:03:07 started "fix the…"`.
/// Local time to the second; the level only when it is not INFO; on a terminal each
/// line is cut to its width (`…`), so a 40-column pane never wraps; into a file or a
/// pipe lines are whole and hold no escape sequences.
struct CompactLines;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for CompactLines
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        use tracing::Level;
        let mut line = local_time_of_day();
        let level = *event.metadata().level();
        let label = match level {
            Level::ERROR => Some(("error", "\x1b[31m")),
            Level::WARN => Some(("warn", "\x1b[33m")),
            Level::INFO => None,
            Level::DEBUG => Some(("debug", "\x1b[2m")),
            Level::TRACE => Some(("trace", "\x1b[2m")),
        };
        if let Some((word, _)) = label {
            line.push(' ');
            line.push_str(word);
        }
        line.push(' ');
        let mut message = String::new();
        ctx.field_format().format_fields(
            tracing_subscriber::fmt::format::Writer::new(&mut message),
            event,
        )?;
        line.push_str(&message);
        let line = match super::table::stderr_width() {
            Some(width) => crate::text::fit(&line.replace('\n', " "), width),
            None => line,
        };
        match label.filter(|_| w.has_ansi_escapes()) {
            // Colour only the level word: after the 8-character time and a space.
            Some((word, colour)) if line.get(9..).is_some_and(|l| l.starts_with(word)) => writeln!(
                w,
                "{}{colour}{}\x1b[0m{}",
                &line[..9],
                &line[9..9 + word.len()],
                &line[9 + word.len()..]
            ),
            _ => writeln!(w, "{line}"),
        }
    }
}

/// `14:03:07`, the local time to the second.
fn local_time_of_day() -> String {
    use nix::libc;
    // SAFETY: `time` with a null pointer only returns; `localtime_r` writes into the
    // zeroed `tm` we own. (The TZ environment is read, never written, by this process.)
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return "--:--:--".to_string();
        }
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}

/// The class of an error from any layer: the library's, the launcher's, the front
/// end's own; anything else (an I/O error met in the front end) is a failure.
pub fn exit_class_of(err: &anyhow::Error) -> ExitClass {
    if let Some(e) = err.downcast_ref::<Error>() {
        e.exit_class()
    } else if let Some(e) = err.downcast_ref::<LaunchError>() {
        e.exit_class()
    } else if let Some(e) = err.downcast_ref::<CliError>() {
        e.exit_class()
    } else {
        ExitClass::Failure
    }
}

/// Map an error to its documented exit code.
pub fn exit_code_for(err: &anyhow::Error) -> i32 {
    exit_class_of(err).code()
}

/// Print an error with its causes and return its exit code.
pub fn report(err: &anyhow::Error) -> i32 {
    let top = err.to_string();
    eprintln!("error: {top}");
    // Library errors already spell out their cause; print only what is new.
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !top.contains(&text) {
            eprintln!("  caused by: {text}");
        }
    }
    if let Some(hint) = err.downcast_ref::<Error>().and_then(hint) {
        eprintln!("  {hint}");
    }
    exit_code_for(err)
}

/// What a person can do about a library error, in terms of commands and flags (the
/// library's own messages speak of the library only).
fn hint(err: &Error) -> Option<String> {
    match err {
        // Every command that refuses to nest takes this flag.
        Error::Nested { .. } => Some("pass --allow-nested if you really mean it".into()),
        Error::NoHome { variable } => Some(format!("pass --root DIR or set {variable}")),
        Error::AgentNotFound { .. } => {
            Some("install it, or pass --agent with the program's full path".into())
        }
        _ => None,
    }
}

/// The workers' agent command: `--agent`'s line, else the preset's (narrowed by
/// `--allowed-tools` / `--permission-mode`).
pub fn agent_command(
    agent: Option<&str>,
    preset: Preset,
    allowed_tools: Option<&str>,
    permission_mode: Option<&str>,
) -> anyhow::Result<AgentCommand> {
    let line = match agent {
        Some(line) => line.to_string(),
        None => preset
            .command_line(allowed_tools, permission_mode)
            .map_err(anyhow::Error::msg)?,
    };
    Ok(AgentCommand::parse(&line)?)
}

/// Refuse, before any worker starts, an agent command that cannot run (not on PATH,
/// not executable): each worker would refuse it anyway.
pub fn check_agent(
    agent: Option<&str>,
    preset: Option<Preset>,
    allowed_tools: Option<&str>,
    permission_mode: Option<&str>,
) -> anyhow::Result<()> {
    let command = agent_command(
        agent,
        preset.unwrap_or_default(),
        allowed_tools,
        permission_mode,
    )?;
    command.locate()?;
    Ok(())
}

/// A worker its owner tells on (`--tell-owner`) stops as SIGTERM would make it when its
/// stdin ends: the owner's end of that pipe, never written, closes with the owner (a
/// `conductor run --root R` killed outright too), and its workers do not go on serving
/// the root for nobody.
fn stop_when_owner_gone(tx: crossbeam_channel::Sender<()>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("owner-gone".into())
        .spawn(move || {
            use std::io::Read;
            let mut byte = [0u8; 64];
            let mut stdin = std::io::stdin().lock();
            loop {
                match stdin.read(&mut byte) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            tracing::info!("the owner's pipe (stdin) ended: stopping");
            let _ = tx.try_send(());
        })
        .map(drop)
        .map_err(|e| anyhow::anyhow!("cannot start the thread that watches stdin: {e}"))
}

/// Start a worker and serve until Ctrl-C / SIGTERM / SIGHUP.
pub fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    // Before anything opens a descriptor (the signal handler's pipe, the gates).
    match crate::agent::reserve_low_fds() {
        Some(fds) => tracing::debug!("descriptors {fds:?} reserved for agents' stdio"),
        None => tracing::debug!(
            "no descriptors below 64 could be reserved for agents' stdio: each agent copies \
             the whole descriptor table"
        ),
    }
    let serving = match args.slot.0.as_slice() {
        [one] => one.to_string(),
        many => format!("for {} slots", many.len()),
    };
    crate::env::refuse_nested(&format!("start worker {serving}"), args.allow_nested)?;
    let root = Root::resolve(args.root.as_deref())?;
    let opts = worker_options(&args, root)?;
    check_one_slot_flags(&args)?;

    let (tx, shutdown) = crossbeam_channel::bounded(1);
    if args.tell_owner {
        stop_when_owner_gone(tx.clone())?;
    }
    ctrlc::set_handler(move || {
        let _ = tx.try_send(());
    })
    .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;

    if args.slot.0.len() > 1 {
        return run_multi(opts, &args.slot.0, &shutdown);
    }
    let Some(mut worker) = start_when_space(&shutdown, &opts.root, &[opts.slot], || {
        Worker::start(opts.clone())
    })?
    else {
        return Ok(());
    };
    // Cut to a terminal's width like the log lines after it (a narrow pane never wraps).
    let width = super::table::width();
    // With --wake-pipes or --tell-owner stdout is the owner's pipe: what we say goes to
    // the log (stderr).
    let say = |line: String| {
        if args.tells_owner() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    say(super::table::fit_line(&worker.describe(), width));
    let rec = worker.recovery();
    if !rec.is_empty() {
        say(super::table::fit_line(&format!("recovered: {rec}"), width));
    }
    if args.show_output {
        follow_output(&opts)?;
    }
    worker.run(&shutdown)?;
    tracing::info!("worker stopped");
    Ok(())
}

/// The worker's options from its arguments: its presets (the first the default, each
/// command narrowed by `--allowed-tools`/`--permission-mode` where it applies) or its
/// own `--agent` line, its project directory and limits.
fn worker_options(args: &WorkerArgs, root: Root) -> anyhow::Result<WorkerOptions> {
    let mut presets = args.preset.clone();
    presets.dedup();
    let preset = presets.first().copied().unwrap_or_default();
    let narrowed = |p: Preset| -> anyhow::Result<String> {
        let claude = p == Preset::Claude;
        let (tools, mode) = (
            args.allowed_tools.as_deref(),
            args.permission_mode.as_deref(),
        );
        if presets.len() > 1 && !claude {
            return Ok(p.default_command().to_string());
        }
        p.command_line(
            tools.filter(|_| claude || presets.len() == 1),
            mode.filter(|_| claude || presets.len() == 1),
        )
        .map_err(anyhow::Error::msg)
    };
    let line = match &args.agent {
        Some(line) => line.clone(),
        None => narrowed(preset)?,
    };
    let agent = AgentCommand::parse(&line)?;
    let dir = crate::env::project_dir(args.dir.as_deref().unwrap_or(Path::new(".")))?;
    let chosen = args.dir.is_some() || args.agent.is_some() || !args.preset.is_empty();
    super::worker_defaults::say_defaults(chosen, &dir, &line);
    let mut opts = WorkerOptions::new(root, args.slot.0[0], dir, agent);
    opts.preset = preset;
    for p in presets.iter().skip(1) {
        if *p != preset && !opts.more_agents.iter().any(|(q, _)| q == p) {
            opts.more_agents
                .push((*p, AgentCommand::parse(&narrowed(*p)?)?));
        }
    }
    opts.defer_rate_limited = !args.no_defer_rate_limited;
    opts.timeout = args.timeout;
    opts.kill_grace = args.kill_grace;
    opts.log_cap = args.log_cap;
    opts.allow_nested = args.allow_nested;
    if let Some(interval) = args.poll {
        opts.watch = WatchMode::Poll(interval.max(Duration::from_millis(1)));
    }
    opts.wake_pipes = args.wake_pipes;
    opts.tell_owner = args.tell_owner;
    Ok(opts)
}

/// Serve several slots by one worker process until `shutdown`.
fn run_multi(
    opts: WorkerOptions,
    slots: &[crate::Slot],
    shutdown: &crossbeam_channel::Receiver<()>,
) -> anyhow::Result<()> {
    let Some(mut worker) = start_when_space(shutdown, &opts.root, slots, || {
        MultiWorker::start(opts.clone(), slots)
    })?
    else {
        return Ok(());
    };
    println!("{}", worker.describe());
    for (slot, rec) in worker.recoveries() {
        println!("recovered worker {slot}: {rec}");
    }
    worker.run(shutdown)?;
    tracing::info!("worker stopped");
    Ok(())
}

/// `--show-output`: a thread printing the agents' output, cut to the terminal's width.
fn follow_output(opts: &WorkerOptions) -> anyhow::Result<()> {
    // Armed, and holding the live log it will read, before the worker takes its
    // first task: made on the thread, it could open the log only after a quick
    // first task had already moved it to tasks/ (seen once in CI, the pane empty).
    // `LogFollower::new` opens the file it follows.
    let log = opts.root.worker(opts.slot).output_log();
    // The first task's log made now (as after every task), so it is the file held.
    if let Err(e) = crate::agent::ready_log(&log) {
        tracing::warn!("readying {}: {e}", log.display());
    }
    match crate::inspect::LogFollower::new(&log, opts.watch) {
        Ok(follower) => {
            std::thread::Builder::new()
                .name("show-output".into())
                .spawn(move || show_output(follower, super::table::width))
                .map_err(|e| anyhow::anyhow!("cannot start the output thread: {e}"))?;
        }
        Err(e) => tracing::warn!("not showing the agents' output: {e}"),
    }
    Ok(())
}

/// How long an unfinished last line waits for the rest of it before it is shown.
const SHOW_PARTIAL_AFTER: Duration = Duration::from_millis(300);

/// Print the slot's live log as it grows, across its tasks (as `logs N -f`), each line
/// marked `│ ` and cut to `width()`, asked again for every batch of lines: a pane
/// resized (SIGWINCH) cuts the next lines at its new width, not the one it started
/// with; for as long as the worker runs (the thread goes with the process).
fn show_output(mut follower: crate::inspect::LogFollower, width: fn() -> Option<usize>) {
    let mut partial: Vec<u8> = Vec::new();
    let mut last_data = std::time::Instant::now();
    loop {
        loop {
            match follower.next_chunk() {
                Ok(Some(chunk)) => {
                    partial.extend_from_slice(&chunk);
                    last_data = std::time::Instant::now();
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("no longer showing the agents' output: {e}");
                    return;
                }
            }
        }
        // A last line without its newline (an answer such as `tr`'s) is shown once
        // the output has been quiet for a moment.
        if !partial.is_empty()
            && !partial.contains(&b'\n')
            && last_data.elapsed() >= SHOW_PARTIAL_AFTER
        {
            partial.push(b'\n');
        }
        let width = width();
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            let shown = format!("│ {}", text.trim_end_matches('\r'));
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{}", super::table::fit_line(&shown, width)).is_err() {
                return; // nobody reads the pane any more
            }
        }
        let wait = if partial.is_empty() {
            Duration::from_millis(500)
        } else {
            SHOW_PARTIAL_AFTER
        };
        let _ = follower.wake().recv_timeout(wait);
    }
}

/// `--wake-pipes` and `--show-output` are for a worker of one slot.
fn check_one_slot_flags(args: &WorkerArgs) -> anyhow::Result<()> {
    if args.tells_owner() && (args.slot.0.len() > 1 || args.show_output) {
        anyhow::bail!(super::usage::CliError::Usage(
            "--wake-pipes and --tell-owner are for a worker of one slot that prints nothing \
             on stdout (not with --show-output)"
                .to_string()
        ));
    }
    if args.show_output && args.slot.0.len() > 1 {
        anyhow::bail!(super::usage::CliError::Usage(
            "--show-output shows one slot's output: start the worker for one slot (or follow \
             each with `conductor logs N -f`)"
                .to_string()
        ));
    }
    Ok(())
}

/// Start a worker; on a full disk (no room for its lease, status or spares) do not exit
/// — a supervisor would only start it again and again — but say why and try again with
/// a backoff until space is freed. Meanwhile the slots' gates are held by their flocks
/// alone ([`crate::gate::hold_waiting`]): `status` shows the worker waiting for disk
/// space and a `wait` on its slot waits. `None`: asked to stop meanwhile.
fn start_when_space<W>(
    shutdown: &crossbeam_channel::Receiver<()>,
    root: &crate::Root,
    slots: &[crate::Slot],
    mut start: impl FnMut() -> crate::Result<W>,
) -> crate::Result<Option<W>> {
    let mut backoff = crate::worker::FULL_DISK_FIRST_BACKOFF;
    let mut said = false;
    let mut waiting: Vec<crate::gate::WaitingHold> = Vec::new();
    loop {
        // Let go for the attempt: it takes the gates properly.
        waiting.clear();
        match start() {
            Err(e) if e.is_no_space() => {
                waiting = slots
                    .iter()
                    .filter_map(|s| {
                        let gate = root.worker(*s).worker_gate();
                        crate::gate::hold_waiting(&gate, &format!("worker {s}"))
                    })
                    .collect();
                if !said {
                    tracing::error!(
                        "disk full: cannot start yet ({e}); pickup waits until space is freed, \
                         trying again"
                    );
                    said = true;
                }
                if shutdown.recv_timeout(backoff).is_ok() {
                    return Ok(None);
                }
                backoff = crate::worker::full_disk_backoff(backoff);
            }
            other => {
                if said && other.is_ok() {
                    tracing::info!("space was freed: starting");
                }
                return other.map(Some);
            }
        }
    }
}

/// `conductor-worker N DIR`: parse the command line, serve the slot, return the exit code.
pub fn worker_main() -> i32 {
    let cli = <WorkerCli as clap::Parser>::parse();
    cli.verbosity.init_logging();
    let served = run_worker(cli.worker);
    // What durability cost this process: one commit per claim and per result at most.
    tracing::debug!(
        "fsync-like calls (fsync, syncfs) made by this worker: {}",
        crate::fsio::sync_count()
    );
    match served {
        Ok(()) => exit::OK,
        Err(e) => report(&e),
    }
}

/// `conductor-worker`'s command line (also walked for docs/CLI.md).
#[derive(Debug, clap::Parser)]
#[command(
    name = "conductor-worker",
    version,
    about = "Serve conductor worker slots (one, or many from one process): run each task.json \
             through the agent",
    after_long_help = format!("{PRESETS_HELP}\n\n{EXIT_CODES_HELP}")
)]
pub struct WorkerCli {
    #[command(flatten)]
    pub(crate) worker: WorkerArgs,
    #[command(flatten)]
    pub(crate) verbosity: Verbosity,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{LaunchProblem, LaunchRefusal};

    /// The typed errors that replaced `Refused(String)` and `Usage(String)` keep the
    /// exit codes those had.
    #[test]
    fn typed_errors_keep_their_exit_codes() {
        let refused = [
            Error::Nested {
                action: "run".into(),
                variable: "CONDUCTOR_WORKER",
            },
            Error::SlotBusy {
                slot: 1,
                holder: "pid 4".into(),
                advice: "wait".into(),
            },
            Error::NotPublished {
                kept: "a".into(),
                dest: "b".into(),
                why: "c".into(),
            },
        ];
        for e in refused {
            assert_eq!(exit_code_for(&e.into()), exit::REFUSED);
        }
        let launch_refused: LaunchError = LaunchRefusal::Running {
            session: "s".into(),
            record: None,
            attach: "tmux attach -t s".into(),
        }
        .into();
        assert_eq!(exit_code_for(&launch_refused.into()), exit::REFUSED);
        let launch_problem: LaunchError = LaunchProblem::WorkerCount { workers: 0 }.into();
        assert_eq!(exit_code_for(&launch_problem.into()), exit::USAGE);
        let cli_usage = CliError::Usage("x".into());
        assert_eq!(exit_code_for(&cli_usage.into()), exit::USAGE);
        let usage = [
            Error::NoHome {
                variable: "CONDUCTOR_HOME",
            },
            Error::UnknownPreset { name: "x".into() },
            Error::NoTaskRecord { id: "t".into() },
            Error::NotADirectory {
                what: "project directory",
                path: "/nowhere".into(),
            },
        ];
        for e in usage {
            assert_eq!(exit_code_for(&e.into()), exit::USAGE);
        }
    }

    #[test]
    fn the_cli_names_the_flag_the_library_does_not() {
        let nested = Error::Nested {
            action: "run".into(),
            variable: "CONDUCTOR_WORKER",
        };
        assert!(hint(&nested).unwrap().contains("--allow-nested"));
        let no_home = Error::NoHome {
            variable: "CONDUCTOR_HOME",
        };
        assert!(hint(&no_home).unwrap().contains("--root"));
    }
}
