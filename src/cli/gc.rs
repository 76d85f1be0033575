//! `conductor gc [--older-than 24h] [--apply]`: remove old results, logs and leftovers.

use std::time::Duration;

use crate::maintenance::{GcPlan, TEMP_FILE_AGE};
use crate::text::{format_age, format_bytes};
use crate::verbs::gc::GcRequest;
use crate::Root;

use super::{args::RootArg, output::emit, output::emit_json, output::show_path};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Removes, per slot: results/<id>.json older than --older-than (by mtime) together with \
tasks/<id>.json and tasks/<id>.log; tasks/ files whose result is gone once they are that \
old; rejected/ files that old; .trash/ of slots no live worker serves. Also .*.tmp files \
older than 10 minutes under workers/ and queue/tmp/. Never touches result.json, \
status.json, running.json, task.json, output.log, or any file of a running or waiting \
task. A finished --worktree task whose branch is neither merged nor discarded keeps its \
result, record and log however old, so `diff`, `merge` and `discard` still work; its \
worktree goes once it is older than config.json's worktreeRetentionSecs (default 7 days) \
and its branch stays (gc never deletes a branch). Without --apply it only prints the plan \
and the bytes it would reclaim.")]
pub struct Args {
    /// Age past which results, task records, logs and rejected files go: seconds or a
    /// duration (e.g. 24h, 7d, 90m).
    #[arg(long, value_name = "AGE", default_value = "24h", value_parser = super::args::parse_duration_arg)]
    pub older_than: Duration,
    /// Remove the files (default: only print what would be removed).
    #[arg(long)]
    pub apply: bool,
    /// One JSON document with camelCase keys.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let request = GcRequest {
        older_than: args.older_than,
        apply: args.apply,
    };
    let answer = crate::verbs::gc::gc(&client, &request)?;
    let code = if answer.errors.is_empty() {
        exit::OK
    } else {
        exit::FAILURE
    };
    if args.json {
        emit_json(&serde_json::to_value(&answer)?)?;
        return Ok(code);
    }
    let root = client.root();
    let mut out = render_plan(root, &answer.plan, args.older_than, args.apply);
    if !answer.applied && !answer.plan.items.is_empty() {
        out.push_str("run again with --apply to remove them\n");
    } else if answer.applied {
        out.push_str(&format!(
            "removed {} files, {} reclaimed\n",
            answer.items.len(),
            format_bytes(answer.bytes)
        ));
        for e in &answer.errors {
            eprintln!("error: {e}");
        }
    }
    emit(&out)?;
    Ok(code)
}

/// What gc removes (or would), and what it keeps on purpose.
fn render_plan(root: &Root, plan: &GcPlan, older_than: Duration, apply: bool) -> String {
    let limits = format!(
        "older than {}; temp files older than {}",
        crate::text::format_span(older_than),
        crate::text::format_span(TEMP_FILE_AGE)
    );
    let mut out = String::new();
    if plan.items.is_empty() {
        out.push_str(&format!("nothing to collect ({limits})\n"));
    } else {
        let verb = if apply { "removing" } else { "would remove" };
        out.push_str(&format!(
            "{verb} {} files, {} ({limits}):\n",
            plan.items.len(),
            format_bytes(plan.bytes),
        ));
        let mut t = super::table::Table::new(&[
            ("KIND", super::table::Col::Keep),
            ("AGE", super::table::Col::Keep),
            ("SIZE", super::table::Col::Keep),
            ("PATH", super::table::Col::Shrink),
        ]);
        t.wrap();
        for i in &plan.items {
            t.row(vec![
                i.kind.to_string(),
                i.age.map_or("-".into(), format_age),
                format_bytes(i.bytes),
                show_path(root, &i.path),
            ]);
        }
        out.push_str(&t.render(super::table::width()));
    }
    if !plan.protected.is_empty() {
        out.push_str(&format!(
            "kept: every file of running or waiting tasks ({})\n",
            plan.protected.join(", ")
        ));
    }
    if !plan.unmerged.is_empty() {
        out.push_str(
            "kept: the result, record and log of tasks whose branch is neither merged nor \
             discarded, so `conductor diff|merge|discard ID` still work (gc never deletes a \
             branch; a worktree past worktreeRetentionSecs goes, its branch stays):\n",
        );
        for u in &plan.unmerged {
            out.push_str(&format!(
                "  {} ({} in {}{})\n",
                u.id,
                u.branch,
                u.repo.display(),
                if u.worktree { "" } else { ", worktree removed" }
            ));
        }
    }
    out
}
