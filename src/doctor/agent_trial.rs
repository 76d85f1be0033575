//! `doctor --agent [PRESET]`: does the agent work, before any task is sent? The preset's
//! command runs once, as a worker would run it (same spawn, same reading of its output),
//! with a trivial prompt, in a temporary directory, against whatever endpoint its
//! environment names; what it says is read the way a task's result is (`Preset::interpret`,
//! `Preset::rate_limit`) and nothing of it is kept.

use std::time::{Duration, Instant};

use crate::agent::{Agent, AgentCommand, AgentOutput, Launch};
use crate::layout::Root;
use crate::preset::Preset;
use crate::protocol::{Outcome, Status, TaskId, TaskResult};

use super::check::Check;

/// How long the trial run may take: an agent that answers a one-word prompt takes
/// seconds; one still retrying an API it cannot reach after this is reported so.
pub const TRIAL_TIMEOUT: Duration = Duration::from_secs(60);

/// What the trial asks.
const PROMPT: &str = "Reply with the single word: ok";

/// How long a stopped trial gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The presets the root's live workers serve (from their `status.json`, each once, in
/// slot order); empty when no live worker says.
pub fn served_presets(root: &Root) -> Vec<Preset> {
    let mut found = Vec::new();
    for slot in root.slots().unwrap_or_default() {
        if !crate::wait::slot_served(root, slot).unwrap_or(false) {
            continue;
        }
        let Ok(Some(status)) = Status::read(&root.worker(slot).status()) else {
            continue;
        };
        for name in &status.presets {
            if let Ok(p) = name.parse::<Preset>() {
                if !found.contains(&p) {
                    found.push(p);
                }
            }
        }
    }
    found
}

/// How to install the agent a preset runs.
fn install_hint(preset: Preset) -> &'static str {
    match preset {
        Preset::Claude => "install Claude Code (`npm install -g @anthropic-ai/claude-code`) so `claude` is on PATH",
        Preset::Codex => "install Codex (`npm install -g @openai/codex`) so `codex` is on PATH",
        Preset::Gemini => "install Gemini CLI (`npm install -g @google/gemini-cli`) so `gemini` is on PATH",
        _ => "install the agent, or give workers another agent command",
    }
}

/// How to give a preset's agent working credentials.
fn login_hint(preset: Preset) -> &'static str {
    match preset {
        Preset::Claude => "run `claude login` or set ANTHROPIC_API_KEY",
        Preset::Codex => "run `codex login` or set OPENAI_API_KEY",
        Preset::Gemini => "set GEMINI_API_KEY, or run `gemini` once and log in",
        _ => "log the agent in",
    }
}

/// Where a preset's agent is told which API to use.
fn endpoint_hint(preset: Preset) -> &'static str {
    match preset {
        Preset::Claude => "check the network, a proxy, and ANTHROPIC_BASE_URL if set",
        Preset::Codex => "check the network, a proxy, and the provider's base_url in ~/.codex/config.toml or OPENAI_BASE_URL",
        Preset::Gemini => "check the network, a proxy, and GOOGLE_GEMINI_BASE_URL if set",
        _ => "check the network and the agent's configuration",
    }
}

/// Run `preset`'s agent once with a trivial prompt (at most `timeout`) and say whether
/// it works: ok, not installed, invalid key, rate-limited until a time, cannot reach its
/// API, or its own error.
pub fn try_agent(preset: Preset, timeout: Duration) -> Check {
    let name = format!("agent {preset}");
    let line = preset.default_command();
    let command = match AgentCommand::parse(line) {
        Ok(c) => c,
        Err(e) => return Check::fail(&name, e.to_string(), install_hint(preset)),
    };
    let program = match command.locate() {
        Ok(p) => p,
        Err(e) => return Check::fail(&name, format!("not installed: {e}"), install_hint(preset)),
    };
    let dir = match tempfile::Builder::new()
        .prefix("conductor-doctor-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            return Check::fail(
                &name,
                format!("cannot make a temporary directory to try it in: {e}"),
                "free space in the temporary directory (TMPDIR)",
            )
        }
    };
    let log = dir.path().join("output.log");
    let raw = dir.path().join("output.jsonl");
    let task_id = format!("doctor-{}", std::process::id());
    let launch = Launch {
        command: &command,
        program_path: Some(&program),
        cwd: dir.path(),
        task_id: task_id.clone(),
        env: Vec::new(),
        task_env: Vec::new(),
        prompt: PROMPT.to_string(),
        output_log: &log,
        inline_cap: 1 << 20,
        log_cap: 1 << 20,
        stream_raw: preset.streams().then_some(raw.as_path()),
        serve_inline: false,
    };
    let started = Instant::now();
    let mut agent = match Agent::spawn(launch, &dir.path().join(".agent.json")) {
        Ok(a) => a,
        Err(e) => return Check::fail(&name, format!("cannot start it: {e}"), install_hint(preset)),
    };
    let answered = agent.exit_channel().recv_timeout(timeout).is_ok();
    if answered {
        agent.note_exit();
    } else {
        agent.stop(STOP_GRACE);
    }
    let out = agent.finish();
    let took = started.elapsed();
    if !answered {
        return Check::fail(
            &name,
            format!(
                "`{command}` gave no answer within {}s: it may be retrying an API it cannot reach",
                timeout.as_secs()
            ),
            endpoint_hint(preset),
        );
    }
    let mut r = trial_result(&task_id, &out);
    let limit = (!r.success)
        .then(|| preset.rate_limit(&r.output, out.limit_event.as_deref()))
        .flatten();
    preset.interpret(&mut r);
    judge(preset, &name, &r, limit, took)
}

