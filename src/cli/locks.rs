//! `conductor locks [--json]` and `conductor locks clean [--apply]`.

use crate::dirlock::LockOptions;
use crate::inspect::{self, LockEntry, LockStatus};
use crate::maintenance::{clean_locks, CleanAction, CleanedLock};
use crate::text::format_age;
use crate::Root;

use super::table::{self, Col, Table};
use super::{args::RootArg, output::emit, output::emit_json, output::show_path};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Kinds: task (workers/<N>/.lock, held while a task is in hand), key (keys/<k>.lock), \
run-slot (slots/<i>.lock, the cap on running agents), gate (flock of a long-lived role: \
workers/<N>/.worker.lock, .locks/*), spare (a worker's .lock parked between tasks). A lock \
is stale only when its holder is proven gone; gates are never stale.")]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// One JSON document with camelCase keys.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Report stale locks and dead processes' parked spares; remove them with --apply.
    Clean(CleanArgs),
}

#[derive(Debug, clap::Args)]
pub struct CleanArgs {
    /// Remove them (default: only say what would be removed). A live holder's lock is
    /// never removed: each one is judged again under its guard first.
    #[arg(long)]
    pub apply: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.client()?.root().clone();
    let opts = inspect::lock_options(&root);
    match args.action {
        None => list(&root, &opts, args.json),
        Some(Action::Clean(c)) => {
            crate::trust::verify_root(&root)?;
            clean(&root, &opts, c.apply, args.json)
        }
    }
}

/// `conductor locks`.
fn list(root: &Root, opts: &LockOptions, json: bool) -> anyhow::Result<i32> {
    let locks = inspect::list_locks(root, opts)?;
    if json {
        emit_json(&serde_json::json!({ "root": root.path(), "locks": locks }))?;
    } else if locks.is_empty() {
        emit(&format!("no locks under {}\n", root.path().display()))?;
    } else {
        emit(&render_locks(&locks))?;
    }
    Ok(exit::OK)
}

/// The table of locks, and what to do about stale ones.
fn render_locks(locks: &[LockEntry]) -> String {
    let mut t = Table::new(&[
        ("KIND", Col::Keep),
        ("NAME", Col::Keep),
        ("STATE", Col::Keep),
        ("PID", Col::Keep),
        ("AGE", Col::Drop),
        ("WHY", Col::Shrink),
    ]);
    for l in locks {
        let mut reason = l.reason.clone();
        if let Some(h) = l.host.as_deref().filter(|h| *h != crate::host::hostname()) {
            if !reason.contains(h) {
                reason.push_str(&format!(" on {h}"));
            }
        }
        t.row(vec![
            l.kind.to_string(),
            l.name.clone(),
            l.status.to_string(),
            l.pid.map_or("-".into(), |p| p.to_string()),
            l.age.map_or("-".into(), format_age),
            reason,
        ]);
    }
    let width = table::width();
    let mut out = t.render(width);
    let stale = locks
        .iter()
        .filter(|l| l.status == LockStatus::Stale)
        .count();
    if stale > 0 {
        out.push('\n');
        out.push_str(&table::fit_line(
            &format!("{stale} stale; `conductor locks clean` shows what would be removed, `--apply` removes it"),
            width,
        ));
        out.push('\n');
    }
    out
}

/// `conductor locks clean [--apply]`.
fn clean(root: &Root, opts: &LockOptions, apply: bool, json: bool) -> anyhow::Result<i32> {
    let cleaned = clean_locks(root, opts, apply)?;
    if json {
        emit_json(&serde_json::json!({
            "root": root.path(),
            "applied": apply,
            "locks": cleaned,
        }))?;
    } else if cleaned.is_empty() {
        emit("no stale locks\n")?;
    } else {
        emit(&render_cleaned(root, &cleaned, apply))?;
    }
    Ok(exit::OK)
}

/// One line per stale lock with what happened to it, then what to do next.
fn render_cleaned(root: &Root, cleaned: &[CleanedLock], applied: bool) -> String {
    let mut out = String::new();
    for c in cleaned {
        out.push_str(&format!(
            "{}: {} {} ({}) — {}\n",
            c.action,
            c.lock.kind,
            c.lock.name,
            show_path(root, &c.lock.path),
            c.lock.reason
        ));
    }
    if !applied {
        out.push_str(&format!(
            "\n{} stale; run `conductor locks clean --apply` to remove them\n",
            cleaned.len()
        ));
        return out;
    }
    let left = cleaned
        .iter()
        .filter(|c| c.action == CleanAction::LeftAlone)
        .count();
    if left > 0 {
        out.push_str(&format!(
            "\n{left} left alone: judged again, their holders turned out alive (or they were gone already)\n"
        ));
    }
    out
}
