//! What a task asks for over MCP, described once: the fields `submit` and `send` share.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rmcp::schemars;
use serde::Deserialize;
use serde_json::Value;

use super::super::checks;
use super::IdArg;
use crate::{Error, Task};

/// The fields of a task that both `submit` and `send` take (each tool flattens them into
/// its arguments), so that each is described once.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskArgs {
    /// The whole prompt the agent is given: say what to do and what to report.
    #[schemars(length(min = 1))]
    pub prompt: String,
    /// A task id of your choosing (letters, digits, . _ -; unique on the root).
    /// Default: generated.
    pub id: Option<IdArg>,
    /// The task's own time limit in seconds; its agent is stopped after it.
    pub timeout_secs: Option<u64>,
    /// Absolute path of an existing directory for the agent to work in (default: the
    /// worker's project directory).
    pub dir: Option<PathBuf>,
    /// Any JSON, handed to the agent as the CONDUCTOR_CONTEXT environment variable.
    pub context: Option<Value>,
    /// The agent preset that must run it (`claude`, `codex`, `command`): only a worker
    /// serving that preset takes it (a slot's worker refuses a preset it does not
    /// serve). Default: any worker's first preset.
    pub agent: Option<String>,
    /// The model the agent uses for this task (the claude, codex and gemini presets pass
    /// it on; a plain command ignores it).
    pub model: Option<String>,
    /// Narrow the tools the worker lets its agent use unattended to these (claude
    /// preset; `[]`: none, e.g. `["Read"]` for a read-only task): each must be one the
    /// worker allows, and the worker's others are denied to this task's agent. Asking
    /// for a tool the worker does not allow gets the task rejected.
    pub allowed_tools: Option<Vec<String>>,
    /// Narrow the worker's permission mode (claude preset: `plan`, `dontAsk`,
    /// `acceptEdits`…) or approval mode (gemini: `plan`, `default`, `auto_edit`) for this
    /// task; one letting the agent do more than the worker's gets the task rejected.
    pub permission_mode: Option<String>,
    /// Extra environment variables for the agent, as {"NAME": "value"} (names of
    /// letters, digits and _; CONDUCTOR_* names are refused).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Labels to find the task by later (`tasks` with `labels`): 1-64 characters of
    /// A-Z a-z 0-9 . _ - : / each.
    #[serde(default)]
    pub labels: Vec<String>,
    /// The most this task may spend, in USD: passed to Claude Code as
    /// `--max-budget-usd` (other presets take no cap and run without one). The root's
    /// and groups' daily budgets are config.json's `dailyBudgetUsd` and the group's.
    pub max_budget_usd: Option<f64>,
    /// A check command (`sh -c`) run in the task's worktree after its agent ends; while
    /// it fails, the same session continues with the check's output as its next prompt,
    /// up to untilRounds rounds. The result then says `rounds` and `check`.
    pub until: Option<String>,
    /// With until: at most this many rounds in all (default 3, at most 20).
    #[schemars(range(min = 1, max = 20))]
    pub until_rounds: Option<u32>,
}

impl TaskArgs {
    /// The task these fields describe (the caller adds its own fields, then validates).
    pub(super) fn into_task(self) -> std::result::Result<Task, String> {
        checks::prompt("prompt", &self.prompt)?;
        if let Some(m) = &self.permission_mode {
            checks::permission_mode(self.agent.as_deref(), m)?;
        }
        let mut task = Task::new(self.prompt);
        task.id = self.id.as_ref().map(IdArg::id).transpose()?;
        task.timeout_secs = self.timeout_secs;
        task.context = self.context;
        task.dir = self.dir.map(absolute).transpose()?;
        task.agent = self.agent.map(preset_name).transpose()?;
        task.model = self.model;
        task.allowed_tools = self.allowed_tools;
        task.permission_mode = self.permission_mode;
        task.env = self.env;
        task.labels = self.labels;
        task.max_budget_usd = self.max_budget_usd;
        if self.until_rounds.is_some() && self.until.is_none() {
            return Err("`untilRounds` needs `until`, the check to run".into());
        }
        task.until = self.until.map(|check| crate::protocol::Until {
            check,
            rounds: self.until_rounds,
        });
        Ok(task)
    }
}

/// A preset name, checked (`claude`, `codex`, `command`).
fn preset_name(name: String) -> std::result::Result<String, String> {
    name.parse::<crate::preset::Preset>()
        .map(|p| p.to_string())
        .map_err(|e| e.to_string())
}

/// A `dir` made absolute against the server's directory, as the CLI does.
fn absolute(dir: PathBuf) -> std::result::Result<PathBuf, String> {
    std::path::absolute(&dir).map_err(|e| {
        Error::BadTaskDir {
            path: dir,
            reason: e.to_string(),
        }
        .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::super::create::{SendArgs, SubmitArgs};
    use serde_json::json;

    fn properties<T: rmcp::schemars::JsonSchema>() -> serde_json::Value {
        let schema = rmcp::schemars::schema_for!(T);
        serde_json::to_value(&schema).unwrap()
    }

    /// `submit` and `send` take the task's fields from one struct: each field is in both
    /// schemas, described the same, and unknown fields are still refused.
    #[test]
    fn submit_and_send_describe_a_tasks_fields_once() {
        let submit = properties::<SubmitArgs>();
        let send = properties::<SendArgs>();
        for field in [
            "prompt",
            "id",
            "timeoutSecs",
            "dir",
            "context",
            "agent",
            "model",
            "allowedTools",
            "permissionMode",
            "env",
            "labels",
        ] {
            let a = &submit["properties"][field];
            assert!(
                a["description"].is_string(),
                "submit lacks {field}: {submit}"
            );
            assert_eq!(a, &send["properties"][field], "{field} differs");
        }
        assert_eq!(submit["required"], json!(["prompt"]));
        assert_eq!(send["required"], json!(["slot", "prompt"]));
        assert!(send["properties"]["key"].is_null(), "send takes no key");
        for schema in [&submit, &send] {
            assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
        }

        let sent: SendArgs =
            serde_json::from_value(json!({"slot": 1, "prompt": "hi", "timeoutSecs": 5})).unwrap();
        assert_eq!((sent.slot, sent.task.timeout_secs), (1, Some(5)));
        let submitted: SubmitArgs =
            serde_json::from_value(json!({"prompt": "hi", "key": "k", "labels": ["a"]})).unwrap();
        assert_eq!(submitted.task.labels, ["a"]);
        assert_eq!(submitted.key.as_deref(), Some("k"));
        for bad in [
            json!({"slot": 1, "prompt": "hi", "key": "k"}),
            json!({"slot": 1, "prompt": "hi", "bogus": 1}),
        ] {
            let err = serde_json::from_value::<SendArgs>(bad).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{err}");
        }
    }
}
