//! `conductor group add|set|list|rm`: groups, each with its own cap on running tasks.

use serde_json::json;

use crate::queue::groups;

use super::table::{self, Col, Table};
use super::{args::RootArg, output::emit, output::emit_json};
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
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
        #[command(flatten)]
        budget: BudgetArgs,
    },
    /// Change a group's cap or daily budget (workers follow at their next pickup).
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true)
        .args(["parallel", "daily_budget_usd", "no_budget"])))]
    // Written out: clap's own usage line for the group is 96 columns wide.
    #[command(override_usage = "conductor group set <NAME> [--parallel <N>] \
                                [--daily-budget-usd <USD>]\n       \
                                conductor group set <NAME> --no-budget")]
    Set {
        name: String,
        #[arg(long, value_name = "N")]
        parallel: Option<u32>,
        #[command(flatten)]
        budget: BudgetArgs,
    },
    /// Every group: its cap, running and queued tasks, whether it is paused.
    #[command(visible_alias = "ls")]
    List,
    /// Remove a group; refused while tasks of it wait or run.
    #[command(visible_alias = "remove")]
    Rm { name: String },
}

/// A group's daily spend budget.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BudgetArgs {
    /// Once its tasks' reported costs today reach USD, no new task of the group starts
    /// until the next day (local time) or a higher budget; running ones finish.
    #[arg(long, value_name = "USD")]
    pub daily_budget_usd: Option<f64>,
    /// Remove the group's daily budget.
    #[arg(long, conflicts_with = "daily_budget_usd")]
    pub no_budget: bool,
}

impl BudgetArgs {
    /// Apply to group `name`; a line saying so, if anything changed.
    fn apply(&self, root: &crate::Root, name: &str) -> anyhow::Result<Option<String>> {
        let usd = match (self.daily_budget_usd, self.no_budget) {
            (Some(v), _) => Some(v),
            (None, true) => None,
            (None, false) => return Ok(None),
        };
        groups::set_budget(root, name, usd)?;
        Ok(Some(match usd {
            Some(v) => format!(
                "group {name}: daily budget {} (spent today: {})\n",
                crate::budget::usd(v),
                crate::budget::usd(crate::budget::spent_today(root).group(name))
            ),
            None => format!("group {name}: no daily budget\n"),
        }))
    }
}

/// `$0.0375 of $0.0100`, `$0.0375`, or `-` for no spend and no budget.
fn spent_cell(g: &groups::GroupUse) -> String {
    let spent = crate::budget::usd(g.spent_today_usd);
    match g.daily_budget_usd {
        Some(max) => format!("{spent} of {}", crate::budget::usd(max)),
        None if g.spent_today_usd > 0.0 => spent,
        None => "-".to_string(),
    }
}

/// `group set`: the cap and/or the budget.
fn set(
    root: &crate::Root,
    name: &str,
    parallel: Option<u32>,
    budget: &BudgetArgs,
) -> anyhow::Result<(serde_json::Value, String)> {
    crate::trust::verify_root(root)?;
    let mut text = String::new();
    if let Some(parallel) = parallel {
        groups::set(root, name, parallel)?;
        let running = groups::running(root, name, &crate::inspect::lock_options(root));
        text = format!("group {name}: at most {parallel} of its tasks run at once from now\n");
        if running > parallel {
            text.push_str(&format!(
                "{running} run now; no new one starts until fewer than {parallel} do\n"
            ));
        }
    }
    if let Some(line) = budget.apply(root, name)? {
        text.push_str(&line);
    }
    Ok((json!(groups::require(root, name)?), text))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let client = args.root.client()?;
    let root = client.root();
    let said = match args.action {
        Action::Add {
            name,
            parallel,
            budget,
        } => {
            crate::trust::verify_root(root)?;
            crate::budget::check_usd("--daily-budget-usd", budget.daily_budget_usd)
                .map_err(crate::cli::usage::CliError::Usage)?;
            groups::add(root, &name, parallel)?;
            let mut text = format!(
                "group {name}: at most {parallel} of its tasks run at once (`conductor submit --group {name}`)\n"
            );
            text.push_str(&budget.apply(root, &name)?.unwrap_or_default());
            (json!(groups::require(root, &name)?), text)
        }
        Action::Set {
            name,
            parallel,
            budget,
        } => set(root, &name, parallel, &budget)?,
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
                    ("SPENT TODAY", Col::Drop),
                ]);
                for g in &all {
                    t.row(vec![
                        g.name.clone(),
                        g.parallel.to_string(),
                        g.running.to_string(),
                        g.queued.to_string(),
                        if g.paused { "paused" } else { "-" }.to_string(),
                        spent_cell(g),
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