/// The trial run's output read as a task's result (before the preset interprets it).
fn trial_result(task_id: &str, out: &AgentOutput) -> TaskResult {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut r = TaskResult::failed(TaskId::from(task_id), Outcome::Success, "");
    r.success = out.status.success();
    r.outcome = Some(if r.success {
        Outcome::Success
    } else {
        Outcome::Failure
    });
    r.error = (!r.success).then(|| {
        let how = match out.status.code() {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".to_string(),
        };
        match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
            Some(l) => format!("{how}: {}", l.trim()),
            None => how,
        }
    });
    r.output = String::from_utf8_lossy(&out.stdout).into_owned();
    r
}

/// The verdict on a finished trial run.
fn judge(
    preset: Preset,
    name: &str,
    r: &TaskResult,
    limit: Option<crate::preset::RateLimit>,
    took: Duration,
) -> Check {
    if let Some(limit) = limit {
        let until = crate::queue::limits::hh_mm(limit.until);
        return Check::fail(
            name,
            format!("rate-limited until {until} ({})", limit.message),
            format!("wait for the reset; tasks sent meanwhile are deferred to {until}"),
        );
    }
    if r.success {
        let answer = crate::text::fit(&crate::text::prompt_preview(&r.output, 40), 40);
        return Check::ok(
            name,
            format!(
                "`{}` answered in {:.1}s: {answer}",
                preset,
                took.as_secs_f64()
            ),
        );
    }
    let error = r.error.clone().unwrap_or_else(|| "failed".to_string());
    if error.starts_with("not logged in / invalid API key") {
        return Check::fail(name, error, login_hint(preset));
    }
    if unreachable(&error) || unreachable(&r.output) {
        return Check::fail(
            name,
            format!("cannot reach the API: {error}"),
            endpoint_hint(preset),
        );
    }
    Check::fail(
        name,
        format!("the agent failed: {error}"),
        format!(
            "run `{}` by hand with a short prompt to see why",
            preset.default_command()
        ),
    )
}

/// Whether an agent's error says it could not connect at all.
fn unreachable(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "connection error",
        "connection refused",
        "econnrefused",
        "enotfound",
        "fetch failed",
        "error sending request",
        "could not resolve",
        "network is unreachable",
        "timed out",
    ]
    .iter()
    .any(|w| t.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn failed(error: &str) -> TaskResult {
        TaskResult::failed(TaskId::from("t"), Outcome::Failure, error)
    }

    #[test]
    fn a_trial_is_judged_like_a_result() {
        let took = Duration::from_millis(1500);
        let key = judge(
            Preset::Claude,
            "agent claude",
            &failed("not logged in / invalid API key — run `claude login` or set ANTHROPIC_API_KEY (claude: x)"),
            None,
            took,
        );
        assert_eq!(key.status, super::super::CheckStatus::Fail);
        assert_eq!(
            key.fix.as_deref(),
            Some("run `claude login` or set ANTHROPIC_API_KEY")
        );
        let down = judge(
            Preset::Gemini,
            "agent gemini",
            &failed("gemini reported an error: fetch failed"),
            None,
            took,
        );
        assert!(down.detail.starts_with("cannot reach the API"), "{down:?}");
        let limited = judge(
            Preset::Claude,
            "agent claude",
            &failed("x"),
            Some(crate::preset::RateLimit {
                until: UNIX_EPOCH + Duration::from_secs(1_795_651_327),
                message: "You've hit your limit".into(),
            }),
            took,
        );
        assert!(
            limited.detail.starts_with("rate-limited until "),
            "{limited:?}"
        );
        let mut ok = failed("");
        ok.success = true;
        ok.output = "ok".into();
        let ok = judge(Preset::Codex, "agent codex", &ok, None, took);
        assert_eq!(ok.status, super::super::CheckStatus::Ok);
        assert!(ok.detail.contains("answered in 1.5s: ok"), "{ok:?}");
    }
}
