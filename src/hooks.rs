//! Event hooks beside the on-finish `callback`: `approvalCallback` (a task needs approval) and `budgetCallback` (a daily budget is spent).
//!
//! Each is a shell command in config.json, run like `callback` (`sh -c`, a process
//! group of its own, stopped past `callbackTimeoutSecs`: SIGTERM, then SIGKILL), with
//! the event as one JSON object on its stdin and its main facts in its environment
//! (`CONDUCTOR_EVENT`, `CONDUCTOR_HOME`, `CONDUCTOR_TASK_ID`, …). It is started off the
//! path of whoever noticed the event, and a thread of that process watches and reaps
//! it, logging its output: an approval's by the agent's permission tool (`conductor
//! approval-mcp`, which lives until the question is answered), a budget's by the worker
//! whose finished task's cost spent it ([`budget`]).

pub mod approval;
pub mod budget;
pub mod news;
pub mod tracked;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::env::{ENV_HOME, ENV_TASK_ID, ENV_WORKER};
use crate::layout::{Root, WorkerPaths};
use crate::protocol::TaskId;

/// Which event a hook (or the on-finish callback, `finished`) is run for.
pub const ENV_EVENT: &str = "CONDUCTOR_EVENT";
/// The slot whose task asks (approvals).
pub const ENV_SLOT: &str = "CONDUCTOR_SLOT";
/// What the agent asks to do, in a few words (approvals): `Bash: rm -rf build`.
pub const ENV_ASKS: &str = "CONDUCTOR_ASKS";
/// Which budget is spent (budgets): `root` or `group`.
pub const ENV_BUDGET: &str = "CONDUCTOR_BUDGET";
/// The group whose budget is spent (budgets, `group` only).
pub const ENV_GROUP: &str = "CONDUCTOR_GROUP";
/// Today's spend and the budget, in USD (budgets).
pub const ENV_SPENT_USD: &str = "CONDUCTOR_SPENT_USD";
pub const ENV_BUDGET_USD: &str = "CONDUCTOR_BUDGET_USD";

/// How long a hook gets after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Most bytes of a hook's output that are logged.
const OUTPUT_LOGGED: usize = 2048;

/// Something a person may want to be told of at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    /// Task `task_id`'s agent, on slot `slot`, waits for a person to allow or deny a
    /// tool call (`conductor approve|deny TASK_ID`), until `deadline`.
    #[serde(rename_all = "camelCase")]
    NeedsApproval {
        task_id: TaskId,
        slot: u32,
        question_id: String,
        asks: String,
        asked_at: String,
        deadline: String,
    },
    /// The root's (`budget: "root"`) or group `group`'s daily budget is spent: no new
    /// task of it starts today. `task_id` is the task whose cost spent it.
    #[serde(rename_all = "camelCase")]
    BudgetReached {
        budget: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        spent_usd: f64,
        budget_usd: f64,
        task_id: TaskId,
        day: String,
        at: String,
    },
}

impl Event {
    /// Its name, as `CONDUCTOR_EVENT` and the JSON's `event` say it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::NeedsApproval { .. } => "needsApproval",
            Event::BudgetReached { .. } => "budgetReached",
        }
    }

    /// One line for a person: `task T needs approval: Bash: ls`.
    pub fn describe(&self) -> String {
        match self {
            Event::NeedsApproval { task_id, asks, .. } => format!(
                "task {task_id} needs approval: {asks} (`conductor approve {task_id}` or \
                 `conductor deny {task_id}`)"
            ),
            Event::BudgetReached {
                group,
                spent_usd,
                budget_usd,
                ..
            } => format!(
                "{} daily budget is spent ({} of {}): no new task of it starts today",
                group
                    .as_ref()
                    .map_or("the root's".to_string(), |g| format!("group {g}'s")),
                crate::budget::usd(*spent_usd),
                crate::budget::usd(*budget_usd)
            ),
        }
    }

    /// The task the event is about (its id marks the hook's environment).
    fn task_id(&self) -> &TaskId {
        match self {
            Event::NeedsApproval { task_id, .. } | Event::BudgetReached { task_id, .. } => task_id,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(ENV_EVENT, self.name().to_string())];
        match self {
            Event::NeedsApproval {
                task_id,
                slot,
                asks,
                ..
            } => env.extend([
                (ENV_TASK_ID, task_id.to_string()),
                (ENV_SLOT, slot.to_string()),
                (ENV_ASKS, asks.clone()),
            ]),
            Event::BudgetReached {
                budget,
                group,
                spent_usd,
                budget_usd,
                task_id,
                ..
            } => env.extend([
                (ENV_TASK_ID, task_id.to_string()),
                (ENV_BUDGET, budget.clone()),
                (ENV_GROUP, group.clone().unwrap_or_default()),
                (ENV_SPENT_USD, format!("{spent_usd}")),
                (ENV_BUDGET_USD, format!("{budget_usd}")),
            ]),
        }
        env
    }
}

