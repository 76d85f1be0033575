//! Agent presets: sensible command lines per agent, and reading what they print.

use serde_json::Value;

use crate::protocol::TaskResult;
use crate::text::first_line;

mod denials;
mod kind;
mod limits;
mod narrow;
pub use narrow::{claude_mode_rank, gemini_mode_rank, tool_list, GEMINI_APPROVAL_MODES};
use narrow::{narrow_claude, narrow_gemini};
mod stopped;

pub use kind::Preset;
pub use limits::{local_offset_secs, RateLimit, MAX_DEFERRALS};

/// The tools the claude preset lets Claude Code use without asking: edit files and run
/// commands (Bash runs any command, in the task's directory or anywhere the worker's
/// user may go; narrow it with the worker's `--allowed-tools`, e.g. `Read,Edit`).
pub const CLAUDE_ALLOWED_TOOLS: &str = "Bash,Edit,Write,Read,NotebookEdit";

/// The claude preset's permission mode: file edits are accepted without asking (Claude
/// Code 2.1 also knows `auto`, `manual`, `dontAsk`, `plan` and `bypassPermissions`).
pub const CLAUDE_PERMISSION_MODE: &str = "acceptEdits";

impl Preset {
    /// The command line used when `--agent` is not given.
    ///
    /// Claude Code asks before a tool edits a file or runs a command, and in print mode
    /// nobody is there to answer: every Bash/Write call would be refused. As root it also
    /// refuses `--dangerously-skip-permissions`. So the preset accepts edits
    /// (`--permission-mode acceptEdits`) and pre-approves the tools a coding task needs
    /// ([`CLAUDE_ALLOWED_TOOLS`]); the worker's `--allowed-tools` / `--permission-mode`
    /// narrow that ([`Preset::command_line`]).
    pub fn default_command(self) -> &'static str {
        match self {
            // Claude Code refuses stream-json in print mode without --verbose.
            Preset::Claude => {
                "claude -p --output-format stream-json --verbose \
                 --permission-mode acceptEdits --allowedTools Bash,Edit,Write,Read,NotebookEdit"
            }
            // `codex exec` is read-only by default: workspace-write lets it edit the task's
            // directory and run commands there (its own sandbox); --json streams events.
            Preset::Codex => "codex exec --json --sandbox workspace-write --skip-git-repo-check -",
            // Without a prompt argument and with stdin not a terminal, gemini reads the
            // prompt from stdin and runs headless. It asks before every tool call unless
            // approvals are off (`yolo`), and in a folder it was never told to trust it
            // turns them back on: --skip-trust trusts the task's directory for the run.
            Preset::Gemini => {
                "gemini --output-format stream-json --approval-mode yolo --skip-trust"
            }
            Preset::Command => "claude -p",
        }
    }

    /// The preset's command line with the tools it may use unattended and its
    /// permission mode replaced (claude preset: `--allowedTools`, `--permission-mode`;
    /// an empty tool list pre-approves none). Err: the preset has no such settings.
    pub fn command_line(
        self,
        allowed_tools: Option<&str>,
        permission_mode: Option<&str>,
    ) -> std::result::Result<String, String> {
        if allowed_tools.is_none() && permission_mode.is_none() {
            return Ok(self.default_command().to_string());
        }
        if self == Preset::Gemini && allowed_tools.is_none() {
            // Gemini's own word for it: --approval-mode default|auto_edit|yolo|plan.
            let mode = permission_mode.unwrap_or_default();
            if !GEMINI_APPROVAL_MODES.contains(&mode) {
                return Err(format!(
                    "{mode:?} is not a gemini approval mode (one of {})",
                    GEMINI_APPROVAL_MODES.join(", ")
                ));
            }
            return Ok(format!(
                "gemini --output-format stream-json --approval-mode {mode} --skip-trust"
            ));
        }
        if self != Preset::Claude {
            return Err(format!(
                "--allowed-tools and --permission-mode are settings of the claude preset, \
                 not of {self} (the gemini preset takes --permission-mode as its \
                 --approval-mode)"
            ));
        }
        let tools: Vec<&str> = allowed_tools
            .unwrap_or(CLAUDE_ALLOWED_TOOLS)
            .split([',', ' '])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        let mode = permission_mode.unwrap_or(CLAUDE_PERMISSION_MODE);
        if mode.is_empty() || mode.contains(char::is_whitespace) {
            return Err(format!("{mode:?} is not a permission mode"));
        }
        let mut line =
            format!("claude -p --output-format stream-json --verbose --permission-mode {mode}");
        if !tools.is_empty() {
            line.push_str(" --allowedTools ");
            line.push_str(&tools.join(","));
        }
        Ok(line)
    }

    /// The agent's arguments for one task: the worker's `args` with the task's model
    /// (`claude --model M`, `codex -m M`, `gemini -m M`) and, when it continues session
    /// `resume` (`conductor retry --resume`), what continues it (`claude --resume ID`,
    /// `codex exec resume ID -`, `gemini --resume ID`). The command preset takes no model:
    /// `model` is left out (the caller warns). Err: this preset cannot resume a session.
    pub fn task_args(
        self,
        args: &[String],
        model: Option<&str>,
        resume: Option<&str>,
    ) -> std::result::Result<Vec<String>, String> {
        let mut args = args.to_vec();
        if let Some(id) = resume {
            match self {
                Preset::Claude => args.extend(["--resume".into(), id.into()]),
                // `codex exec [OPTIONS] resume ID [PROMPT]`: before the `-` that says the
                // prompt is on stdin, which then becomes resume's prompt.
                Preset::Codex => {
                    let at = match args.last().map(String::as_str) {
                        Some("-") => args.len() - 1,
                        _ => {
                            args.push("-".into());
                            args.len() - 1
                        }
                    };
                    args.splice(at..at, ["resume".to_string(), id.to_string()]);
                }
                // Gemini CLI 0.61 takes a session's UUID as well as an index or `latest`
                // (`--resume {uuid}`); it looks the session up among the sessions of the
                // directory it runs in, which a retry shares with the task it retries.
                Preset::Gemini => args.extend(["--resume".into(), id.into()]),
                Preset::Command => {
                    return Err(format!(
                        "task asks to resume session {id}, but the {self} preset cannot resume"
                    ))
                }
            }
        }
        if let Some(m) = model {
            let flag = match self {
                Preset::Claude => "--model",
                Preset::Codex | Preset::Gemini => "-m",
                Preset::Command => return Ok(args),
            };
            // Options go before codex's `-` / `resume` (its subcommand's own are the same).
            let at = match self {
                Preset::Codex => args
                    .iter()
                    .position(|a| a == "-" || a == "resume")
                    .unwrap_or(args.len()),
                _ => args.len(),
            };
            args.splice(at..at, [flag.to_string(), m.to_string()]);
        }
        Ok(args)
    }

    /// The worker's agent arguments narrowed to what a task allows itself: its
    /// `allowedTools` and `permissionMode` (see [`crate::Task::allowed_tools`]). A task
    /// narrows, never widens: each tool it names must be one the worker pre-approves
    /// (or a rule within one, `Bash(git *)` within `Bash`), and the worker's tools it
    /// leaves out are denied to its agent (claude `--disallowedTools`, so a permission
    /// mode that accepts edits cannot hand them back); its mode must let no more run
    /// unattended than the worker's (claude: `plan` < `default`/`manual`/`dontAsk` <
    /// `acceptEdits` < `auto` < `bypassPermissions`; gemini: `plan` < `default` <
    /// `auto_edit` < `yolo`). Err: the refusal, naming the task's field.
    pub fn narrow(
        self,
        args: &[String],
        tools: Option<&[String]>,
        mode: Option<&str>,
    ) -> std::result::Result<Vec<String>, String> {
        if tools.is_none() && mode.is_none() {
            return Ok(args.to_vec());
        }
        match self {
            Preset::Claude => narrow_claude(args, tools, mode),
            Preset::Gemini => {
                if tools.is_some() {
                    return Err("allowedTools: the gemini preset takes no list of tools \
                                (gemini's own is deprecated); narrow its approval mode \
                                with permissionMode instead"
                        .into());
                }
                narrow_gemini(args, mode.unwrap_or_default())
            }
            Preset::Codex | Preset::Command => Err(format!(
                "{}: the {self} preset has no {} a task could narrow (only the claude \
                 preset's tools and the claude and gemini presets' modes)",
                if tools.is_some() {
                    "allowedTools"
                } else {
                    "permissionMode"
                },
                if tools.is_some() {
                    "tools"
                } else {
                    "permission mode"
                },
            )),
        }
    }

    /// Whether the preset passes a task's `model` to its agent.
    pub fn takes_model(self) -> bool {
        self != Preset::Command
    }

    /// Whether stdout is read as Claude Code's event stream: one JSON object a line,
    /// rendered readable in the live log, the raw lines kept in `tasks/<id>.jsonl`.
    /// (`--output-format json` prints the final event alone, so it reads the same.)
    /// Codex's `--json` events are read the same way (their types differ from Claude's).
    pub fn streams(self) -> bool {
        matches!(self, Preset::Claude | Preset::Codex | Preset::Gemini)
    }

    /// Lift what the agent printed into the result's fields.
    pub fn interpret(self, result: &mut TaskResult) {
        match self {
            Preset::Claude => interpret_claude(result),
            Preset::Codex => interpret_codex(result),
            Preset::Gemini => interpret_gemini(result),
            Preset::Command => {}
        }
    }
}

