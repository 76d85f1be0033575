//! `conductor run`: the one-shot main job — N fresh workers, prompts fanned out,
//! results printed, workers stopped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::cli::usage::CliError;
use crate::orchestrator::{Orchestrator, Progress};
use crate::pool::{self, WorkerCommand, WorkerPool};
use crate::preset::Preset;
use crate::verbs::chain::chained_prompt;
use crate::{Client, Root, Slot, Task, TaskResult};
use anyhow::Context as _;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::help;
use super::run_view::{self, Display};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
With --chain the prompts run one after another on one worker, as a pipeline: each step's \
prompt is followed by a blank line, the line `Output of the previous step:` and that \
step's output. A failed step stops the chain; the steps after it are reported `cancelled` \
(not run).

Exit codes: 0 every task succeeded, 1 a task failed, 2 usage, 3 refused, 130 interrupted")]
pub struct Args {
    /// Prompts, one task each (or use -f).
    #[arg(required_unless_present = "file")]
    pub prompts: Vec<String>,
    /// How many workers [default: 3, at most one per prompt].
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: Option<u32>,
    /// Read prompts from FILE (`-` for stdin), one a line.
    ///
    /// One per line, or blank-line separated blocks with --blocks.
    #[arg(short, long, value_name = "FILE", conflicts_with = "prompts")]
    pub file: Option<PathBuf>,
    /// In the prompts file, prompts are blocks separated by blank lines (multi-line prompts).
    #[arg(long, requires = "file", hide_short_help = true)]
    pub blocks: bool,
    /// A pipeline: each prompt gets the previous output.
    ///
    /// Run the prompts one after another on one worker, each receiving the previous
    /// one's output (see below).
    #[arg(long, conflicts_with = "workers")]
    pub chain: bool,
    /// Print one JSON document with every result.
    ///
    /// Instead of text. Its `root` is there only when the root outlives the run (--root
    /// or --keep).
    #[arg(long)]
    pub json: bool,
    /// Agent kind: claude, codex, gemini or command.
    #[arg(long, value_name = "PRESET", value_parser = super::args::parse_preset,
          help_heading = help::AGENT)]
    pub preset: Option<Preset>,
    /// Agent command line (prompt on stdin).
    ///
    /// [default: the preset's, else `claude -p`]
    #[arg(long, value_name = "CMD", help_heading = help::AGENT)]
    pub agent: Option<String>,
    /// Claude preset: the tools the agents may use without asking (see `worker --help`).
    #[arg(long, value_name = "TOOLS", conflicts_with = "agent", help_heading = help::AGENT,
          hide_short_help = true)]
    pub allowed_tools: Option<String>,
    /// Claude preset: Claude Code's permission mode (see `worker --help`).
    #[arg(long, value_name = "MODE", conflicts_with = "agent", help_heading = help::AGENT,
          hide_short_help = true)]
    pub permission_mode: Option<String>,
    /// Project directory the agents run in.
    #[arg(long, value_name = "DIR", default_value = ".", help_heading = help::AGENT)]
    pub dir: PathBuf,
    /// What every task carries: its time limit, model, worktree, `--env` and `--label`.
    #[command(flatten)]
    pub options: crate::verbs::spec::TaskOptions,
    /// Run on this root (kept afterwards) instead of a private temporary one.
    #[arg(long, value_name = "DIR", help_heading = help::GLOBAL, hide_short_help = true)]
    pub root: Option<PathBuf>,
    /// Keep the private root (its results, task records and logs) and say where it is.
    #[arg(long, conflicts_with = "root", hide_short_help = true)]
    pub keep: bool,
    /// Run even inside a conductor agent (CONDUCTOR_WORKER is set).
    #[arg(long, help_heading = help::GLOBAL, hide_short_help = true)]
    pub allow_nested: bool,
}

