//! The agent command a task runs: the worker's, with what the task asks of it (its
//! model, the session it resumes, narrower tools, its own spend cap).

use super::run::Run;
use crate::agent::AgentCommand;
use crate::preset::Preset;
use crate::protocol::{Outcome, Task, TaskId, TaskResult};

impl Run<'_> {
    /// The agent command for this task: the worker's, with the task's model and the
    /// session it resumes as the preset passes them. Err: the task's rejected result.
    pub(super) fn command(
        &self,
        task: &Task,
    ) -> std::result::Result<AgentCommand, Box<TaskResult>> {
        let Some((preset, command)) = &self.agent else {
            let why = format!(
                "rejected: the task names agent preset {}, but this worker runs only {}",
                task.agent.as_deref().unwrap_or("?"),
                self.shared.opts.preset_names().join(", ")
            );
            return Err(Box::new(TaskResult::failed(
                self.id.clone(),
                Outcome::Rejected,
                why,
            )));
        };
        let command = with_budget(*preset, command, task, &self.id);
        if task.model.is_none()
            && task.resume.is_none()
            && task.allowed_tools.is_none()
            && task.permission_mode.is_none()
        {
            return Ok(command);
        }
        if let (Some(model), false) = (&task.model, preset.takes_model()) {
            tracing::warn!(
                "task {} asks for model {model}, but the {preset} preset passes no model to its \
                 command: running it with the command's own",
                self.id,
            );
        }
        let narrowed = preset
            .narrow(
                &command.args,
                task.allowed_tools.as_deref(),
                task.permission_mode.as_deref(),
            )
            .map_err(|why| format!("rejected: {why}"));
        let args = narrowed.and_then(|args| {
            preset.task_args(&args, task.model.as_deref(), task.resume.as_deref())
        });
        match args {
            Ok(args) => {
                let mut c = command.clone();
                c.args = args;
                Ok(c)
            }
            Err(why) => Err(Box::new(TaskResult::failed(
                self.id.clone(),
                Outcome::Rejected,
                why,
            ))),
        }
    }
}

/// `command` with the task's `maxBudgetUsd` passed, where the preset's CLI takes a cap;
/// otherwise as it is (said in the worker's log: the root's and group's daily budgets
/// still count the task's reported cost).
fn with_budget(preset: Preset, command: &AgentCommand, task: &Task, id: &TaskId) -> AgentCommand {
    let mut c = command.clone();
    let Some(max) = task.max_budget_usd else {
        return c;
    };
    match crate::budget::agent_args(preset, &c.args, max) {
        Some(args) => c.args = args,
        None => tracing::warn!(
            "task {id} asks for a budget of {}, but the {preset} preset's command takes no \
             spend cap: running it without one",
            crate::budget::usd(max)
        ),
    }
    c
}
