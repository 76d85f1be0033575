//! `conductor doctor [--agent [PRESET|CMD] | --preset P] [--json]`: is this setup healthy?

use crate::doctor::{doctor, CheckStatus, DoctorOptions};

use super::{args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Checks: the root exists and is private (0700, files 0600); config.json and every task, \
status and result file under workers/ parse; stale locks; dead workers and orphaned \
tasks; which watcher workers would use (native events or polling, and why); the root's \
filesystem (NFS, SMB and FUSE deliver no events); inotify limits; tmux; the agent command \
on PATH. Each check says ok, warn or fail, with a fix. Exits 1 if any check fails.

--agent with a preset name, or alone, also runs that agent once with a trivial prompt \
(in a temporary directory, at most 60 s, nothing kept), against the API its environment \
names, and says whether it works: ok, not installed, not logged in / invalid API key, \
rate-limited until HH:MM, or cannot reach the API. Alone it tries the presets the root's \
live workers serve, else --preset, else claude.")]
pub struct Args {
    /// A preset name (claude, codex, gemini, command), or nothing: run that agent once
    /// to see that it works (alone: the presets the live workers serve, else --preset,
    /// else claude). Another command line: the one workers will run, checked on PATH.
    /// [default: the preset's command line, else `claude -p`, checked on PATH]
    #[arg(long, value_name = "PRESET|CMD", num_args = 0..=1)]
    pub agent: Option<Option<String>>,
    /// Agent kind the workers will run (claude, codex, gemini or command): its command line is
    /// the one checked, unless --agent names another.
    #[arg(long, value_name = "PRESET", value_parser = super::args::parse_preset)]
    pub preset: Option<crate::preset::Preset>,
    /// One JSON document: {"ok", "checks": [{name, status, detail, fix}]}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.unchecked_client()?.root().clone();
    let named: Option<crate::preset::Preset> = args
        .agent
        .as_ref()
        .and_then(|a| a.as_deref())
        .and_then(|a| a.parse().ok());
    let try_presets = match (&args.agent, named) {
        (_, Some(p)) => vec![p],
        (Some(None), None) => {
            let served = crate::doctor::served_presets(&root);
            if served.is_empty() {
                vec![args.preset.unwrap_or(crate::preset::Preset::Claude)]
            } else {
                served
            }
        }
        _ => Vec::new(),
    };
    let checks = doctor(
        &root,
        &DoctorOptions {
            agent: args
                .agent
                .clone()
                .flatten()
                .unwrap_or_else(|| args.preset.unwrap_or_default().default_command().into()),
            try_presets,
            ..DoctorOptions::default()
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
        let mut t = super::table::Table::new(&[
            ("", super::table::Col::Keep),
            ("CHECK", super::table::Col::Keep),
            ("FINDING", super::table::Col::Shrink),
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
            "{}: {} ok, {}, {failed} failed\n",
            crate::text::count(checks.len(), "check", "checks"),
            checks.len() - warned - failed,
            crate::text::count(warned, "warning", "warnings"),
        ));
        emit(&out)?;
    }
    Ok(if failed > 0 { exit::FAILURE } else { exit::OK })
}
