//! `conductor tasks`: every task on the root, newest first, wherever it is; `tasks reindex`.

use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::tasks::list::DEFAULT_LIMIT;
use crate::tasks::{reindex, ListOptions, TaskState, TaskSummary};
use crate::text::{age_since, format_age};
use crate::Slot;

use super::table::{self, Col, Table};
use super::{args::parse_slot, args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Columns: STATE (waiting in an inbox, queued, working (`--state running` is taken too), \
needs approval (working, its agent waiting for `conductor approve|deny ID`; \
`--state needs-approval`), done, failed, timeout, \
cancelled, interrupted, rejected); AGE (since it was submitted); PROMPT (its start); ID; \
TOOK (run time, so far while it runs); COST and TURNS (when the agent reported them); WHERE (`slot N` for a task sent to a slot, `queue` \
while it waits in the shared queue, `queue>N` once slot N took it); KEY; LABELS (only when a task has labels); PRI; TRY \
(attempt/maxAttempts); AGENT (the preset that ran it, or that it names). A task held \
back by its agent's usage limit says so in STATE: `queued (rate-limited until 22:43)`. A line under the table totals the cost and turns of the tasks \
shown. The table fits the terminal's width (COLUMNS when set; whole lines when stdout \
is not a terminal): the prompt is cut first, then the rightmost columns are left out. \
Tasks whose files gc collected are left out (--state gone shows them).

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
    /// Only tasks of this group (`conductor group list`).
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Only tasks labelled L (repeat: tasks with every one of them).
    #[arg(long = "label", value_name = "L")]
    pub labels: Vec<String>,
    /// Only tasks sent to, running on, or run by this worker slot.
    #[arg(long, value_name = "N", value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// Only tasks submitted within this long (`90s`, `2h`, `1d`) or since this time
    /// (RFC 3339, e.g. 2026-11-22T10:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<SystemTime>,
    /// How many to show (newest first). `-n` still works as before, but `-n` is the
    /// number of workers elsewhere (`run`, `launch`), so `-l` is its name here.
    #[arg(short = 'l', short_alias = 'n', long = "limit", value_name = "N",
          default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Show every matching task.
    #[arg(long, conflicts_with = "limit")]
    pub all: bool,
    /// Totals instead of tasks — count, how many succeeded and failed, cost, turns and
    /// run time — per key, per group, per agent and per day (the day it finished, UTC),
    /// over every task the filters match (-n does not apply). With --json: {"root",
    /// "total", "byKey", "byGroup", "byAgent", "byDay"}.
    #[arg(long)]
    pub summary: bool,
    /// Only worktree tasks left to review: their branch unmerged or conflicting with
    /// the checked-out branch (read from git, so merges and deletions made by hand count).
    #[arg(long)]
    pub review: bool,
    /// Only worktree tasks in these review states (comma-separated): unmerged,
    /// conflicting, merged, discarded, unchanged.
    #[arg(long, value_name = "STATE", value_delimiter = ',', value_parser = super::tasks_review::parse)]
    pub review_state: Vec<crate::review::ReviewState>,
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
    crate::verbs::tasks::since(s)
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
    if let Some(slot) = args.slot {
        // A slot that does not exist is a mistake, not an empty list.
        client.root().existing_slot(slot)?;
    }
    if let Some(g) = &args.group {
        // So is a group that does not exist (one removed since keeps its tasks' records):
        // its file first, the listing only when there is none.
        let root = client.root();
        if crate::queue::groups::require(root, g).is_err()
            && client
                .list_tasks(&ListOptions {
                    group: Some(g.clone()),
                    limit: Some(1),
                    ..Default::default()
                })?
                .is_empty()
        {
            crate::queue::groups::require(root, g)?;
        }
    }
    let opts = ListOptions {
        states: args.state.clone(),
        key: args.key.clone(),
        group: args.group.clone(),
        labels: args.labels.clone(),
        slot: args.slot,
        since: args.since,
        limit: (!args.all).then_some(args.limit),
        after: None,
    };
    if args.summary {
        let all = client.list_tasks(&ListOptions {
            limit: None,
            ..opts.clone()
        })?;
        let s = summary::of_root(client.root(), &all);
        if args.json {
            let mut v = serde_json::to_value(&s)?;
            v["root"] = json!(client.root().path());
            emit_json(&v)?;
        } else {
            emit(&summary::render(&s, table::width()))?;
        }
        return Ok(exit::OK);
    }
    let tasks = super::tasks_review::list(&client, &opts, args.review, &args.review_state)?;
    if args.json {
        emit_json(&json!({ "root": client.root().path(), "tasks": tasks }))?;
    } else {
        emit(&render(client.root(), &tasks, &opts, table::width()))?;
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

/// The human table, newest first, then the totals; every line at most `width` wide.
pub fn render(
    root: &crate::Root,
    tasks: &[TaskSummary],
    opts: &ListOptions,
    width: Option<usize>,
) -> String {
    if tasks.is_empty() {
        return "no tasks match\n".to_string();
    }
    let dash = || "-".to_string();
    // A BRANCH column only when a task ran in a worktree of its own.
    let branches = tasks.iter().any(|t| t.worktree.is_some());
    let mut cols = vec![
        ("STATE", Col::Keep),
        ("AGE", Col::Keep),
        ("PROMPT", Col::Shrink),
        // The handle for every other command: kept (shortened) when others go.
        ("ID", Col::Keep),
        ("TOOK", Col::Drop),
        ("COST", Col::Drop),
        ("TURNS", Col::Drop),
        ("WHERE", Col::Drop),
        ("KEY", Col::Drop),
        ("GROUP", Col::Drop),
        ("PRI", Col::Drop),
        ("TRY", Col::Drop),
        ("AGENT", Col::Drop),
    ];
    if branches {
        cols.insert(4, ("BRANCH", Col::Drop));
    }
    // A LABELS column only when a task has labels, after KEY (dropped before it).
    let labels = tasks.iter().any(|t| !t.labels.is_empty());
    let labels_at = cols.iter().position(|(c, _)| *c == "KEY").unwrap_or(0) + 1;
    if labels {
        cols.insert(labels_at, ("LABELS", Col::Drop));
    }
    let mut t = Table::new(&cols);
    let ids: Vec<String> = tasks.iter().map(|t| t.id.to_string()).collect();
    let shown = super::target::shown_ids(root, &ids, width);
    for (task, id) in tasks.iter().zip(shown) {
        let mut row = vec![
            state_cell(task),
            format_age(age_since(task.submitted)),
            task.prompt_preview.clone().unwrap_or_else(dash),
            id,
            task.duration_ms
                .map_or_else(dash, |ms| format_age(Duration::from_millis(ms))),
            super::status::cost(task.cost_usd),
            task.num_turns.map_or_else(dash, |n| n.to_string()),
            place(task),
            task.key.clone().unwrap_or_else(dash),
            task.group.clone().unwrap_or_else(dash),
            task.priority.map_or_else(dash, |p| p.to_string()),
            try_cell(task),
            task.agent.clone().unwrap_or_else(dash),
        ];
        if branches {
            let branch = task.worktree.as_ref().map_or_else(dash, branch_cell);
            row.insert(4, super::tasks_review::cell(task, branch));
        }
        if labels {
            row.insert(labels_at, labels_cell(task));
        }
        t.row(row);
    }
    let mut out = t.render(width);
    out.push_str(&table::fit_line(&totals(tasks), width));
    out.push('\n');
    if opts.limit == Some(tasks.len()) {
        out.push_str(&table::fit_line(
            &format!("the newest {} shown; -l N or --all for more", tasks.len()),
            width,
        ));
        out.push('\n');
    }
    out
}

/// The STATE cell: the state, and why it waits or how many tool calls were refused.
fn state_cell(task: &TaskSummary) -> String {
    match (&task.waiting, task.denials.len()) {
        (Some(why), _) => format!("{} ({why})", task.state),
        // Its agent was refused tool calls: `conductor result ID` lists them.
        (None, 0) => task.state.to_string(),
        (None, n) => format!("{} ({n} refused)", task.state),
    }
}

/// The TRY cell: `attempt/max`, `-` for a task that never retries.
fn try_cell(task: &TaskSummary) -> String {
    match (task.attempt, task.max_attempts) {
        (None, None) => "-".to_string(),
        (a, m) => format!("{}/{}", a.unwrap_or(1), m.unwrap_or(1)),
    }
}

/// The LABELS cell: comma-separated, `-` for none.
fn labels_cell(task: &TaskSummary) -> String {
    if task.labels.is_empty() {
        "-".to_string()
    } else {
        task.labels.join(",")
    }
}

/// `conductor/t1 +12 -3 in 2 files`; `(removed)` after the branch when it was not kept.
pub fn branch_cell(w: &crate::protocol::WorktreeChange) -> String {
    if w.kept {
        format!("{} {}", w.branch, w.diffstat())
    } else {
        format!("{} (no change, removed)", w.branch)
    }
}

/// `12 tasks: 9 done, 2 failed, 1 running · cost $0.1234 · 31 turns`.
fn totals(tasks: &[TaskSummary]) -> String {
    let mut by_state: Vec<(TaskState, usize)> = Vec::new();
    for t in tasks {
        match by_state.iter_mut().find(|(s, _)| *s == t.state) {
            Some((_, n)) => *n += 1,
            None => by_state.push((t.state, 1)),
        }
    }
    let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let noun = if tasks.len() == 1 { "task" } else { "tasks" };
    let mut line = format!("{} {noun}: {}", tasks.len(), states.join(", "));
    let costs: Vec<f64> = tasks.iter().filter_map(|t| t.cost_usd).collect();
    if !costs.is_empty() {
        line.push_str(&format!(" · cost ${:.4}", costs.iter().sum::<f64>()));
    }
    let turns: Vec<u64> = tasks.iter().filter_map(|t| t.num_turns).collect();
    if !turns.is_empty() {
        line.push_str(&format!(" · {} turns", turns.iter().sum::<u64>()));
    }
    line
}

/// `tasks --summary`: totals by key, agent and day.
pub mod summary {
    use super::super::table::{fit_line, Col, Table};
    pub use crate::verbs::totals::{of_root, BudgetUse, Summary, Totals};

    /// `today: root $0.0375 of $0.0100 (spent: no new task starts) · group g $0.0100`.
    fn budget_line(budgets: &[BudgetUse]) -> Option<String> {
        let shown: Vec<String> = budgets
            .iter()
            .filter(|b| b.daily_budget_usd.is_some() || b.spent_today_usd > 0.0)
            .map(|b| {
                let spent = crate::budget::usd(b.spent_today_usd);
                match b.daily_budget_usd {
                    Some(max) if b.spent_today_usd >= max => format!(
                        "{} {spent} of {} (spent: no new task starts)",
                        b.name,
                        crate::budget::usd(max)
                    ),
                    Some(max) => format!("{} {spent} of {}", b.name, crate::budget::usd(max)),
                    None => format!("{} {spent}", b.name),
                }
            })
            .collect();
        (!shown.is_empty()).then(|| format!("spent today: {}", shown.join(" · ")))
    }

    pub fn render(s: &Summary, width: Option<usize>) -> String {
        let mut out = String::new();
        // Per group only on a root that uses groups.
        let grouped = s.by_group.iter().any(|g| g.name != "-");
        for (title, rows) in [
            ("KEY", &s.by_key),
            ("GROUP", &s.by_group),
            ("AGENT", &s.by_agent),
            ("DAY", &s.by_day),
        ] {
            if title == "GROUP" && !grouped {
                continue;
            }
            let mut t = Table::new(&[
                (title, Col::Shrink),
                ("TASKS", Col::Keep),
                ("DONE", Col::Keep),
                ("FAILED", Col::Keep),
                ("OPEN", Col::Drop),
                ("COST", Col::Keep),
                ("TURNS", Col::Drop),
                ("RUN TIME", Col::Drop),
            ]);
            for r in rows.iter() {
                t.row(cells(r));
            }
            out.push_str(&t.render(width));
            out.push('\n');
        }
        let total = &s.total;
        out.push_str(&fit_line(
            &format!(
                "{} tasks: {} done, {} failed, {} unfinished · cost ${:.4} · {} turns",
                total.tasks,
                total.done,
                total.failed,
                total.unfinished,
                total.cost_usd,
                total.turns
            ),
            width,
        ));
        out.push('\n');
        if let Some(line) = budget_line(&s.budgets) {
            out.push_str(&fit_line(&line, width));
            out.push('\n');
        }
        out
    }

    fn cells(r: &Totals) -> Vec<String> {
        vec![
            r.name.clone(),
            r.tasks.to_string(),
            r.done.to_string(),
            r.failed.to_string(),
            r.unfinished.to_string(),
            format!("${:.4}", r.cost_usd),
            r.turns.to_string(),
            crate::text::format_took(r.run_ms),
        ]
    }
}
