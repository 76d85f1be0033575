//! The command-line front end of all three binaries: clap parsing, exit codes, output.
//!
//! Built only with the `cli` feature (on by default). The binaries under `bin/` are thin
//! `main`s that call [`conductor_main`], [`worker_main`](common::worker_main) or [`launch_main`](launch::launch_main); each
//! subcommand is a module here with an `Args` (clap) and a `run`.

pub mod approval_mcp;
pub mod approve;
pub mod args;
mod attempts;
mod batch;
pub mod cancel;
pub mod common;
pub mod completions;
pub mod dashboard;
pub mod doctor;
pub mod edit;
pub mod gc;
pub mod group;
pub mod help;
pub mod init;
pub mod launch;
mod light_start;
pub mod locks;
pub mod logs;
mod logs_follow;
pub mod mcp;
mod output;
mod parallel;
pub mod pause;
pub mod queue;
pub mod recover;
pub mod reference;
pub mod result;
pub mod retry;
pub mod run;
mod run_view;
pub mod send;
mod state_words;
pub mod status;
pub mod submit;
pub mod table;
pub mod target;
pub mod tasks;
pub mod tasks_review;
mod top_help;
pub mod usage;
pub mod wait;
pub mod waiting;
pub mod worker_args;
mod worker_defaults;
pub mod worktrees;
mod worktrees_merge;
pub(crate) mod worktrees_repo;

use clap::{CommandFactory, Parser, Subcommand};

use output::emit;

#[derive(Debug, Parser)]
#[command(
    name = "conductor",
    version,
    about = "Run AI coding-agent sessions as workers fed through plain files",
    after_long_help = common::EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    verbosity: common::Verbosity,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run prompts on N fresh workers and print the results (the one-shot main job).
    Run(run::Args),
    /// Deliver a task to one worker's inbox; fails (exit 3) if the inbox is busy.
    Send(send::Args),
    /// Put a task into the shared queue; any idle worker runs it.
    Submit(submit::Args),
    /// List the shared queue's pending tasks in run order (and why each waits);
    /// `queue cancel ID`, `queue retry ID`.
    Queue(queue::Args),
    /// Full-screen live view: workers, the selected task's output, the queue, totals.
    #[command(visible_alias = "top")]
    Dashboard(dashboard::Args),
    /// Show every slot: state, task, ages, agent pid, lock holder, stale flags.
    Status(status::Args),
    /// List tasks, newest first: state, where, key, age, run time, cost, prompt.
    Tasks(tasks::Args),
    /// Print a task's result (by id; or a slot's newest).
    Result(result::Args),
    /// Print a task's output (by id; or a slot's live output.log); -f follows it.
    Logs(logs::Args),
    /// Wait until tasks finish (by id; or a slot's current task).
    Wait(wait::Args),
    /// Cancel a task: withdrawn if it waits, stopped if it runs.
    Cancel(cancel::Args),
    /// Let the tool call a task's agent asks about run (the task `needs approval`).
    Approve(approve::ApproveArgs),
    /// Refuse the tool call a task's agent asks about; --reason is what it is told.
    Deny(approve::DenyArgs),
    /// The permission tool a worker gives its claude agent (MCP on stdio; internal).
    #[command(hide = true)]
    ApprovalMcp(approval_mcp::Args),
    /// Stop new pickups of a slot, key, group or everything (--now: running ones too).
    Pause(pause::Args),
    /// Let a paused slot, key, group or everything start tasks again.
    Resume(pause::ResumeArgs),
    /// Groups with their own parallelism: `group add NAME --parallel N`, set, list, rm.
    Group(group::Args),
    /// How many agents may run at once on the whole root: show it, or set it (N, --off).
    Parallel(parallel::Args),
    /// Change a task that still waits in the queue: its prompt (in $EDITOR), priority,
    /// key, dependencies, env or labels.
    Edit(edit::Args),
    /// Run a finished task again under a new id.
    Retry(retry::Args),
    /// List locks and their holders; `locks clean --apply` removes stale ones.
    Locks(locks::Args),
    /// Remove old results, task records, rejected files and temp files.
    Gc(gc::Args),
    /// Check the root, the filesystem, inotify limits, tmux and the agent command.
    Doctor(doctor::Args),
    /// Set up the root and N worker slots, numbered 0..N-1.
    Init(init::Args),
    /// Create one worker slot.
    CreateWorker(init::CreateArgs),
    /// Serve one worker slot (same as `conductor-worker`).
    Worker(common::WorkerArgs),
    /// Finish what dead workers left behind (stale locks, interrupted tasks).
    Recover(recover::Args),
    /// Print shell completions.
    Completions(completions::Args),
    /// Serve the Model Context Protocol on stdio: tools for an orchestrating agent
    /// (`claude mcp add conductor -- conductor mcp`).
    Mcp(mcp::Args),
    /// Lay out an orchestrator pane and N worker panes in tmux (same as conductor-launch)
    Launch(launch::Args),
    /// Show the change a --worktree task made (git diff BASE...BRANCH).
    Diff(worktrees::DiffArgs),
    /// Merge a --worktree task's branch into the checked-out branch (or --all of them).
    Merge(worktrees::MergeArgs),
    /// Remove a --worktree task's worktree and branch.
    Discard(worktrees::DiscardArgs),
    /// Print docs/CLI.md, the reference of every command, from these definitions.
    #[command(hide = true)]
    HelpReference,
}