/// Split a prompts file: non-empty lines, or blank-line separated blocks.
pub fn split_prompts(text: &str, blocks: bool) -> Vec<String> {
    if !blocks {
        return text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty())
            .map(String::from)
            .collect();
    }
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                out.push(cur.join("\n"));
                cur.clear();
            }
        } else {
            cur.push(line.trim_end());
        }
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    crate::env::refuse_nested("run", args.allow_nested)?;
    let prompts = read_prompts(&args)?;
    super::common::check_agent(
        args.agent.as_deref(),
        args.preset,
        args.allowed_tools.as_deref(),
        args.permission_mode.as_deref(),
    )?;
    // What every task carries, checked before any worker starts.
    let mut sample = Task::new("");
    args.options.apply(&mut sample);
    sample
        .validate()
        .map_err(|reason| crate::Error::InvalidTask { reason })?;
    let dir = args
        .dir
        .canonicalize()
        .map_err(|e| CliError::Usage(format!("--dir {}: {e}", args.dir.display())))?;
    if args.options.worktree == Some(true) {
        crate::worktree::Repo::of(&dir)?;
    }
    // The private root (None with --root or --keep) lives until the run ends.
    let (root, _private_root) = run_root(&args)?;
    // The run holds its tasks until their results come and ends with the machine: a
    // task's bytes become durable with its worker's claim (docs/ARCHITECTURE.md,
    // "What a machine crash can lose").
    let client = Client::new(root.clone()).with_delivery(crate::fsio::Durability::Atomic);

    let count = worker_count(&args, prompts.len());
    let slots: Vec<Slot> = (0..count).map(Slot).collect();
    let (mut workers, pipes) = start_workers(&args, &root, &slots, &dir, Owner::of(&args))?;

    let tasks = tasks_of(&args, &prompts);
    let started = Instant::now();
    let mut display = Display::new(&slots, &prompts, args.json, &root);
    let (stop, interrupted) = stop_on_interrupt(workers.pids(), display.live())?;
    let mut orchestrator = Orchestrator::new(client.clone(), slots.clone()).with_stop(stop);
    if let Some(pipes) = pipes {
        // Workers that defer a usage-limited task put it back into their inbox: it
        // must be free then (and their agents' tasks are long enough for the run's
        // round trip between two of them not to matter).
        let may_defer = matches!(
            args.preset,
            Some(Preset::Claude | Preset::Codex | Preset::Gemini)
        );
        orchestrator = orchestrator
            .with_wake_pipes(pipes)
            .keep_inboxes_filled(!may_defer);
    }
    let results = if args.chain {
        run_chain(&orchestrator, tasks, |p| display.progress(p))
    } else {
        orchestrator.run_all(tasks, |p| display.progress(p))
    };
    display.finish();
    workers.stop(pool::DEFAULT_STOP_GRACE);
    let results = results?;

    let failed = results.iter().filter(|r| !r.success).count();
    let took = started.elapsed().as_millis() as u64;
    let kept = (args.root.is_some() || args.keep).then_some(&root);
    print_run(&args, kept, &prompts, &results, took)?;
    Ok(if interrupted.load(Ordering::SeqCst) {
        exit::INTERRUPTED
    } else if failed > 0 {
        exit::FAILURE
    } else {
        exit::OK
    })
}

/// The run's root: `--root`, or a private one in a temporary directory, returned too so
/// it is deleted when the run drops it (not with `--keep`); its queue is made.
fn run_root(args: &Args) -> anyhow::Result<(Root, Option<tempfile::TempDir>)> {
    let mut private_root = None;
    let root = match &args.root {
        Some(r) => Root::new(r),
        None => {
            let t = tempfile::Builder::new()
                .prefix("conductor-run-")
                .tempdir()
                .context("creating a private root")?;
            let root = Root::new(t.path());
            if args.keep {
                let _ = t.keep();
            } else {
                private_root = Some(t);
            }
            root
        }
    };
    Client::new(root.clone()).init_queue()?;
    if args.root.is_none() {
        // The private root is deleted afterwards, or kept whole by one sync at the
        // end (--keep): fsyncs on the way would only make the run wait for the disk
        // (200 tasks on ext4: ~1,000 of them).
        // Nobody knows the private root to answer an agent's question there: a call its
        // workers do not allow is refused at once, not after approvalTimeoutSecs.
        let config = crate::Config {
            fsync: Some(false),
            approvals: Some(false),
            ..Default::default()
        };
        crate::fsio::write_json(
            &root.config_file(),
            &config,
            crate::fsio::Durability::Atomic,
        )?;
        crate::fsio::set_fsync(false);
    }
    Ok((root, private_root))
}

/// One task a prompt, each carrying the run's timeout, worktree, model and env labels.
fn tasks_of(args: &Args, prompts: &[String]) -> Vec<Task> {
    prompts
        .iter()
        .map(|p| {
            let mut t = Task::new(p.clone());
            args.options.apply(&mut t);
            t
        })
        .collect()
}

