//! `conductor tasks`: every task on the root, newest first, wherever it is; `tasks reindex`.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::inspect::{age_since, format_age};
use crate::tasks::list::DEFAULT_LIMIT;
use crate::tasks::{reindex, ListOptions, TaskState, TaskSummary};
use crate::Slot;

use super::{emit, emit_json, parse_duration_arg, parse_slot, render_table, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Columns: ID; STATE (waiting in an inbox, queued, running, done, failed, timeout, \
cancelled, interrupted, rejected); WHERE (`slot N` for a task sent to a slot, `queue` \
while it waits in the shared queue, `queue>N` once slot N took it); KEY; PRI; AGE (since \
it was submitted); TOOK (run time, so far while it runs); TRY (attempt/maxAttempts); COST \
(when the agent reported one); PROMPT (its start). Tasks whose files gc collected are \
left out (--state gone shows them).

The index is the registry ids/<id> (where each task went), written before a task is \
delivered; `conductor tasks reindex` rebuilds missing entries from results/, tasks/, \
the inboxes and queue/ if it was lost.")]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// Only tasks in these states (comma-separated).
    #[arg(long, value_name = "STATE", value_delimiter = ',', value_parser = parse_state)]
    pub state: Vec<TaskState>,
    /// Only tasks with this key.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Only tasks sent to, running on, or run by this worker slot.
    #[arg(long, value_name = "N", value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// Only tasks submitted within this long (`90s`, `2h`, `1d`) or since this time
    /// (RFC 3339, e.g. 2026-11-22T10:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<SystemTime>,
    /// How many to show (newest first).
    #[arg(short = 'n', long = "limit", value_name = "N", default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Show every matching task.
    #[arg(long, conflicts_with = "limit")]
    pub all: bool,
    /// One JSON document: {"root", "tasks": [...]} with camelCase keys.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Rebuild missing entries of the task-id registry (ids/) from the files tasks left.
    Reindex,
}

fn parse_state(s: &str) -> Result<TaskState, String> {
    s.trim().parse()
}

fn parse_since(s: &str) -> Result<SystemTime, String> {
    if let Some(t) = crate::protocol::parse_rfc3339(s) {
        return Ok(t);
    }
    let d = parse_duration_arg(s)
        .map_err(|_| format!("{s:?} is neither a duration (90s, 2h, 1d) nor an RFC 3339 time"))?;
    Ok(SystemTime::now()
        .checked_sub(d)
        .unwrap_or(SystemTime::UNIX_EPOCH))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    if let Some(Action::Reindex) = args.action {
        let r = reindex::rebuild(client.root())?;
        if args.json {
            emit_json(&r)?;
        } else {
            let mut out = format!("{} entries added, {} already present\n", r.added, r.present);
            for c in &r.conflicts {
                out.push_str(&format!("left alone: {c}\n"));
            }
            emit(&out)?;
        }
        return Ok(if r.conflicts.is_empty() {
            exit::OK
        } else {
            exit::FAILURE
        });
    }
    let opts = ListOptions {
        states: args.state.clone(),
        key: args.key.clone(),
        slot: args.slot,
        since: args.since,
        limit: (!args.all).then_some(args.limit),
    };
    let tasks = client.list_tasks(&opts)?;
    if args.json {
        emit_json(&json!({ "root": client.root().path(), "tasks": tasks }))?;
    } else {
        emit(&render(&tasks, &opts))?;
    }
    Ok(exit::OK)
}

fn place(t: &TaskSummary) -> String {
    match (t.queued, t.slot) {
        (true, Some(n)) => format!("queue>{n}"),
        // Still queued: say what it waits for, if anything.
        (true, None) if !t.after.is_empty() && t.state == TaskState::Queued => {
            format!("queue after {}", crate::protocol::id_list(&t.after))
        }
        (true, None) => "queue".to_string(),
        (false, Some(n)) => format!("slot {n}"),
        (false, None) => "-".to_string(),
    }
}

/// The human table, newest first.
pub fn render(tasks: &[TaskSummary], opts: &ListOptions) -> String {
    if tasks.is_empty() {
        return "no tasks match\n".to_string();
    }
    let dash = || "-".to_string();
    let rows: Vec<(Vec<String>, Vec<String>)> = tasks
        .iter()
        .map(|t| {
            let cells = vec![
                t.id.to_string(),
                t.state.to_string(),
                place(t),
                t.key.clone().unwrap_or_else(dash),
                t.priority.map_or_else(dash, |p| p.to_string()),
                format_age(age_since(t.submitted)),
                t.duration_ms
                    .map_or_else(dash, |ms| format_age(Duration::from_millis(ms))),
                match (t.attempt, t.max_attempts) {
                    (None, None) => dash(),
                    (a, m) => format!("{}/{}", a.unwrap_or(1), m.unwrap_or(1)),
                },
                t.cost_usd.map_or_else(dash, |c| format!("${c:.4}")),
                t.prompt_preview.clone().unwrap_or_default(),
            ];
            (cells, Vec::new())
        })
        .collect();
    let mut out = render_table(
        &[
            "ID", "STATE", "WHERE", "KEY", "PRI", "AGE", "TOOK", "TRY", "COST", "PROMPT",
        ],
        &rows,
        Some(9),
        120,
    );
    if opts.limit == Some(tasks.len()) {
        out.push_str(&format!(
            "the newest {} shown; -n N or --all for more\n",
            tasks.len()
        ));
    }
    out
}