/// The worker hands over the final `result` event of a stream (see
/// [`crate::agent::stream`]) or, when there was none, stdout as printed;
/// `claude -p --output-format json` prints that one event alone:
/// `{"type":"result","subtype":"success","is_error":false,"result":"…","session_id":"…",
///   "num_turns":3,"total_cost_usd":0.01,"usage":{"input_tokens":…,"output_tokens":…},
///   "api_error_status":null,…}` (older versions: `cost_usd`). Anything else is left
/// untouched: the raw stdout stays the output.
///
/// An error result is the task's failure reason, whatever the exit code: Claude Code
/// exits 1 after giving up on the API, and its `result` then holds the provider's message
/// ("API Error: 529 Overloaded …"), which says more than its first stderr line. A 401
/// says how to log in. A task stopped by conductor (timeout, cancel) keeps that reason.
fn interpret_claude(r: &mut TaskResult) {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(r.output.trim()) else {
        return;
    };
    if obj.get("type").and_then(Value::as_str) != Some("result") {
        return;
    }
    r.session_id = obj
        .get("session_id")
        .and_then(Value::as_str)
        .map(String::from);
    r.cost_usd = obj
        .get("total_cost_usd")
        .or_else(|| obj.get("cost_usd"))
        .and_then(Value::as_f64);
    r.num_turns = obj.get("num_turns").and_then(Value::as_u64);
    r.denials = denials::from_final_event(&obj);
    if let Some(usage) = obj.get("usage") {
        let tokens = |k: &str| usage.get(k).and_then(Value::as_u64);
        r.input_tokens = tokens("input_tokens").map(|n| {
            n + tokens("cache_creation_input_tokens").unwrap_or(0)
                + tokens("cache_read_input_tokens").unwrap_or(0)
        });
        r.output_tokens = tokens("output_tokens");
    }
    let is_error = obj
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    r.is_error = Some(is_error);
    let text = obj.get("result").and_then(Value::as_str).map(String::from);
    let agent_failed = r.success || r.outcome == Some(crate::protocol::Outcome::Failure);
    if is_error && agent_failed {
        // Claude Code 2.1 says `"subtype":"success"` with `is_error` after an API error;
        // `terminal_reason` then names it.
        let subtype = obj
            .get("subtype")
            .and_then(Value::as_str)
            .filter(|s| *s != "success")
            .or_else(|| obj.get("terminal_reason").and_then(Value::as_str))
            .unwrap_or("error");
        let detail = text.as_deref().map(first_line).unwrap_or(subtype);
        let status = obj.get("api_error_status").and_then(Value::as_u64);
        r.success = false;
        r.outcome = Some(crate::protocol::Outcome::Failure);
        r.error = Some(match status {
            Some(401) => format!(
                "not logged in / invalid API key — run `claude login` or set \
                 ANTHROPIC_API_KEY (claude: {detail})"
            ),
            Some(code) => format!("claude reported an error ({subtype}, HTTP {code}): {detail}"),
            None => format!("claude reported an error ({subtype}): {detail}"),
        });
    }
    if let Some(t) = text {
        r.output = t;
    }
}