/// Run the hook `config` names for `event`, if any, recorded in `slot` (the slot whose
/// task asks, or whose task spent the budget) until reaped: if the process watching it
/// dies first (a SIGKILLed worker), whoever recovers the slot ends it, as it ends the
/// on-finish callback ([`crate::recovery::callbacks`]). Returns at once; a failure to
/// start it is logged, never the caller's.
pub fn tell(config: &Config, root: &Root, slot: &WorkerPaths, event: &Event) {
    let command = match event {
        Event::NeedsApproval { .. } => config.approval_callback.as_deref(),
        Event::BudgetReached { .. } => config.budget_callback.as_deref(),
    };
    if let Some(command) = command {
        start(command, config.callback_timeout(), root, slot, event);
    }
}

fn start(command: &str, timeout: Duration, root: &Root, slot: &WorkerPaths, event: &Event) {
    let name = event.name();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Not an agent: sub-commands it runs (`conductor submit`) are not nested.
        .env_remove(ENV_WORKER)
        .env(ENV_HOME, root.path())
        .envs(event.env());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("{name} hook: cannot start `sh -c {command}`: {e}");
            return;
        }
    };
    // The event is far smaller than a pipe's buffer: this write never waits on the
    // hook. A hook that does not read its stdin is no error.
    if let Some(mut stdin) = child.stdin.take() {
        let mut line = serde_json::to_vec(event).expect("an event serializes");
        line.push(b'\n');
        let _ = stdin.write_all(&line);
    }
    let pid = child.id();
    let record = tracked::record(slot, pid, event.task_id());
    let forget = move || {
        if let Some(r) = &record {
            tracked::forget(r);
        }
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = std::thread::Builder::new()
        .name(format!("hook-wait-{name}"))
        .spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
    if let Err(e) = waiter {
        crate::agent::signal_group(pid, Signal::SIGKILL);
        forget();
        tracing::warn!("{name} hook: cannot start a thread to wait for it: {e}");
        return;
    }
    let forget_too = forget.clone();
    let watch = move || {
        let got = rx.recv_timeout(timeout).or_else(|_| {
            tracing::warn!("{name} hook ran over its {}s timeout", timeout.as_secs());
            crate::agent::signal_group(pid, Signal::SIGTERM);
            rx.recv_timeout(KILL_GRACE).or_else(|_| {
                crate::agent::signal_group(pid, Signal::SIGKILL);
                rx.recv_timeout(KILL_GRACE)
            })
        });
        // Reaped, or SIGKILLed and still not reaped: either way nothing more to end.
        forget();
        log_ended(
            name,
            &got.map_err(|_| std::io::Error::other("not reaped"))??,
        );
        Ok::<(), std::io::Error>(())
    };
    let watcher = std::thread::Builder::new()
        .name("hook".into())
        .spawn(move || {
            if let Err(e) = watch() {
                tracing::warn!("{name} hook: {e}");
            }
        });
    if let Err(e) = watcher {
        crate::agent::signal_group(pid, Signal::SIGKILL);
        forget_too();
        tracing::warn!("{name} hook: cannot start a thread to watch it: {e}");
    }
}

/// Log how hook `name` ended, with the start of its output.
fn log_ended(name: &str, ended: &std::process::Output) {
    let status = ended.status;
    let mut line = format!("{name} hook ended: {status}");
    for (what, bytes) in [("stdout", &ended.stdout), ("stderr", &ended.stderr)] {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(OUTPUT_LOGGED)]);
        if !text.trim().is_empty() {
            line.push_str(&format!(
                "; {what}: {}",
                text.trim_end().replace('\n', " | ")
            ));
        }
    }
    if status.success() {
        tracing::info!("{line}");
    } else {
        tracing::warn!("{line}");
    }
}