/// Run `tasks` as a pipeline; the steps after a failed one come back `cancelled`.
fn run_chain(
    orchestrator: &Orchestrator,
    tasks: Vec<Task>,
    on_progress: impl FnMut(Progress<'_>),
) -> crate::Result<Vec<TaskResult>> {
    let total = tasks.len();
    let stages: Vec<_> = tasks
        .into_iter()
        .map(|t| {
            move |prev: Option<&TaskResult>| {
                let mut t = t;
                t.prompt = chained_prompt(&t.prompt, prev);
                t
            }
        })
        .collect();
    let mut results = orchestrator.run_pipeline(stages, on_progress)?;
    if let Some(failed) = results.last().filter(|r| !r.success).cloned() {
        let step = results.len();
        for _ in results.len()..total {
            results.push(TaskResult::failed(
                crate::TaskId::generate(),
                crate::Outcome::Cancelled,
                format!(
                    "not run: step {step} (task {}) of the chain failed",
                    failed.task_id
                ),
            ));
        }
    }
    Ok(results)
}

/// The workers a run starts when `-n` does not say.
const DEFAULT_WORKERS: u32 = 3;

/// How many workers the run starts: one for a chain, which runs one step at a time;
/// `-n` as given (an agent may hand work to the run's queue for the others); else
/// three, but no more than there are prompts (one prompt on three workers left two
/// idle).
fn worker_count(args: &Args, prompts: usize) -> u32 {
    if args.chain {
        return 1;
    }
    args.workers.unwrap_or_else(|| {
        DEFAULT_WORKERS
            .min(u32::try_from(prompts).unwrap_or(u32::MAX))
            .max(1)
    })
}

/// The prompts to run: the arguments, or the prompts file's lines or blocks.
fn read_prompts(args: &Args) -> anyhow::Result<Vec<String>> {
    let prompts = match &args.file {
        None => args.prompts.clone(),
        Some(f) => {
            let text = super::send::read_prompt(None, Some(f))?;
            split_prompts(&text, args.blocks)
        }
    };
    if prompts.is_empty() {
        anyhow::bail!(CliError::Usage("no prompts to run".into()));
    }
    Ok(prompts)
}

/// On Ctrl-C / SIGTERM, take the live display off the screen, stop the workers `pids`
/// (each writes `interrupted` for its task) and deliver nothing more; the results still
/// come back and are printed. Returns the orchestrator's stop channel and whether an
/// interrupt came.
fn stop_on_interrupt(
    pids: Vec<u32>,
    live: Option<run_view::Live>,
) -> anyhow::Result<(crossbeam_channel::Receiver<()>, Arc<AtomicBool>)> {
    let (interrupt_tx, interrupt) = crossbeam_channel::bounded::<()>(1);
    ctrlc::set_handler(move || {
        let _ = interrupt_tx.try_send(());
    })
    .context("installing the signal handler")?;
    let (stop_tx, stop) = crossbeam_channel::bounded::<()>(1);
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    std::thread::spawn(move || {
        if interrupt.recv().is_ok() {
            flag.store(true, Ordering::SeqCst);
            if let Some(live) = &live {
                run_view::hide(live);
            }
            let _ = stop_tx.send(());
            for pid in pids {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
            }
        }
    });
    Ok((stop, interrupted))
}

/// The results (one JSON document with `--json`), and a summary line on stderr.
/// `kept`: the root, when it outlives the run (else it is gone and not named).
fn print_run(
    args: &Args,
    kept: Option<&Root>,
    prompts: &[String],
    results: &[TaskResult],
    took_ms: u64,
) -> anyhow::Result<()> {
    let failed = results.iter().filter(|r| !r.success).count();
    let workers = worker_count(args, prompts.len());
    if args.json {
        let mut doc = serde_json::json!({
            "results": results,
            "succeeded": results.len() - failed,
            "failed": failed,
            "workers": workers,
            "durationMs": took_ms,
        });
        if let Some(root) = kept {
            doc["root"] = serde_json::json!(root.path());
        }
        let cost: Vec<f64> = results.iter().filter_map(|r| r.cost_usd).collect();
        if !cost.is_empty() {
            doc["costUsd"] = serde_json::json!(cost.iter().sum::<f64>());
        }
        let turns: Vec<u64> = results.iter().filter_map(|r| r.num_turns).collect();
        if !turns.is_empty() {
            doc["numTurns"] = serde_json::json!(turns.iter().sum::<u64>());
        }
        if let Some(branches) = super::worktrees_repo::branches_json(results) {
            doc["branches"] = branches;
        }
        return super::output::emit_json(&doc);
    }
    super::output::emit(&run_view::render_results(
        prompts,
        results,
        super::table::width(),
    ))?;
    let summary = format!(
        "{} · {} · {workers} worker(s)",
        run_view::totals(results),
        crate::text::format_took(took_ms),
    );
    eprintln!(
        "{}",
        super::table::fit_line(&summary, super::table::stderr_width())
    );
    // The branches outlive a private root: `diff`/`merge`/`discard` find them in the
    // repository.
    for line in super::worktrees_repo::next_steps(results) {
        eprintln!("{line}");
    }
    if let Some(root) = kept.filter(|_| args.keep) {
        // What the run wrote without fsyncs becomes durable at once.
        let synced = std::fs::File::open(root.path())
            .and_then(|d| nix::unistd::syncfs(&d).map_err(std::io::Error::from));
        if let Err(e) = synced {
            tracing::warn!("syncing the kept root {}: {e}", root.path().display());
        }
        eprintln!("kept the root: {}", root.path().display());
    }
    Ok(())
}

/// How the run's workers learn of its tasks and tell it of theirs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// By file events; they tell nothing (a chain, fed by `run_pipeline`).
    Logged,
    /// Woken through pipes of ours rather than by file events (a root only this run
    /// uses); they tell us by pipe when a task starts and ends.
    Woken,
    /// By file events (a root others may use too); they tell us by pipe.
    Told,
}