/// `codex exec --json` prints events one a line: `{"type":"thread.started","thread_id"}`,
/// `{"type":"item.completed","item":{"type":"agent_message","text"}}` (and other items),
/// `{"type":"turn.completed","usage":{"input_tokens","cached_input_tokens",
/// "output_tokens"}}`, `{"type":"turn.failed","error":{"message"}}`, `{"type":"error",
/// "message"}`. With no final event of its own, the worker hands over stdout as printed:
/// the last agent message becomes the output, the thread the session; a failed turn is
/// the failure reason (a 401 says how to log in). Output without a `thread.started`
/// event is left as it is.
fn interpret_codex(r: &mut TaskResult) {
    let events: Vec<serde_json::Map<String, Value>> = r
        .output
        .lines()
        .filter_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        .collect();
    let kind = |e: &serde_json::Map<String, Value>| {
        e.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let Some(thread) = events
        .iter()
        .find(|e| kind(e) == "thread.started")
        .and_then(|e| e.get("thread_id").and_then(Value::as_str))
    else {
        return;
    };
    r.session_id = Some(thread.to_string());
    r.denials = denials::from_codex_events(&events);
    let mut answer = None;
    let mut failed = None;
    let (mut input, mut output, mut turns) = (0, 0, 0);
    for e in &events {
        match kind(e).as_str() {
            "item.completed" => {
                let item = e.get("item");
                if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message")
                {
                    answer = item
                        .and_then(|i| i.get("text"))
                        .and_then(Value::as_str)
                        .map(String::from);
                }
            }
            "turn.completed" => {
                turns += 1;
                let usage = e.get("usage");
                let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
                input += n("input_tokens").unwrap_or(0);
                output += n("output_tokens").unwrap_or(0);
            }
            "turn.failed" => {
                failed = e
                    .get("error")
                    .and_then(|x| x.get("message"))
                    .and_then(Value::as_str)
                    .map(String::from);
            }
            _ => {}
        }
    }
    if turns > 0 {
        r.input_tokens = Some(input);
        r.output_tokens = Some(output);
    }
    r.is_error = Some(failed.is_some());
    let agent_failed = r.success || r.outcome == Some(crate::protocol::Outcome::Failure);
    if let (Some(why), true) = (&failed, agent_failed) {
        let why = first_line(why);
        r.success = false;
        r.outcome = Some(crate::protocol::Outcome::Failure);
        r.error = Some(if why.contains("401 Unauthorized") {
            format!(
                "not logged in / invalid API key — run `codex login` or set OPENAI_API_KEY \
                 (codex: {why})"
            )
        } else {
            format!("codex reported an error: {why}")
        });
    }
    r.output = answer.or(failed).unwrap_or_default();
}

/// Gemini CLI's final event, as the worker hands it over (see
/// [`crate::agent::stream`]): `{"type":"result","status":"success"|"error",
/// "error":{"type","message"},"stats":{"input_tokens","output_tokens","tool_calls",…},
/// "response":"<the answer>","session_id":"…"}` (`response` and `session_id` added by
/// conductor from the stream), or `--output-format json`'s one object
/// `{"session_id","response","stats","error"}`. With no such event (gemini stopped
/// early), the raw stream: its `init` event names the session. An error is the failure
/// reason; a rejected key (HTTP 401, `UNAUTHENTICATED`, "API key not valid") says how to
/// set one.
fn interpret_gemini(r: &mut TaskResult) {
    let events: Vec<serde_json::Map<String, Value>> = r
        .output
        .lines()
        .filter_map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        .collect();
    let kind = |e: &serde_json::Map<String, Value>| {
        e.get("type").and_then(Value::as_str) == Some("result")
    };
    let last = events.iter().rev().find(|e| kind(e)).or_else(|| {
        // `--output-format json`: one object, no type.
        match events.as_slice() {
            [one] if one.contains_key("response") && !one.contains_key("type") => Some(one),
            _ => None,
        }
    });
    let init_session = events
        .iter()
        .find(|e| e.get("type").and_then(Value::as_str) == Some("init"))
        .and_then(|e| e.get("session_id").and_then(Value::as_str));
    let Some(last) = last else {
        if let Some(s) = init_session {
            r.session_id = Some(s.to_string());
        }
        return;
    };
    r.session_id = last
        .get("session_id")
        .and_then(Value::as_str)
        .or(init_session)
        .map(String::from);
    r.denials = denials::from_final_event(last);
    if let Some(stats) = last.get("stats") {
        let n = |k: &str| stats.get(k).and_then(Value::as_u64);
        r.input_tokens = n("input_tokens");
        r.output_tokens = n("output_tokens");
    }
    let why = last
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(String::from);
    let failed = last.get("status").and_then(Value::as_str) == Some("error") || why.is_some();
    r.is_error = Some(failed);
    let agent_failed = r.success || r.outcome == Some(crate::protocol::Outcome::Failure);
    if failed && agent_failed {
        let why = why.as_deref().map(first_line).unwrap_or("error");
        let rejected_key = why.contains("\"code\":401")
            || why.contains("UNAUTHENTICATED")
            || why.contains("API key not valid")
            || why.contains("API_KEY_INVALID");
        r.success = false;
        r.outcome = Some(crate::protocol::Outcome::Failure);
        r.error = Some(if rejected_key {
            format!(
                "not logged in / invalid API key — set GEMINI_API_KEY, or run `gemini` \
                 once and log in (gemini: {why})"
            )
        } else {
            format!("gemini reported an error: {why}")
        });
    }
    let answer = last
        .get("response")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty());
    r.output = match (answer, why) {
        (Some(a), _) => a.to_string(),
        (None, Some(w)) => w,
        (None, None) => String::new(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, TaskId};

    fn ok(output: &str) -> TaskResult {
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.output = output.into();
        r
    }

    #[test]
    fn claude_json_is_lifted_into_the_result() {
        let mut r = ok(
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1200,
            "num_turns":3,"result":"All tests pass.","session_id":"abc-123","total_cost_usd":0.0123}"#,
        );
        Preset::Claude.interpret(&mut r);
        assert_eq!(r.output, "All tests pass.");
        assert_eq!(r.session_id.as_deref(), Some("abc-123"));
        assert_eq!(r.cost_usd, Some(0.0123));
        assert_eq!(r.num_turns, Some(3));
        assert_eq!(r.is_error, Some(false));
        assert!(r.success);
    }

    #[test]
    fn claude_error_results_fail_the_task() {
        let mut r = ok(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"cost_usd":0.5,"session_id":"s"}"#,
        );
        Preset::Claude.interpret(&mut r);
        assert!(!r.success);
        assert_eq!(r.cost_usd, Some(0.5));
        assert_eq!(
            r.error.as_deref(),
            Some("claude reported an error (error_max_turns): error_max_turns")
        );
    }

    #[test]
    fn an_api_error_is_the_reason_even_when_claude_exits_non_zero() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":529,"result":"API Error: 529 Overloaded: try again","session_id":"s","num_turns":1,"usage":{"input_tokens":0,"output_tokens":0}}"#;
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "stderr: noise");
        r.output = line.into();
        Preset::Claude.interpret(&mut r);
        assert!(!r.success);
        assert_eq!(
            r.error.as_deref(),
            Some("claude reported an error (api_error, HTTP 529): API Error: 529 Overloaded: try again")
        );
        assert_eq!(r.output, "API Error: 529 Overloaded: try again");

        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "exit 1");
        r.output = line.replace("529", "401");
        Preset::Claude.interpret(&mut r);
        assert!(r.error.as_deref().unwrap().starts_with(
            "not logged in / invalid API key — run `claude login` or set ANTHROPIC_API_KEY"
        ));

        // A task conductor stopped keeps its own reason.
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Timeout, "timed out after 5s");
        r.output = line.into();
        Preset::Claude.interpret(&mut r);
        assert_eq!(r.error.as_deref(), Some("timed out after 5s"));
    }

    #[test]
    fn tokens_count_cache_reads_and_writes_as_input() {
        let mut r = ok(
            r#"{"type":"result","is_error":false,"result":"x","usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":7}}"#,
        );
        Preset::Claude.interpret(&mut r);
        assert_eq!((r.input_tokens, r.output_tokens), (Some(115), Some(7)));
    }

    #[test]
    fn the_claude_command_line_can_be_narrowed() {
        assert_eq!(
            Preset::Claude.command_line(None, None).unwrap(),
            Preset::Claude.default_command()
        );
        assert_eq!(
            Preset::Claude.default_command(),
            format!(
                "claude -p --output-format stream-json --verbose --permission-mode \
                 {CLAUDE_PERMISSION_MODE} --allowedTools {CLAUDE_ALLOWED_TOOLS}"
            )
        );
        assert_eq!(
            Preset::Claude
                .command_line(Some("Read, Edit"), None)
                .unwrap(),
            "claude -p --output-format stream-json --verbose --permission-mode acceptEdits \
             --allowedTools Read,Edit"
        );
        assert_eq!(
            Preset::Claude.command_line(Some(""), Some("plan")).unwrap(),
            "claude -p --output-format stream-json --verbose --permission-mode plan"
        );
        assert!(Preset::Claude.command_line(None, Some("a b")).is_err());
        assert!(Preset::Codex.command_line(Some("Read"), None).is_err());
        assert_eq!(
            Preset::Codex.command_line(None, None).unwrap(),
            Preset::Codex.default_command()
        );
    }

    #[test]
    fn codex_events_are_lifted_into_the_result() {
        let mut r = ok(concat!(
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"Running."}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"type":"agent_message","text":"Done."}}"#,
            "\n",
            r#"{"type":"turn.completed","usage":{"input_tokens":50,"output_tokens":20}}"#,
        ));
        Preset::Codex.interpret(&mut r);
        assert!(r.success);
        assert_eq!(r.output, "Done.");
        assert_eq!(r.session_id.as_deref(), Some("th-1"));
        assert_eq!((r.input_tokens, r.output_tokens), (Some(50), Some(20)));

        let failed = concat!(
            r#"{"type":"thread.started","thread_id":"th-2"}"#,
            "\n",
            r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: bad key"}}"#,
        );
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "exit 1");
        r.output = failed.into();
        Preset::Codex.interpret(&mut r);
        assert!(r.error.as_deref().unwrap().starts_with(
            "not logged in / invalid API key — run `codex login` or set OPENAI_API_KEY"
        ));
        let mut r = ok("plain words");
        Preset::Codex.interpret(&mut r);
        assert_eq!((r.output.as_str(), r.session_id), ("plain words", None));
    }

    #[test]
    fn gemini_results_are_lifted_and_its_errors_are_the_reason() {
        let mut r = ok(
            r#"{"type":"result","status":"success","stats":{"input_tokens":325,"output_tokens":50,"tool_calls":1},"response":"Gemini done.","session_id":"g-1"}"#,
        );
        Preset::Gemini.interpret(&mut r);
        assert!(r.success);
        assert_eq!(r.output, "Gemini done.");
        assert_eq!(r.session_id.as_deref(), Some("g-1"));
        assert_eq!((r.input_tokens, r.output_tokens), (Some(325), Some(50)));
        assert_eq!(r.is_error, Some(false));

        let failed = r#"{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: the provider is down]"},"stats":{"input_tokens":0,"output_tokens":0},"response":"","session_id":"g-2"}"#;
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "exit 1");
        r.output = failed.into();
        Preset::Gemini.interpret(&mut r);
        assert_eq!(
            r.error.as_deref(),
            Some("gemini reported an error: [API Error: the provider is down]")
        );
        assert_eq!(r.output, "[API Error: the provider is down]");
        assert_eq!(r.session_id.as_deref(), Some("g-2"));

        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "exit 1");
        r.output = failed.replace(
            "the provider is down",
            r#"{\"error\":{\"code\":401,\"message\":\"API key not valid.\"}}"#,
        );
        Preset::Gemini.interpret(&mut r);
        assert!(
            r.error
                .as_deref()
                .unwrap()
                .starts_with("not logged in / invalid API key — set GEMINI_API_KEY"),
            "{:?}",
            r.error
        );

        // Stopped before its result: the session from `init`, the output as it was.
        let raw = r#"{"type":"init","session_id":"g-3","model":"m"}"#;
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Cancelled, "cancelled");
        r.output = raw.into();
        Preset::Gemini.interpret(&mut r);
        assert_eq!(r.session_id.as_deref(), Some("g-3"));
        assert_eq!(r.error.as_deref(), Some("cancelled"));
        assert_eq!(r.output, raw);
    }

    #[test]
    fn a_task_adds_its_model_and_the_session_it_resumes() {
        let words =
            |line: &str| -> Vec<String> { line.split(' ').skip(1).map(String::from).collect() };
        let claude = words(Preset::Claude.default_command());
        let got = Preset::Claude
            .task_args(&claude, Some("opus"), Some("s-1"))
            .unwrap();
        assert_eq!(got[claude.len()..], ["--resume", "s-1", "--model", "opus"]);
        let codex = words(Preset::Codex.default_command());
        assert_eq!(
            Preset::Codex
                .task_args(&codex, Some("o3"), Some("th-1"))
                .unwrap()
                .join(" "),
            "exec --json --sandbox workspace-write --skip-git-repo-check -m o3 resume th-1 -"
        );
        assert_eq!(
            Preset::Codex
                .task_args(&codex, Some("o3"), None)
                .unwrap()
                .join(" "),
            "exec --json --sandbox workspace-write --skip-git-repo-check -m o3 -"
        );
        let gemini = words(Preset::Gemini.default_command());
        assert_eq!(
            Preset::Gemini
                .task_args(&gemini, Some("gemini-2.5-pro"), None)
                .unwrap()[gemini.len()..],
            ["-m", "gemini-2.5-pro"]
        );
        assert_eq!(
            Preset::Gemini
                .task_args(&gemini, None, Some("g-1"))
                .unwrap()[gemini.len()..],
            ["--resume", "g-1"]
        );
        let cat = vec!["-u".to_string()];
        assert_eq!(
            Preset::Command.task_args(&cat, Some("x"), None).unwrap(),
            cat
        );
        assert!(!Preset::Command.takes_model());
        assert!(Preset::Command.task_args(&cat, None, Some("s")).is_err());
    }

    #[test]
    fn a_task_narrows_its_workers_tools_and_mode_but_never_widens_them() {
        let words =
            |line: &str| -> Vec<String> { line.split(' ').skip(1).map(String::from).collect() };
        let tools = |t: &[&str]| -> Vec<String> { t.iter().map(|s| s.to_string()).collect() };
        let claude = words(Preset::Claude.default_command());
        let got = Preset::Claude
            .narrow(
                &claude,
                Some(&tools(&["Read", "Bash(git *)"])),
                Some("dontAsk"),
            )
            .unwrap();
        assert_eq!(
            got.join(" "),
            "-p --output-format stream-json --verbose --allowedTools Read,Bash(git *) \
             --disallowedTools Edit,Write,NotebookEdit --permission-mode dontAsk"
        );
        // No tools at all: every one the worker pre-approved is denied.
        let none = Preset::Claude.narrow(&claude, Some(&[]), None).unwrap();
        assert!(!none.iter().any(|a| a == "--allowedTools"), "{none:?}");
        assert_eq!(
            none[none.len() - 2..],
            ["--disallowedTools", CLAUDE_ALLOWED_TOOLS]
        );
        assert!(none.contains(&"acceptEdits".to_string()));
        // Widening is refused, naming the field.
        let narrow = words(
            &Preset::Claude
                .command_line(Some("Read"), Some("plan"))
                .unwrap(),
        );
        let e = Preset::Claude
            .narrow(&narrow, Some(&tools(&["Bash"])), None)
            .unwrap_err();
        assert!(e.starts_with("allowedTools: Bash is not among"), "{e}");
        assert!(e.contains("(Read)"), "{e}");
        let e = Preset::Claude
            .narrow(&narrow, None, Some("acceptEdits"))
            .unwrap_err();
        assert!(
            e.starts_with("permissionMode: acceptEdits lets the agent do more"),
            "{e}"
        );
        let e = Preset::Claude
            .narrow(&claude, None, Some("sometimes"))
            .unwrap_err();
        assert!(e.contains("not a Claude Code permission mode"), "{e}");
        // A worker that names no mode runs Claude's default.
        let bare = tools(&["-p", "--allowedTools", "Read", "Edit"]);
        assert!(Preset::Claude
            .narrow(&bare, None, Some("acceptEdits"))
            .is_err());
        assert_eq!(
            Preset::Claude
                .narrow(&bare, Some(&tools(&["Edit"])), Some("plan"))
                .unwrap()
                .join(" "),
            "-p --allowedTools Edit --disallowedTools Read --permission-mode plan"
        );
        // Gemini: its approval mode, never a tool list.
        let gemini = words(Preset::Gemini.default_command());
        assert_eq!(
            Preset::Gemini
                .narrow(&gemini, None, Some("plan"))
                .unwrap()
                .join(" "),
            "--output-format stream-json --skip-trust --approval-mode plan"
        );
        let auto_edit = words(
            &Preset::Gemini
                .command_line(None, Some("auto_edit"))
                .unwrap(),
        );
        assert!(Preset::Gemini
            .narrow(&auto_edit, None, Some("yolo"))
            .is_err());
        assert!(Preset::Gemini
            .narrow(&gemini, Some(&tools(&["x"])), None)
            .unwrap_err()
            .starts_with("allowedTools: "));
        let e = Preset::Codex
            .narrow(&words(Preset::Codex.default_command()), None, Some("plan"))
            .unwrap_err();
        assert!(e.starts_with("permissionMode: the codex preset"), "{e}");
        assert_eq!(Preset::Codex.narrow(&claude, None, None).unwrap(), claude);
    }

    #[test]
    fn the_gemini_approval_mode_is_the_workers_permission_mode() {
        assert_eq!(
            Preset::Gemini
                .command_line(None, Some("auto_edit"))
                .unwrap(),
            "gemini --output-format stream-json --approval-mode auto_edit --skip-trust"
        );
        assert!(Preset::Gemini.command_line(None, Some("dontAsk")).is_err());
        assert!(Preset::Gemini.command_line(Some("Read"), None).is_err());
        assert!("gemini".parse::<Preset>().unwrap() == Preset::Gemini);
    }

    #[test]
    fn other_output_is_left_alone() {
        for text in ["plain text", "[1,2]", r#"{"type":"assistant"}"#] {
            let mut r = ok(text);
            Preset::Claude.interpret(&mut r);
            assert_eq!(r.output, text);
            assert_eq!(r.session_id, None);
        }
    }
}
