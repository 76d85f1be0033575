//! `conductor queue`: the shared queue's pending tasks in run order, and why each waits;
//! `queue cancel ID` and `queue retry ID`.

use crate::queue::{PendingTask, Queue};
use crate::text::{age_since, format_age};
use crate::Root;

use super::table::{self, Col, Table};
use super::{args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Without a subcommand: the pending tasks of the shared queue in the order they would run \
now. Columns: POS; PRI (priority; `5>7` when age has raised it); AGE (since submitted); \
PROMPT (its start); WAITING (why it does not run yet: `waiting for ID, …` — its dependencies \
(--after) that have not finished —, its key is busy, no free run slot, no idle worker; \
`ready` when the next idle worker takes it); ID; KEY. The table fits the terminal's \
width (COLUMNS when set; whole lines when stdout is not a terminal): the prompt and the \
reason are cut first, then KEY is left out; ID is kept, shortened on a terminal to the \
shortest prefix (at least 6 characters) that starts no other id, which every command takes.")]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// One JSON document: {"root", "pending": [...]} with camelCase keys.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Cancel a task: the same as `conductor cancel ID` (a pending one is withdrawn
    /// and gets a `cancelled` result; a running one is stopped by its worker).
    Cancel {
        /// The task to cancel.
        id: String,
        /// JSON Lines, as `cancel --json`: {"id", "outcome", "slot", "state"}.
        #[arg(long)]
        json: bool,
    },
    /// Run a finished task again under a new id (ID-r1, -r2 …): the same as
    /// `conductor retry ID`; prints the new id.
    Retry {
        /// The finished task to run again.
        id: String,
        /// Wait for the new task's result and print its output (exit 1 if it failed,
        /// 4 if nobody serves the queue or recovers the task; see `conductor wait`).
        #[arg(long)]
        wait: bool,
        /// JSON Lines, as `retry --json`: {"retried": OLD, "id": NEW} (and "warning");
        /// with --wait, the new task's whole result.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.action {
        None => list(&args.root, args.json),
        Some(Action::Cancel { id, json }) => cancel(&args.root, &id, json || args.json),
        Some(Action::Retry { id, wait, json }) => retry(&args.root, &id, wait, json || args.json),
    }
}

fn queue_of(root: &RootArg) -> anyhow::Result<(Root, Queue)> {
    let root = root.client()?.root().clone();
    Ok((root.clone(), Queue::new(root)))
}

fn list(root: &RootArg, json: bool) -> anyhow::Result<i32> {
    let (root, queue) = queue_of(root)?;
    let pending = queue.pending()?;
    if json {
        // Through a JSON value: its keys in the order they always had.
        emit_json(&serde_json::to_value(crate::verbs::queue::view(
            &root, &pending,
        ))?)?;
    } else {
        emit(&render(&root, &pending, table::width()))?;
    }
    Ok(exit::OK)
}

/// The task's id, or for an entry not written by `submit` (dropped in by hand) its file name.
fn shown_id(p: &PendingTask) -> String {
    match &p.id {
        Some(id) => id.to_string(),
        None => p
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// The human table, in run order, every line at most `width` characters.
pub fn render(root: &Root, pending: &[PendingTask], width: Option<usize>) -> String {
    if pending.is_empty() {
        return table::fit_line(
            &format!(
                "the queue under {} is empty (submit with `conductor submit PROMPT`)",
                root.path().display()
            ),
            width,
        ) + "\n";
    }
    let mut t = Table::new(&[
        ("POS", Col::Keep),
        ("PRI", Col::Keep),
        ("AGE", Col::Keep),
        ("PROMPT", Col::Shrink),
        ("WAITING", Col::Shrink),
        // The handle for `queue cancel` and every other command: kept (shortened).
        ("ID", Col::Keep),
        ("KEY", Col::Drop),
    ]);
    let ids: Vec<String> = pending.iter().map(shown_id).collect();
    let ids = super::target::shown_ids(root, &ids, width);
    for ((i, p), id) in pending.iter().enumerate().zip(ids) {
        let pri = if p.effective_priority != p.priority {
            format!("{}>{}", p.priority, p.effective_priority)
        } else {
            p.priority.to_string()
        };
        // The file may be claimed meanwhile: then there is nothing to preview.
        let prompt = crate::inspect::read_task_file(&p.path)
            .and_then(|f| f.prompt_preview)
            .unwrap_or_else(|| "-".to_string());
        t.row(vec![
            (i + 1).to_string(),
            pri,
            format_age(age_since(p.submitted_at)),
            prompt,
            p.waiting
                .clone()
                .unwrap_or_else(|| "ready: the next idle worker takes it".to_string()),
            id,
            p.key.clone().unwrap_or_else(|| "-".to_string()),
        ]);
    }
    let mut out = t.render(width);
    out.push_str(&format!("{} pending\n", pending.len()));
    out
}

/// `queue cancel ID`: `conductor cancel ID`, one code path.
fn cancel(root: &RootArg, id: &str, json: bool) -> anyhow::Result<i32> {
    let client = root.client()?;
    let id = super::target::id_on(client.root(), id)?;
    super::cancel::cancel_ids(&client, vec![id], json)
}

/// `queue retry ID [--wait]`: `conductor retry ID [--wait]`, one code path.
fn retry(root: &RootArg, id: &str, wait: bool, json: bool) -> anyhow::Result<i32> {
    let client = root.client()?;
    let old = super::target::id_on(client.root(), id)?;
    super::retry::retry_id(&client, old, wait, json)
}