impl Owner {
    /// A private root is ours alone, and `run_all` wakes its workers after each delivery:
    /// they need no file events (no inotify instance, no ~20 ms of its teardown at their
    /// exit, no event per file operation). On a root given (`--root R`), which others may
    /// use too, the workers watch their files but tell the run by pipe when they start a
    /// task: its next one then waits in the inbox, taken the moment the first ends (issue
    /// 39). A chain is fed by `run_pipeline`, which does neither.
    fn of(args: &Args) -> Owner {
        match (
            args.chain || !cfg!(target_os = "linux"),
            args.root.is_none(),
        ) {
            (true, _) => Owner::Logged,
            (false, true) => Owner::Woken,
            (false, false) => Owner::Told,
        }
    }
}

/// Start one `conductor worker` per slot (one for all of them from
/// [`pool::MANY_SLOT_FROM`] slots on) and wait until each slot is served; with the pipes
/// they tell on (not for [`Owner::Logged`] nor a many-slot worker).
fn start_workers(
    args: &Args,
    root: &Root,
    slots: &[Slot],
    dir: &Path,
    owner: Owner,
) -> anyhow::Result<(WorkerPool, Option<pool::WakePipes>)> {
    let mut extra: Vec<OsString> = Vec::new();
    if let Some(a) = &args.agent {
        extra.extend(["--agent".into(), a.into()]);
    }
    if let Some(p) = args.preset {
        extra.extend(["--preset".into(), p.to_string().into()]);
    }
    if let Some(tools) = &args.allowed_tools {
        extra.extend(["--allowed-tools".into(), tools.into()]);
    }
    if let Some(mode) = &args.permission_mode {
        extra.extend(["--permission-mode".into(), mode.into()]);
    }
    if let Some(t) = args.options.timeout_secs {
        extra.extend(["--timeout".into(), t.to_string().into()]);
    }
    if args.allow_nested {
        extra.push("--allow-nested".into());
    }
    let cmd = WorkerCommand {
        program: std::env::current_exe().context("finding the conductor executable")?,
        leading_args: vec!["worker".into()],
        dir: dir.to_path_buf(),
        extra_args: extra,
    };
    let (mut pool, pipes) = if slots.len() >= pool::MANY_SLOT_FROM {
        (WorkerPool::spawn_many(root, slots, &cmd)?, None)
    } else {
        match owner {
            Owner::Woken => {
                WorkerPool::spawn_woken(root, slots, &cmd).map(|(w, p)| (w, Some(p)))?
            }
            Owner::Told => WorkerPool::spawn_told(root, slots, &cmd).map(|(w, p)| (w, Some(p)))?,
            Owner::Logged => (WorkerPool::spawn(root, slots, &cmd)?, None),
        }
    };
    pool.wait_ready(pool::DEFAULT_READY_TIMEOUT)?;
    Ok((pool, pipes))
}