/// `conductor …`: parse the command line, run the subcommand, return the exit code.
pub fn conductor_main() -> i32 {
    use clap::{CommandFactory, FromArgMatches};
    let args = root_after_subcommand(std::env::args_os().collect());
    if let Some((submit, verbosity)) = light_start::submit_args(&args) {
        verbosity.init_logging();
        return match dispatch(Command::Submit(submit)) {
            Ok(code) => code,
            Err(e) => common::report(&e),
        };
    }
    let matches = top_help::grouped(Cli::command()).get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.verbosity.init_logging();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => common::report(&e),
    }
}

/// `conductor --root DIR wait …` as `conductor wait --root DIR …`: `--root` is taken
/// before the subcommand as after it (it is each subcommand's option).
fn root_after_subcommand(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut head = Vec::new();
    let mut root = Vec::new();
    let mut rest = args.into_iter();
    if let Some(program) = rest.next() {
        head.push(program);
    }
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        if text == "--root" {
            root.push(arg);
            root.extend(rest.next());
        } else if text.starts_with("--root=") {
            root.push(arg);
        } else if text.starts_with('-') && text != "--" {
            head.push(arg);
        } else {
            // The subcommand: `--root` goes right after it.
            head.push(arg);
            head.extend(root);
            head.extend(rest);
            return head;
        }
    }
    head.extend(root);
    head
}

fn dispatch(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Run(a) => run::run(a),
        Command::Send(a) => send::run(a),
        Command::Submit(a) if a.batch => batch::run(&a),
        Command::Submit(a) if a.attempts.is_some() => attempts::run(&a),
        Command::Submit(a) => submit::run(a),
        Command::Queue(a) => queue::run(a),
        Command::Dashboard(a) => dashboard::run(a),
        Command::Status(a) => status::run(a),
        Command::Tasks(a) => tasks::run(a),
        Command::Result(a) => result::run(a),
        Command::Logs(a) => logs::run(a),
        Command::Wait(a) => wait::run(a),
        Command::Cancel(a) => cancel::run(a),
        Command::Approve(a) => approve::run_approve(a),
        Command::Deny(a) => approve::run_deny(a),
        Command::ApprovalMcp(a) => approval_mcp::run(a),
        Command::Pause(a) => pause::run(a),
        Command::Resume(a) => pause::run_resume(a),
        Command::Group(a) => group::run(a),
        Command::Parallel(a) => parallel::run(a),
        Command::Edit(a) => edit::run(a),
        Command::Retry(a) => retry::run(a),
        Command::Locks(a) => locks::run(a),
        Command::Gc(a) => gc::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Init(a) => init::run(a),
        Command::CreateWorker(a) => init::run_create(a),
        Command::Worker(a) => common::run_worker(a).map(|()| common::exit::OK),
        Command::Recover(a) => recover::run(a),
        Command::Completions(a) => completions::run(a, Cli::command()),
        Command::Launch(a) => launch::run(a),
        Command::Mcp(a) => mcp::run(a),
        Command::Diff(a) => worktrees::run_diff(a),
        Command::Merge(a) => worktrees::run_merge(a),
        Command::Discard(a) => worktrees::run_discard(a),
        Command::HelpReference => {
            emit(&reference::markdown(Cli::command())).map(|()| common::exit::OK)
        }
    }
}
