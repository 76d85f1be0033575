//! `conductor doctor [--agent CMD | --preset P] [--json]`: is this setup healthy?

use crate::doctor::{doctor, CheckStatus, DoctorOptions};

use super::{emit, emit_json, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Checks: the root exists and is private (0700, files 0600); config.json and every task, \
status and result file under workers/ parse; stale locks; dead workers and orphaned \
tasks; which watcher workers would use (native events or polling, and why); the root's \
filesystem (NFS, SMB and FUSE deliver no events); inotify limits; tmux; the agent command \
on PATH. Each check says ok, warn or fail, with a fix. Exits 1 if any check fails.")]
pub struct Args {
    /// The agent command line workers will run; checked on PATH.
    /// [default: the preset's, else `claude -p`]
    #[arg(long, value_name = "CMD")]
    pub agent: Option<String>,
    /// Agent kind the workers will run (claude, codex, gemini or command): its command line is
    /// the one checked, unless --agent names another.
    #[arg(long, value_name = "PRESET", value_parser = super::parse_preset)]
    pub preset: Option<crate::preset::Preset>,
    /// One JSON document: {"ok", "checks": [{name, status, detail, fix}]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.unchecked_client()?.root().clone();
    let checks = doctor(
        &root,
        &DoctorOptions {
            agent: args
                .agent
                .clone()
                .unwrap_or_else(|| args.preset.unwrap_or_default().default_command().into()),
        },
    );
    let failed = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .count();
    let warned = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Warn)
        .count();
    if args.json {
        emit_json(&serde_json::json!({
            "root": root.path(),
            "ok": failed == 0,
            "checks": checks,
        }))?;
    } else {
        let width = super::table::width();
        let mut out = super::table::fit_line(
            &format!("conductor doctor: {}", root.path().display()),
            width,
        ) + "\n";
        let mut t = super::Table::new(&[
            ("", super::Col::Keep),
            ("CHECK", super::Col::Keep),
            ("FINDING", super::Col::Shrink),
        ]);
        t.wrap();
        for c in &checks {
            t.row(vec![c.status.to_string(), c.name.clone(), c.detail.clone()]);
            if let Some(fix) = c.fix.as_deref().filter(|_| c.status != CheckStatus::Ok) {
                t.row(vec![String::new(), String::new(), format!("fix: {fix}")]);
            }
        }
        out.push_str(&t.render(width));
        out.push_str(&format!(
            "{} checks: {} ok, {warned} warnings, {failed} failed\n",
            checks.len(),
            checks.len() - warned - failed
        ));
        emit(&out)?;
    }
    Ok(if failed > 0 { exit::FAILURE } else { exit::OK })
}
