//! `conductor status [N] [--watch] [--json]`: every slot at a glance.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::inspect::{Flag, SlotReport, TaskFile};
use crate::queue::Capacity;
use crate::text::format_age;
use crate::watch::{DirWatcher, Interest, WatchMode};
use crate::{Root, Slot};
use crossbeam_channel::select;

use super::table::{self, fit_line, Col, Table};
use super::{args::parse_slot, args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Columns: SLOT; STATE (idle/working/done/error, - without status.json; `needs approval` while its agent \
asks a person to allow a tool call: `conductor approve|deny ID`); AGE (time in \
this state; while working, since the task started); PROMPT (the start of its task's prompt); ID; \
COST and TURNS (what the agent reported, once it finished; claude preset); BEAT (since the last heartbeat, while \
working); AGENT (the preset that runs or ran the task, and while it runs the agent's pid); \
WORKER (pid, and whether a live worker holds the slot's gate); LOCK (holder of .lock/); \
SERVES (the presets the slot's worker runs, its default first). Flags under a row: dead worker, stale lock, orphaned task, inbox \
waiting; what to do about them follows the table. Under it, the shared queue's capacity: \
running agents against maxRunning, pending tasks by priority, and each key's running and \
waiting tasks.

The table fits the terminal's width (COLUMNS when set; whole lines when stdout is not a \
terminal): the prompt is cut first, then the rightmost columns are left out.")]
pub struct Args {
    /// Only this slot.
    #[arg(value_parser = parse_slot)]
    pub slot: Option<Slot>,
    /// Redraw whenever a slot changes (and every second, for the ages) until Ctrl-C.
    #[arg(short, long, conflicts_with = "json")]
    pub watch: bool,
    /// One JSON document with camelCase keys: {"root", "workers": [...one per slot],
    /// "slots": {max, used, available}, "byKey", "pending": {byPriority, total}, "locks"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let root = client.root().clone();
    if args.watch {
        return watch(&client, args.slot);
    }
    let request = crate::verbs::status::StatusRequest {
        slot: args.slot,
        review: args.json,
    };
    let answer = crate::verbs::status::status(&client, &request)?;
    if args.json {
        emit_json(&answer.to_json())?;
    } else {
        emit(&render(
            &root,
            &answer.workers,
            &answer.capacity,
            table::width(),
        ))?;
    }
    Ok(exit::OK)
}

/// What to do about `flag` on slot `slot`.
fn fix(flag: Flag, slot: Slot) -> String {
    match flag {
        Flag::DeadWorker | Flag::OrphanedTask => format!(
            "start `conductor-worker {slot} DIR` again (it recovers the slot) or run `conductor recover {slot}`"
        ),
        Flag::StaleLock => {
            format!("`conductor recover {slot}` or `conductor locks clean --apply` removes it")
        }
        Flag::InboxWaiting => format!(
            "a worker picks it up; if none serves slot {slot}, start `conductor-worker {slot} DIR`"
        ),
    }
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

fn with_id(what: &str, f: &Option<TaskFile>) -> String {
    match f.as_ref().and_then(|f| f.task_id.as_ref()) {
        Some(id) => format!("{what} ({id})"),
        None => what.to_string(),
    }
}

/// Where the ID is in a row of the table.
const ID_CELL: usize = 4;
/// The STATE column's place in a slot row.
const STATE_CELL: usize = 1;

/// The human table: one row per slot, flags under it, then what to do about them,
/// then totals and the capacity footer; every line at most `width` characters.
pub fn render(
    root: &Root,
    reports: &[SlotReport],
    capacity: &crate::Result<Capacity>,
    width: Option<usize>,
) -> String {
    if reports.is_empty() {
        return render_no_slots(root, capacity, width);
    }
    let mut table = slot_table();
    let mut advice = Vec::new();
    let ids: Vec<String> = reports
        .iter()
        .map(|r| {
            r.task_id
                .as_ref()
                .map_or_else(String::new, |t| t.to_string())
        })
        .collect();
    let shown = super::target::shown_ids(root, &ids, width);
    let paused = crate::queue::pause::Paused::load(root);
    for (r, short) in reports.iter().zip(shown) {
        let (mut cells, notes, fixes) = slot_row(r);
        if !short.is_empty() {
            cells[ID_CELL] = short;
        }
        if paused.slot(r.slot) {
            // It takes no new task until resumed (what it runs goes on).
            cells[STATE_CELL] = match r.state {
                Some(crate::WorkerState::Working) => format!("{}, paused", cells[STATE_CELL]),
                _ => "paused".to_string(),
            };
        }
        table.row(cells);
        for n in notes {
            table.note(n);
        }
        advice.extend(
            fixes
                .into_iter()
                .map(|fix| format!("worker {}: {fix}", r.slot)),
        );
    }
    let mut out = table.render(width);
    if !advice.is_empty() {
        out.push('\n');
        for a in advice {
            out.push_str(&fit_line(&a, width));
            out.push('\n');
        }
    }
    if let Some(line) = totals(reports) {
        out.push_str(&fit_line(&line, width));
        out.push('\n');
    }
    // Without a cap no run slots are taken: count the working slots shown instead.
    let working = reports
        .iter()
        .filter(|r| r.state == Some(crate::WorkerState::Working))
        .count() as u32;
    out.push('\n');
    out.push_str(&capacity_footer(capacity, working, width));
    out
}

/// The answer for a root without slots (and its queue's footer, if tasks wait there).
fn render_no_slots(
    root: &Root,
    capacity: &crate::Result<Capacity>,
    width: Option<usize>,
) -> String {
    let mut out = fit_line(
        &format!(
            "no worker slots under {} (create them with `conductor init N`)",
            root.path().display()
        ),
        width,
    ) + "\n";
    if matches!(capacity, Ok(c) if c.pending.total > 0) {
        out.push('\n');
        out.push_str(&capacity_footer(capacity, 0, width));
    }
    out
}

/// The slot table's columns: which keep their width, shrink or go on a narrow screen.
fn slot_table() -> Table {
    Table::new(&[
        ("SLOT", Col::Keep),
        ("STATE", Col::Keep),
        ("AGE", Col::Keep),
        ("PROMPT", Col::Shrink),
        // The handle for every other command: kept (shortened) when others go.
        ("ID", Col::Keep),
        ("COST", Col::Drop),
        ("TURNS", Col::Drop),
        ("BEAT", Col::Drop),
        ("AGENT", Col::Drop),
        ("WORKER", Col::Drop),
        ("LOCK", Col::Drop),
        ("SERVES", Col::Drop),
    ])
}

/// `cost $0.0420 · 7 turns (the tasks shown)`, when any agent reported a cost or turns.
fn totals(reports: &[SlotReport]) -> Option<String> {
    let costs: Vec<f64> = reports.iter().filter_map(|r| r.cost_usd).collect();
    let turns: Vec<u64> = reports.iter().filter_map(|r| r.num_turns).collect();
    if costs.is_empty() && turns.is_empty() {
        return None;
    }
    Some(format!(
        "cost ${:.4} · {} turns (the tasks shown)",
        costs.iter().sum::<f64>(),
        turns.iter().sum::<u64>()
    ))
}

/// `$0.0042`: a cost as the views print it.
pub fn cost(c: Option<f64>) -> String {
    c.map_or_else(|| "-".to_string(), |c| format!("${c:.4}"))
}

/// The STATE cell: `failed`, as `tasks` says it (the protocol's word is `error`); `needs
/// approval` while the running agent waits for a person's answer.
fn state_word(r: &SlotReport) -> String {
    dash(
        r.state
            .map(|s| slot_word(s, r.rejected.is_some(), r.approval.is_some())),
    )
}

/// A slot's state in the words of every view: `failed`, as `tasks` says it (the
/// protocol's word is `error`); `rejected` for a file that was no task, its reason where
/// its prompt would be.
pub(super) fn slot_word(state: crate::WorkerState, rejected: bool, asking: bool) -> String {
    match state {
        crate::WorkerState::Error if rejected => "rejected".to_string(),
        crate::WorkerState::Error => "failed".to_string(),
        _ if asking => crate::tasks::TaskState::NeedsApproval.to_string(),
        s => s.to_string(),
    }
}

/// What the running agent asks a person, under its row, and the commands that answer.
fn asking(r: &SlotReport, notes: &mut Vec<String>, advice: &mut Vec<String>) {
    if let (Some(q), Some(id)) = (&r.approval, &r.task_id) {
        notes.push(format!("! asks to use {}", q.summary()));
        advice.push(format!(
            "`conductor approve {id}` lets it, `conductor deny {id} --reason …` refuses it"
        ));
    }
}

/// The Agent cell: its name and pid (`gone` once it died).
fn agent_cell(r: &SlotReport) -> Option<String> {
    let pid = r.agent_pid.map(|p| match r.agent_alive {
        Some(false) => format!("{p} gone"),
        _ => p.to_string(),
    });
    match (r.agent.as_deref(), pid) {
        (Some(a), Some(p)) => Some(format!("{a} {p}")),
        (Some(a), None) => Some(a.to_string()),
        (None, p) => p,
    }
}

/// The Worker cell: its pid and whether it lives (on which host, holding a lease).
fn worker_cell(r: &SlotReport) -> String {
    match (r.worker_live, r.worker_pid) {
        (true, Some(p)) if r.worker_lease.is_some() => {
            format!(
                "{p} live on {}",
                r.host.as_deref().unwrap_or("another host")
            )
        }
        (true, Some(p)) => format!("{p} live"),
        (true, None) => "live".to_string(),
        (false, Some(p)) => format!("{p} gone"),
        (false, None) => "none".to_string(),
    }
}

/// The Lock cell: its holder's pid, `stale` when it is.
fn lock_cell(r: &SlotReport) -> Option<String> {
    r.lock.as_ref().map(|l| {
        let pid = l.pid.map_or("?".to_string(), |p| p.to_string());
        if l.stale {
            format!("{pid} stale")
        } else {
            pid
        }
    })
}

/// One slot's table cells, the notes under them and the fixes its flags call for.
fn slot_row(r: &SlotReport) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut advice = Vec::new();
    let working = r.state == Some(crate::WorkerState::Working);
    let id = r.task_id.as_ref().map(|t| t.to_string());
    let cells = vec![
        r.slot.to_string(),
        state_word(r),
        dash(r.status_age.map(format_age)),
        dash(
            r.prompt_preview
                .clone()
                .or_else(|| r.rejected.clone())
                .or_else(|| id.clone()),
        ),
        dash(id),
        cost(r.cost_usd),
        dash(r.num_turns.map(|n| n.to_string())),
        dash(r.heartbeat_age.filter(|_| working).map(format_age)),
        dash(agent_cell(r)),
        worker_cell(r),
        dash(lock_cell(r)),
        dash(Some(r.presets.join(",")).filter(|p| !p.is_empty())),
    ];
    let mut notes = Vec::new();
    if !r.flags.is_empty() {
        let words: Vec<String> = r
            .flags
            .iter()
            .map(|f| match f {
                Flag::OrphanedTask => with_id("orphaned task", &r.running),
                Flag::InboxWaiting => with_id("inbox waiting", &r.inbox),
                Flag::StaleLock => match r.lock.as_ref().map(|l| l.reason.as_str()) {
                    Some(why) => format!("stale lock: {why}"),
                    None => "stale lock".to_string(),
                },
                other => other.to_string(),
            })
            .collect();
        notes.push(format!("! {}", words.join(", ")));
        let slot = Slot(r.slot);
        let mut fixes: Vec<String> = Vec::new();
        for f in &r.flags {
            // Waiting with a live worker is just the next task queued.
            if *f == Flag::InboxWaiting && r.worker_live {
                continue;
            }
            let fix = fix(*f, slot);
            if !fixes.contains(&fix) {
                fixes.push(fix);
            }
        }
        advice = fixes;
    }
    asking(r, &mut notes, &mut advice);
    for p in &r.problems {
        notes.push(format!("? {p}"));
    }
    // The slot's last task: what its agent was refused.
    if let Some(w) = crate::protocol::denial::warning(&r.denials) {
        notes.push(format!("warning: {w}"));
    }
    (cells, notes, advice)
}

/// The shared queue at a glance, in lines of at most `width` characters:
/// `running 2/3 · pending 5 (p9:1 p5:4)`, then `keys: alice running, bob 3 waiting`,
/// then stale locks, if any. `working`: how many slots are working (what "running"
/// says when the root sets no `maxRunning`).
pub fn capacity_footer(
    capacity: &crate::Result<Capacity>,
    working: u32,
    width: Option<usize>,
) -> String {
    let c = match capacity {
        Ok(c) => c,
        Err(e) => return fit_line(&format!("? capacity unknown: {e}"), width) + "\n",
    };
    let mut lines = Vec::new();
    lines.push(running_line(c, working));
    let keys: Vec<String> = c
        .by_key
        .iter()
        .filter(|(_, k)| k.running > 0 || k.pending > 0)
        .map(|(name, k)| match (k.running > 0, k.pending) {
            (true, 0) => format!("{name} running"),
            (true, n) => format!("{name} running +{n} waiting"),
            (false, n) => format!("{name} {n} waiting"),
        })
        .collect();
    if !keys.is_empty() {
        lines.push(format!("keys: {}", keys.join(", ")));
    }
    let groups = group_words(c);
    if !groups.is_empty() {
        lines.push(format!("groups: {}", groups.join(", ")));
    }
    if !c.paused.is_empty() {
        lines.push(format!(
            "paused: {} (`{}`)",
            c.paused.join(", "),
            super::pause::resume_hint(&c.paused)
        ));
    }
    let stale: Vec<String> = c
        .locks
        .iter()
        .filter(|l| !l.alive)
        .map(|l| match l.holder_pid {
            Some(p) => format!("{} (pid {p})", l.name),
            None => l.name.clone(),
        })
        .collect();
    if !stale.is_empty() {
        lines.push(format!(
            "! stale: {} (the next taker breaks them; or `conductor locks clean --apply`)",
            stale.join(", ")
        ));
    }
    lines
        .into_iter()
        .map(|l| fit_line(&l, width) + "\n")
        .collect()
}

/// The footer's first line: how many run of how many may, and how many wait (by
/// priority).
fn running_line(c: &Capacity, working: u32) -> String {
    let running = match c.slots.max {
        Some(max) => format!("running {}/{max}", c.slots.used),
        None => format!("running {} (no maxRunning)", c.slots.used.max(working)),
    };
    let mut first = format!("{running} · pending {}", c.pending.total);
    if c.pending.total > 0 {
        let by: Vec<String> = c
            .pending
            .by_priority
            .iter()
            .rev()
            .filter(|(_, n)| **n > 0)
            .map(|(p, n)| format!("p{p}:{n}"))
            .collect();
        first.push_str(&format!(" ({})", by.join(" ")));
    }
    first
}

/// Each group: `name running/parallel running`, `+n queued` when some wait.
fn group_words(c: &Capacity) -> Vec<String> {
    c.groups
        .iter()
        .map(|g| {
            format!(
                "{} {}/{} running{}",
                g.name,
                g.running,
                g.parallel,
                if g.queued > 0 {
                    format!(" +{} queued", g.queued)
                } else {
                    String::new()
                }
            )
        })
        .collect()
}

/// Redraw on every change under the watched slots, and every second for the ages.
fn watch(client: &crate::Client, only: Option<Slot>) -> anyhow::Result<i32> {
    let root = client.root();
    let stop = super::args::interrupt_channel()?;
    let (tx, wake) = crossbeam_channel::bounded(1);
    // output.log changes with every line an agent prints, temp files precede renames:
    // neither changes what the table shows.
    let interest: Interest = Arc::new(|p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name != "output.log" && !name.ends_with(".tmp")
    });
    let mut watched: Option<Vec<PathBuf>> = None;
    let mut _watcher: Option<DirWatcher> = None;
    loop {
        let slots = match only {
            Some(s) => vec![s],
            None => root.slots().unwrap_or_default(),
        };
        let mut dirs = vec![root.workers_dir()];
        dirs.extend(slots.iter().map(|s| root.worker(*s).dir));
        // The capacity footer: what is pending, which keys and run slots are held.
        dirs.extend([root.queue_pending(), root.keys_dir(), root.slots_dir()]);
        dirs.retain(|d| d.is_dir());
        if watched.as_ref() != Some(&dirs) {
            _watcher = None;
            if !dirs.is_empty() {
                match DirWatcher::new(&dirs, WatchMode::Auto, interest.clone(), tx.clone()) {
                    Ok(w) => _watcher = Some(w),
                    Err(e) => tracing::warn!("redrawing every second only: {e}"),
                }
            }
            watched = Some(dirs);
        }
        let request = crate::verbs::status::StatusRequest {
            slot: only,
            review: false,
        };
        let body = match crate::verbs::status::status(client, &request) {
            Ok(s) => render(root, &s.workers, &s.capacity, table::width()),
            Err(e) => format!("error: {e}\n"),
        };
        let now = crate::protocol::now_rfc3339();
        // Clearing the screen is for a terminal; a file or pipe gets frames one after another.
        let clear = if table::color(false) {
            "\x1b[H\x1b[2J"
        } else {
            "\n"
        };
        let head = fit_line(
            &format!("{}  {now}  (Ctrl-C to quit)", root.path().display()),
            table::width(),
        );
        emit(&format!("{clear}{head}\n\n{body}"))?;
        select! {
            recv(wake) -> _ => {}
            recv(stop) -> _ => return Ok(exit::OK),
            default(Duration::from_secs(1)) => {}
        }
        if super::output::stdout_closed() {
            return Ok(exit::OK);
        }
    }
}
