//! `conductor group add|set|list|rm`: groups, each with its own cap on running tasks.

use serde_json::json;

use crate::queue::groups;

use super::table::{self, Col, Table};
use super::{emit, emit_json, RootArg};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
A group is groups/<NAME>.json; `conductor submit --group NAME` puts a task in it. At most \
--parallel tasks of a group run at once, across every worker and host, held as maxRunning \
is: each running task holds one of the group's run slots (groups/<NAME>.<i>.lock/), which \
outlives a killed worker while its task still runs. `group set` takes effect at the next \
pickup, without restarting workers; lowering it stops no running task.")]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    /// JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub root: RootArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Define a group: at most N of its tasks run at once.
    Add {
        name: String,
        #[arg(long, value_name = "N")]
        parallel: u32,
    },
    /// Change a group's cap (workers follow it at their next pickup).
    Set {
        name: String,
        #[arg(long, value_name = "N")]
        parallel: u32,
    },
    /// Every group: its cap, running and queued tasks, whether it is paused.
    #[command(visible_alias = "ls")]
    List,
    /// Remove a group; refused while tasks of it wait or run.
    #[command(visible_alias = "remove")]
    Rm { name: String },
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let root = client.root();
    let said = match args.action {
        Action::Add { name, parallel } => {
            crate::trust::verify_root(root)?;
            let g = groups::add(root, &name, parallel)?;
            (
                json!(g),
                format!(
                    "group {name}: at most {parallel} of its tasks run at once (`conductor submit --group {name}`)\n"
                ),
            )
        }
        Action::Set { name, parallel } => {
            crate::trust::verify_root(root)?;
            let g = groups::set(root, &name, parallel)?;
            let running = groups::running(root, &name, &crate::inspect::lock_options(root));
            let mut text =
                format!("group {name}: at most {parallel} of its tasks run at once from now\n");
            if running > parallel {
                text.push_str(&format!(
                    "{running} run now; no new one starts until fewer than {parallel} do\n"
                ));
            }
            (json!(g), text)
        }
        Action::List => {
            let all = groups::usage(root)?;
            let text = if all.is_empty() {
                "no groups (add one with `conductor group add NAME --parallel N`)\n".to_string()
            } else {
                let mut t = Table::new(&[
                    ("GROUP", Col::Shrink),
                    ("PARALLEL", Col::Keep),
                    ("RUNNING", Col::Keep),
                    ("QUEUED", Col::Keep),
                    ("PAUSED", Col::Drop),
                ]);
                for g in &all {
                    t.row(vec![
                        g.name.clone(),
                        g.parallel.to_string(),
                        g.running.to_string(),
                        g.queued.to_string(),
                        if g.paused { "paused" } else { "-" }.to_string(),
                    ]);
                }
                t.render(table::width())
            };
            (json!({ "root": root.path(), "groups": all }), text)
        }
        Action::Rm { name } => {
            crate::trust::verify_root(root)?;
            groups::remove(root, &name)?;
            (
                json!({ "removed": name }),
                format!("group {name} removed\n"),
            )
        }
    };
    if args.json {
        emit_json(&said.0)?;
    } else {
        emit(&said.1)?;
    }
    Ok(exit::OK)
}
