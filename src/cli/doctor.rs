//! `conductor doctor [--agent CMD] [--json]`: is this setup healthy?

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
    #[arg(long, value_name = "CMD", default_value = "claude -p")]
    pub agent: String,
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
            agent: args.agent.clone(),
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
        let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = format!("conductor doctor: {}\n", root.path().display());
        for c in &checks {
            out.push_str(&format!(
                "{:<4}  {:<width$}  {}\n",
                c.status.to_string(),
                c.name,
                c.detail
            ));
            if let Some(fix) = c.fix.as_deref().filter(|_| c.status != CheckStatus::Ok) {
                out.push_str(&format!("{:<4}  {:<width$}  fix: {fix}\n", "", ""));
            }
        }
        out.push_str(&format!(
            "{} checks: {} ok, {warned} warnings, {failed} failed\n",
            checks.len(),
            checks.len() - warned - failed
        ));
        emit(&out)?;
    }
    Ok(if failed > 0 { exit::FAILURE } else { exit::OK })
}
