//! The real agent CLIs (Claude Code, Codex, Gemini CLI) driven by a real worker against the scripted
//! model server (`tests/model_server/server.py`): the CLI runs its own loop — streaming,
//! tool calls executed in the task's directory, retries, session files — and the server
//! plays each test's script and records what the CLI sent.
//!
//! The CLIs come from `.ci/install-agents` (run by `.ci/run`): found through
//! `CONDUCTOR_AGENTS_BIN`, else in `${CONDUCTOR_AGENTS_CACHE:-~/.cache/conductor-agents}`.
//! Missing, a test says `skipped <test>: <reason>` and passes; under `CI=true` it fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use conductor::{Slot, Task, TaskId, TaskResult};
use serde_json::{json, Value};

mod limits;

use crate::harness::{
    assert_nothing_left, bin, run_conductor, run_conductor_env, stop_child, wait_until, TestRoot,
};

const S0: Slot = Slot(0);
/// A real CLI starting, talking to the server and running tools: seconds, not minutes.
pub(crate) const BOUND: Duration = Duration::from_secs(90);

/// The folder holding the installed CLIs' launchers (`claude`, `codex`, `gemini`, `node`).
fn agents_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONDUCTOR_AGENTS_BIN") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("CONDUCTOR_AGENTS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/conductor-agents")
        });
    cache.join("node_modules/.bin")
}

/// What a test needs to run agent `name`: its launcher and python3 for the server.
/// `None` (after [`crate::prereq::skip_or_fail`]) when something is missing.
pub(crate) fn need_agent(name: &str) -> Option<PathBuf> {
    let bin = agents_bin();
    let exe = bin.join(name);
    if !is_executable(&exe) {
        crate::prereq::skip_or_fail(&format!(
            "{} is not installed (run .ci/install-agents, or set CONDUCTOR_AGENTS_BIN)",
            exe.display()
        ));
        return None;
    }
    let python = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !python.is_ok_and(|s| s.success()) {
        crate::prereq::skip_or_fail("python3 (for the scripted model server) is not installed");
        return None;
    }
    Some(bin)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The scripted model server on 127.0.0.1, killed when dropped.
pub(crate) struct ModelServer {
    child: std::process::Child,
    port: u16,
    record: PathBuf,
}

impl ModelServer {
    pub(crate) fn start(dir: &Path, script: Value) -> ModelServer {
        let script_path = dir.join("script.json");
        fs::write(&script_path, serde_json::to_vec_pretty(&script).unwrap()).unwrap();
        let record = dir.join("requests.jsonl");
        let port_file = dir.join("server.port");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model_server/server.py");
        let mut child = Command::new("python3")
            .arg(&server)
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(&record)
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("server.stderr")).unwrap())
            .spawn()
            .expect("start the scripted model server");
        let mut port = None;
        wait_until(Duration::from_secs(30), "the model server's port", || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "the model server exited ({st}): {}",
                    fs::read_to_string(dir.join("server.stderr")).unwrap_or_default()
                );
            }
            port = fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            port.is_some()
        });
        ModelServer {
            child,
            port: port.unwrap(),
            record,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request answered so far, in order.
    pub(crate) fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a recorded request"))
            .collect()
    }

    /// The requests that took a turn of the script.
    pub(crate) fn scripted(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["kind"] == "scripted")
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker started the way a user starts one: `conductor-worker 0 DIR --preset P`
/// and no `--agent`, so the preset's own command line runs, found on PATH.
pub(crate) struct RealWorker {
    child: Option<std::process::Child>,
    stderr: PathBuf,
}

impl RealWorker {
    pub(crate) fn start(t: &TestRoot, extra: &[&str], env: &[(String, String)]) -> RealWorker {
        let stderr = t.dir.path().join("worker.stderr");
        let mut cmd = Command::new(bin("conductor-worker"));
        cmd.arg(S0.to_string())
            .arg(t.dir.path())
            .args(extra)
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env("RUST_LOG", "conductor=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn conductor-worker");
        let pid = child.id();
        wait_until(
            Duration::from_secs(60),
            "the worker to serve slot 0",
            || {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!(
                        "worker exited at start ({st}): {}",
                        fs::read_to_string(&stderr).unwrap_or_default()
                    );
                }
                conductor::pool::serving(t.client.root(), S0, pid)
            },
        );
        RealWorker {
            child: Some(child),
            stderr,
        }
    }

    pub(crate) fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for RealWorker {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_child(c);
        }
    }
}

/// The environment Claude Code gets: its own HOME (settings, sessions and credentials go
/// to the test's temp dir), an API key the server accepts, the server as its API, no
/// traffic anywhere else, and short retries.
pub(crate) fn claude_env(
    t: &TestRoot,
    agents: &Path,
    server: &ModelServer,
    retries: u32,
) -> Vec<(String, String)> {
    let home = t.dir.path().join("home");
    fs::create_dir_all(&home).unwrap();
    let path = format!(
        "{}:{}",
        agents.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    [
        ("HOME", home.display().to_string()),
        ("PATH", path),
        ("ANTHROPIC_API_KEY", "test-key".into()),
        ("ANTHROPIC_BASE_URL", server.url()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("CLAUDE_CODE_MAX_RETRIES", retries.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A fresh directory for a task to work in.
pub(crate) fn task_dir(t: &TestRoot) -> PathBuf {
    let dir = t.dir.path().join("work");
    fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

pub(crate) fn submit(t: &TestRoot, id: &str, prompt: &str, dir: &Path) -> TaskId {
    let mut task = Task::new(prompt).with_id(id);
    task.dir = Some(dir.to_path_buf());
    t.client.write_task(S0, &task).expect("write_task")
}

pub(crate) fn result_of(t: &TestRoot, id: &TaskId, w: &RealWorker) -> TaskResult {
    t.client
        .wait_for_result(S0, id, BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}\nworker:\n{}", w.stderr()))
}

/// The task's live log as conductor rendered it (`tasks/<id>.log`).
pub(crate) fn task_log(t: &TestRoot, id: &TaskId) -> String {
    fs::read_to_string(t.client.worker(S0).task_log(id)).unwrap_or_default()
}

#[track_caller]
fn assert_lines(log: &str, wanted: &[&str]) {
    for w in wanted {
        assert!(
            log.lines().any(|l| l == *w),
            "no line {w:?} in the log:\n{log}"
        );
    }
}

/// What the live views show of a real CLI's event stream. `logs -f`, the dashboard and
/// `run`'s view all read the worker's rendering (`output.log`, then `tasks/<id>.log`);
/// here the raw events the CLI printed (`tasks/<id>.jsonl`) are rendered again, event by
/// event: each is shown as readable lines, all of them in the task's log, none raw JSON
/// and none a "· unknown event" (the real CLI's own events are all known); the only
/// events shown as nothing are `quiet`'s kinds (`type`, or `type/subtype`), kept out on
/// purpose, and assistant text still pieced together. An event type the renderer does
/// not know, put in the real stream, is shown labelled as such.
#[track_caller]
fn assert_stream_rendered(t: &TestRoot, id: &TaskId, quiet: &[&str]) {
    use conductor::agent::stream::StreamRenderer;
    let raw = fs::read_to_string(t.client.worker(S0).task_stream(id))
        .unwrap_or_else(|e| panic!("the raw stream of {id}: {e}"));
    let log = task_log(t, id);
    let mut lines: Vec<&str> = raw.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "{raw}");
    let unknown = r#"{"type":"brand_new_event","detail":{"n":1}}"#;
    lines.insert(lines.len() - 1, unknown);
    let mut renderer = StreamRenderer::new();
    let mut shown = String::new();
    let mut kinds = Vec::new();
    for line in &lines {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a raw line that is no event ({e}): {line}"));
        let kind = event["type"].as_str().expect("an event type").to_string();
        let kind = match event["subtype"].as_str() {
            Some(sub) => format!("{kind}/{sub}"),
            None => kind,
        };
        let mut out = Vec::new();
        renderer.render(line.as_bytes(), &mut out);
        let text = String::from_utf8(out).unwrap();
        let assistant_piece = event["type"] == "message" && event["role"] == "assistant";
        if text.is_empty() && !assistant_piece {
            assert!(
                quiet
                    .iter()
                    .any(|q| *q == kind || Some(*q) == event["type"].as_str()),
                "event {kind} is shown as nothing: {line}\nthe log:\n{log}"
            );
        }
        if *line == unknown {
            // Gemini's text pieces still pending come out first.
            let label = "· unknown event brand_new_event: \
                         {\"detail\":{\"n\":1},\"type\":\"brand_new_event\"}\n";
            assert!(text.ends_with(label), "{text:?}");
            shown.push_str(&text[..text.len() - label.len()]);
            continue;
        }
        kinds.push(kind);
        shown.push_str(&text);
    }
    let mut rest = Vec::new();
    renderer.finish(&mut rest);
    shown.push_str(&String::from_utf8(rest).unwrap());
    for l in shown.lines() {
        assert!(
            !l.trim_start().starts_with('{'),
            "raw JSON shown: {l}\nevents: {kinds:?}"
        );
        assert!(
            !l.starts_with("· unknown event"),
            "a real event the renderer does not know: {l}\nevents: {kinds:?}"
        );
        assert!(
            log.lines().any(|x| x == l),
            "{l:?} is not in the task's log:\n{log}\nevents: {kinds:?}"
        );
    }
}

/// All the text a request carried in its messages (prompts, answers, tool results).
pub(crate) fn conversation_text(request: &Value) -> String {
    request["body"]["messages"].to_string()
}

#[test]
fn claude_edits_files_and_runs_commands_in_the_task_dir_unattended() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    fs::write(dir.join("notes.txt"), "status: draft\n").unwrap();
    let written = dir.join("written.txt");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "Running a command first.",
             "tools": [{"name": "Bash", "input": {"command": "echo from-bash > bash.txt && ls",
                                                  "description": "write a file"}}]},
            {"tools": [{"name": "Write", "input": {"file_path": written,
                                                    "content": "written by claude\n"}}]},
            {"tools": [{"name": "Read", "input": {"file_path": dir.join("notes.txt")}}]},
            {"tools": [{"name": "Edit", "input": {"file_path": dir.join("notes.txt"),
                                                   "old_string": "draft", "new_string": "final"}}]},
            {"text": "All done: the FINAL ANSWER.", "usage": {"input_tokens": 400, "output_tokens": 50}},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "edit1", "make the files", &dir);
    let r = result_of(&t, &id, &w);

    assert!(r.success, "{:?}\n{}", r.error, w.stderr());
    assert_eq!(r.output, "All done: the FINAL ANSWER.");
    let session = r.session_id.clone().expect("a session id");
    assert_eq!(session.len(), 36, "a UUID: {session}");
    assert_eq!(r.num_turns, Some(5));
    assert!(r.input_tokens.unwrap() >= 400, "{:?}", r.input_tokens);
    assert!(r.output_tokens.unwrap() >= 50, "{:?}", r.output_tokens);
    assert!(r.cost_usd.unwrap() > 0.0, "{:?}", r.cost_usd);
    // On disk under the protocol's names.
    let raw: Value =
        serde_json::from_slice(&fs::read(t.client.worker(S0).result_for(&id)).unwrap()).unwrap();
    assert_eq!(raw["sessionId"], session.as_str());
    assert!(raw["inputTokens"].as_u64().unwrap() >= 400, "{raw}");

    // Its tools really ran, in the task's directory.
    assert_eq!(
        fs::read_to_string(dir.join("bash.txt")).unwrap(),
        "from-bash\n"
    );
    assert_eq!(fs::read_to_string(&written).unwrap(), "written by claude\n");
    assert_eq!(
        fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "status: final\n"
    );

    // What the model saw: the prompt, then each tool's result.
    let sent = server.scripted();
    assert_eq!(sent.len(), 5, "{sent:?}");
    assert!(conversation_text(&sent[0]).contains("make the files"));
    assert!(
        conversation_text(&sent[1]).contains("bash.txt"),
        "ls's output went back"
    );
    assert!(
        conversation_text(&sent[3]).contains("status: draft"),
        "Read's output went back"
    );
    assert!(!sent[0]["body"]["tools"].as_array().unwrap().is_empty());

    // The live log: text, tool calls with their arguments, their results, the end.
    let log = task_log(&t, &id);
    assert_lines(
        &log,
        &[
            "Running a command first.",
            "› Bash echo from-bash > bash.txt && ls",
            "  ‹ bash.txt (+1 lines)",
            "› Write written.txt",
            "› Read notes.txt",
            "› Edit notes.txt",
            "All done: the FINAL ANSWER.",
        ],
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with(&format!("· session {session}"))),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.starts_with("✓ done · 5 turns · $")),
        "{log}"
    );
    assert!(!log.contains("permission denied"), "{log}");
    assert!(!log.contains("{\"type\""), "raw events in the log:\n{log}");
    assert_stream_rendered(&t, &id, &[]);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn claude_narrowed_to_reading_cannot_write() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let target = dir.join("nope.txt");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Write", "input": {"file_path": target, "content": "x"}}]},
            {"tools": [{"name": "Bash", "input": {"command": "touch bash-nope.txt"}}]},
            {"text": "I was not allowed to."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(
        &t,
        &[
            "--preset",
            "claude",
            "--allowed-tools",
            "Read",
            "--permission-mode",
            "dontAsk",
        ],
        &env,
    );
    let id = submit(&t, "ro1", "try to write", &dir);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "I was not allowed to.");
    assert!(!target.exists());
    assert!(!dir.join("bash-nope.txt").exists());
    let log = task_log(&t, &id);
    assert!(
        log.lines().filter(|l| l.starts_with("  ‹ error: ")).count() >= 2,
        "both refusals shown as the tools' errors:\n{log}"
    );
    assert_stream_rendered(&t, &id, &[]);
}

#[test]
fn a_claude_task_narrowed_to_no_bash_gets_its_bash_call_refused() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    // `send` has no --dir: the task runs in the worker's project directory.
    let dir = t.dir.path().canonicalize().unwrap();
    fs::write(dir.join("notes.txt"), "status: draft\n").unwrap();
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Bash", "input": {"command": "echo changed > notes.txt",
                                                  "description": "change the notes"}}]},
            {"text": "Bash was refused."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    // The worker lets its agents run Bash (the preset's default); this task does not.
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let out = run_conductor(
        &t,
        &[
            "send",
            "0",
            "change the notes",
            "--id",
            "nb1",
            "--allowed-tools",
            "Read,Edit,Write",
        ],
        0,
    );
    assert_eq!(out.stdout, "nb1\n");
    let r = result_of(&t, &TaskId::from("nb1"), &w);
    assert!(r.success, "{:?}\n{}", r.error, w.stderr());
    assert_eq!(r.output, "Bash was refused.");
    assert_eq!(
        fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "status: draft\n",
        "the file is not changed"
    );
    // Claude refused the call itself: the model got the refusal as the tool's error.
    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let results: Vec<&Value> = sent[1]["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|c| c["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["is_error"], true, "{results:?}");
    assert!(
        sent.iter()
            .all(|s| !s["body"]["tools"].to_string().contains("\"name\":\"Bash\"")),
        "Bash was not offered to the model"
    );

    // Widening is refused by the worker, naming the field, before any agent runs.
    let mut wide = Task::new("run anything").with_id("nb2");
    wide.dir = Some(dir.clone());
    wide.allowed_tools = Some(vec!["Read".into(), "WebFetch".into()]);
    let id = t.client.write_task(S0, &wide).unwrap();
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let why = r.error.clone().unwrap_or_default();
    assert!(
        why.starts_with("rejected: allowedTools: WebFetch is not among the tools"),
        "{why}"
    );
    let mut wide = Task::new("bypass").with_id("nb3");
    wide.dir = Some(dir.clone());
    wide.permission_mode = Some("bypassPermissions".into());
    let id = t.client.write_task(S0, &wide).unwrap();
    let why = result_of(&t, &id, &w).error.unwrap_or_default();
    assert!(
        why.starts_with("rejected: permissionMode: bypassPermissions lets the agent do more"),
        "{why}"
    );
    assert_eq!(
        server.scripted().len(),
        2,
        "no agent ran for a refused task"
    );
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn claude_retry_resume_continues_the_session() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "The secret word is PERIWINKLE."},
            {"text": "You asked me before; it was PERIWINKLE."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "res1", "pick a secret word", &dir);
    let first = result_of(&t, &id, &w);
    assert!(first.success, "{:?}", first.error);
    let session = first.session_id.clone().expect("session id");

    let out = run_conductor(&t, &["retry", "0", "res1", "--resume", "--wait"], 0);
    assert_eq!(out.stdout, "You asked me before; it was PERIWINKLE.\n");
    let again = t
        .client
        .read_result_for(S0, &TaskId::from("res1-r1"))
        .unwrap()
        .expect("the retry's result");
    assert_eq!(again.session_id.as_deref(), Some(session.as_str()));

    // The model saw the earlier turns in the resumed conversation.
    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let resumed = conversation_text(&sent[1]);
    assert!(resumed.contains("pick a secret word"), "{resumed}");
    assert!(
        resumed.contains("The secret word is PERIWINKLE."),
        "{resumed}"
    );
    assert!(!conversation_text(&sent[0]).contains("PERIWINKLE"));
}

#[test]
fn claude_retries_an_overloaded_or_failing_api_and_then_answers() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"error": {"status": 500, "body": "internal trouble", "headers": {"retry-after": "0"}}},
            {"error": {"status": 529, "body": "Overloaded", "headers": {"retry-after": "0"}}},
            {"text": "made it"},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 3);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "ovl1", "answer despite errors", &dir);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.output, "made it");
    let sent = server.scripted();
    assert_eq!(
        sent.iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [500, 529, 200]
    );
    let log = task_log(&t, &id);
    assert!(
        log.lines().any(|l| l.starts_with("· API error 500")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("· API error 529 overloaded: retry 2/3")),
        "{log}"
    );
    assert_stream_rendered(&t, &id, &[]);
}

#[test]
fn claude_giving_up_on_the_api_fails_the_task_with_the_providers_message() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"error": {"status": 529, "body": "Overloaded: the scripted provider is busy",
                       "headers": {"retry-after": "0"}}, "times": 10},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "gu1", "this will not work", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    assert_eq!(r.outcome, Some(conductor::protocol::Outcome::Failure));
    let error = r.error.clone().unwrap();
    assert!(
        error.starts_with("claude reported an error (api_error, HTTP 529): API Error: 529"),
        "{error}"
    );
    assert!(error.contains("the scripted provider is busy"), "{error}");
    assert_eq!(server.scripted().len(), 2, "one try and one retry");
    let log = task_log(&t, &id);
    assert!(
        log.lines()
            .any(|l| l.starts_with("✗ api_error: API Error: 529")),
        "{log}"
    );
}

#[test]
fn claude_with_a_rejected_api_key_fails_saying_how_to_log_in() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "invalid x-api-key"}, "times": 10}]}),
    );
    let env = claude_env(&t, &agents, &server, 0);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "key1", "hello", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(
        error.starts_with(
            "not logged in / invalid API key — run `claude login` or set ANTHROPIC_API_KEY"
        ),
        "{error}"
    );
    assert_eq!(server.scripted()[0]["headers"]["x-api-key"], "test-key");
}

/// Conductor's overhead on a real Claude Code task, from the server's clock: pickup →
/// the first model request and the last model answer → the result published, beside the
/// same CLI started directly (its own start-up → first request). Prints one line a run;
/// `cargo test --test integration real_agents::claude_overhead -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement for BENCHMARKS.md, not a check"]
fn claude_overhead_sample() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let turns: Vec<Value> = (0..runs * 2)
        .map(|i| json!({"text": format!("answer {i}")}))
        .collect();
    let server = ModelServer::start(t.dir.path(), json!({ "turns": turns }));
    let env = claude_env(&t, &agents, &server, 0);
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    // Directly: spawn → first request, and last answer → exit.
    for i in 0..runs {
        let seen = server.scripted().len();
        let start = SystemTime::now();
        let mut child = Command::new(agents.join("claude"))
            .args(
                conductor::preset::Preset::Claude
                    .default_command()
                    .split(' ')
                    .skip(1),
            )
            .current_dir(&dir)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"say something").unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let ended = SystemTime::now();
        assert!(out.status.success());
        let req = &server.scripted()[seen];
        println!(
            "direct {i}: spawn→first request {:.1} ms, last answer→exit {:.1} ms",
            (req["t_start"].as_f64().unwrap() - secs(start)) * 1000.0,
            (secs(ended) - req["t_end"].as_f64().unwrap()) * 1000.0,
        );
    }
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    for i in 0..runs {
        let seen = server.scripted().len();
        let id = submit(&t, &format!("b{i}"), "say something", &dir);
        let r = result_of(&t, &id, &w);
        assert!(r.success, "{:?}", r.error);
        let published = fs::metadata(t.client.worker(S0).result_for(&id))
            .and_then(|m| m.modified())
            .unwrap();
        let started = conductor::protocol::parse_rfc3339(r.started_at.as_deref().unwrap()).unwrap();
        let req = &server.scripted()[seen];
        println!(
            "conductor {i}: pickup→first request {:.1} ms, last answer→result published {:.1} ms",
            (req["t_start"].as_f64().unwrap() - secs(started)) * 1000.0,
            (secs(published) - req["t_end"].as_f64().unwrap()) * 1000.0,
        );
    }
}

/// The environment Codex gets: its own HOME with a `~/.codex/config.toml` naming the
/// server as its model provider (Responses API), an API key, bounded retries.
fn codex_env(
    t: &TestRoot,
    agents: &Path,
    server: &ModelServer,
    retries: u32,
) -> Vec<(String, String)> {
    let home = t.dir.path().join("home");
    fs::create_dir_all(home.join(".codex")).unwrap();
    fs::write(
        home.join(".codex/config.toml"),
        format!(
            "model = \"scripted-model\"\n\
             model_provider = \"scripted\"\n\
             [model_providers.scripted]\n\
             name = \"scripted\"\n\
             base_url = \"{}/v1\"\n\
             wire_api = \"responses\"\n\
             env_key = \"OPENAI_API_KEY\"\n\
             request_max_retries = {retries}\n\
             stream_max_retries = {retries}\n",
            server.url()
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        agents.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    [
        ("HOME", home.display().to_string()),
        ("PATH", path),
        ("OPENAI_API_KEY", "test-key".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn codex_runs_commands_in_the_task_dir_and_answers() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "Running a command.",
             "tools": [{"name": "exec_command",
                        "input": {"cmd": "echo from-codex > codex.txt && ls"}}]},
            {"text": "Codex is done: FINAL.", "usage": {"input_tokens": 300, "output_tokens": 40}},
        ]}),
    );
    let env = codex_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let id = submit(&t, "cx1", "write a file with codex", &dir);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{:?}", r.error, r.stderr);
    assert_eq!(r.output, "Codex is done: FINAL.");
    assert!(r.session_id.is_some());
    assert!(r.input_tokens.unwrap() >= 300, "{:?}", r.input_tokens);
    assert!(r.output_tokens.unwrap() >= 40, "{:?}", r.output_tokens);
    assert_eq!(
        fs::read_to_string(dir.join("codex.txt")).unwrap(),
        "from-codex\n"
    );
    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent[0]["body"]["input"]
        .to_string()
        .contains("write a file with codex"));
    assert!(
        sent[1]["body"]["input"].to_string().contains("codex.txt"),
        "the command's output went back to the model"
    );
    let log = task_log(&t, &id);
    assert_lines(
        &log,
        &[
            "Running a command.",
            "Codex is done: FINAL.",
            "  ‹ codex.txt",
        ],
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("› exec ") && l.contains("echo from-codex > codex.txt")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("✓ turn done · ") && l.contains("tokens in")),
        "{log}"
    );
    assert!(!log.contains("{\"type\""), "raw events in the log:\n{log}");
    // Codex shows an item when it completes (a command also when it starts).
    assert_stream_rendered(&t, &id, &["turn.started", "item.started", "item.updated"]);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn codex_giving_up_on_the_api_fails_the_task_with_the_providers_message() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 503, "body": "the scripted provider is down",
                                    "headers": {"retry-after": "0"}}, "times": 20}]}),
    );
    let env = codex_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let id = submit(&t, "cx2", "this will not work", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(error.starts_with("codex reported an error: "), "{error}");
    assert!(error.contains("503"), "{error}");
    assert!(error.contains("the scripted provider is down"), "{error}");
    assert!(server.scripted().len() >= 2, "codex retried");
    let log = task_log(&t, &id);
    assert!(
        log.lines().any(|l| l.starts_with("✗ turn failed: ")),
        "{log}"
    );
    assert_stream_rendered(&t, &id, &["turn.started", "item.started", "item.updated"]);
}

#[test]
fn codex_with_a_rejected_api_key_fails_saying_how_to_log_in() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "invalid key"}, "times": 20}]}),
    );
    let env = codex_env(&t, &agents, &server, 0);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let id = submit(&t, "cx3", "hello", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(
        error.starts_with(
            "not logged in / invalid API key — run `codex login` or set OPENAI_API_KEY"
        ),
        "{error}"
    );
    assert_eq!(
        server.scripted()[0]["headers"]["authorization"],
        "Bearer test-key"
    );
}

/// A script whose first agent request is refused by the subscription's usage limit the
/// way Anthropic's API refuses it: a 429 with the `anthropic-ratelimit-unified-*`
/// headers (status `rejected`, the reset as Unix seconds) — then `after` answers.
fn usage_limited_script(reset: u64, after: &[&str]) -> Value {
    let mut turns = vec![json!({"error": {
    "status": 429,
    "body": {"type": "error", "error": {"type": "rate_limit_error",
             "message": "This request would exceed your account's rate limit."}},
    "headers": {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": reset.to_string(),
        "anthropic-ratelimit-unified-5h-status": "rejected",
        "anthropic-ratelimit-unified-5h-reset": reset.to_string(),
        "anthropic-ratelimit-unified-5h-utilization": "1.0",
        "anthropic-ratelimit-unified-representative-claim": "five_hour"
    }}})];
    turns.extend(after.iter().map(|t| json!({ "text": t })));
    json!({ "turns": turns })
}

/// Claude Code logged in with a subscription (an OAuth token, as `claude login` leaves):
/// only then does it read the unified rate-limit headers as a usage limit.
fn subscriber_env(t: &TestRoot, agents: &Path, server: &ModelServer) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = claude_env(t, agents, server, 2)
        .into_iter()
        .filter(|(k, _)| k != "ANTHROPIC_API_KEY")
        .collect();
    env.push((
        "CLAUDE_CODE_OAUTH_TOKEN".into(),
        "sk-ant-oat01-scripted".into(),
    ));
    env
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn submit_queued(t: &TestRoot, id: &str, prompt: &str, dir: &Path) {
    run_conductor(
        t,
        &["submit", prompt, "--id", id, "--dir", dir.to_str().unwrap()],
        0,
    );
}

/// The pending entry of task `id`, if it is in `queue/pending/`.
fn pending_entry(t: &TestRoot, id: &str) -> Option<Task> {
    let dir = t.client.root().queue_pending();
    fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(&format!("~{id}.json")) {
            return None;
        }
        serde_json::from_slice(&fs::read(e.path()).ok()?).ok()
    })
}

fn queue_result(t: &TestRoot, id: &str) -> Option<TaskResult> {
    let path = t.client.root().queue_results().join(format!("{id}.json"));
    TaskResult::read(&path).ok().flatten()
}

/// A subscriber's Claude Code meeting a usage limit that resets in 10 s, then answering
/// "done after the reset" twice: the task directory, the reset (Unix seconds), the
/// server and the environment.
fn limited_for_ten_seconds(
    t: &TestRoot,
    agents: &Path,
) -> (PathBuf, u64, ModelServer, Vec<(String, String)>) {
    let dir = task_dir(t);
    let reset = unix_now() + 10;
    let server = ModelServer::start(
        t.dir.path(),
        usage_limited_script(reset, &["done after the reset", "done after the reset"]),
    );
    let env = subscriber_env(t, agents, &server);
    (dir, reset, server, env)
}

#[test]
fn claude_usage_limit_defers_the_task_until_the_reset_then_runs_it() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let (dir, reset, server, env) = limited_for_ten_seconds(&t, &agents);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    submit_queued(&t, "lim1", "first task", &dir);

    // Refused once, the task is back in the queue with the reset as its notBefore, and
    // the limit is recorded root-wide; no result, so nothing failed.
    let mut deferred = None;
    wait_until(BOUND, "the task deferred back to the queue", || {
        deferred = pending_entry(&t, "lim1").filter(|t| t.not_before.is_some());
        deferred.is_some()
    });
    let deferred = deferred.unwrap();
    let not_before = deferred.not_before().unwrap();
    assert_eq!(
        not_before,
        SystemTime::UNIX_EPOCH + Duration::from_secs(reset),
        "{deferred:?}"
    );
    assert_eq!(deferred.attempt(), 1, "a deferral is no attempt");
    assert!(queue_result(&t, "lim1").is_none());
    let limit = fs::read_to_string(t.client.root().agent_limit("claude")).unwrap();
    assert!(limit.contains("You've hit your"), "{limit}");
    let queue = run_conductor(&t, &["queue"], 0).stdout;
    assert!(queue.contains("rate-limited until"), "{queue}");

    // A second task submitted meanwhile waits for the reset too.
    submit_queued(&t, "lim2", "second task", &dir);

    for id in ["lim1", "lim2"] {
        let r = t
            .client
            .wait_for_task(&TaskId::from(id), BOUND)
            .unwrap_or_else(|e| panic!("no result for {id}: {e}\nworker:\n{}", w.stderr()));
        assert!(r.success, "{id}: {:?}\n{}", r.error, w.stderr());
        assert_eq!(r.output, "done after the reset");
        assert_eq!(r.agent.as_deref(), Some("claude"));
        assert_eq!(r.attempt, Some(1));
        let started = conductor::protocol::parse_rfc3339(r.started_at.as_deref().unwrap()).unwrap();
        assert!(
            started >= not_before,
            "{id} started at {:?}, before the reset {not_before:?}",
            r.started_at
        );
    }
    let sent = server.scripted();
    assert_eq!(
        sent.iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [429, 200, 200]
    );
    assert!(sent[1]["t_start"].as_f64().unwrap() >= reset as f64);
}

#[test]
fn a_claude_run_defers_a_usage_limited_task_in_its_inbox_and_runs_it_after_the_reset() {
    // `conductor run` keeps no second task waiting in the inbox of a claude worker: the
    // deferred task goes back there, and runs, with the one after it, once the limit
    // resets.
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let (dir, _, server, mut env) = limited_for_ten_seconds(&t, &agents);
    let tmp = t.dir.path().join("tmp");
    fs::create_dir(&tmp).unwrap();
    env.push(("TMPDIR".into(), tmp.display().to_string()));
    let ran = run_conductor_env(
        &t,
        &[
            "run",
            "--workers",
            "1",
            "--preset",
            "claude",
            "--json",
            "--dir",
            dir.to_str().unwrap(),
            "first task",
            "second task",
        ],
        &env,
        0,
    );
    let v: Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(v["succeeded"], 2, "{}\n{}", ran.stdout, ran.stderr);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["output"], "done after the reset", "{r}");
    }
    let sent = server.scripted();
    assert_eq!(
        sent.iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [429, 200, 200]
    );
}

#[test]
fn claude_usage_limit_fails_the_task_when_deferral_is_off() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        usage_limited_script(unix_now() + 3600, &["never"]),
    );
    let env = subscriber_env(&t, &agents, &server);
    let w = RealWorker::start(&t, &["--preset", "claude", "--no-defer-rate-limited"], &env);
    let id = submit(&t, "limoff", "hello", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(
        error.starts_with("claude reported an error (api_error, HTTP 429): You've hit your"),
        "{error}"
    );
    assert_eq!(server.scripted().len(), 1);
    assert!(!t.client.root().agent_limit("claude").exists());
}

/// A worker serving two presets (`--preset command --agent … --preset claude`, a
/// stand-in `claude` on PATH): each task runs under the preset it names, the first is
/// the default, a preset the worker does not serve is refused from the inbox and left
/// in the queue for another worker, and the result says which agent ran it.
#[test]
fn each_task_runs_under_the_preset_it_names() {
    let t = TestRoot::new();
    let fake = t.dir.path().join("fakebin");
    fs::create_dir_all(&fake).unwrap();
    let claude = fake.join("claude");
    fs::write(
        &claude,
        "#!/bin/sh\ncat >/dev/null\necho '{\"type\":\"result\",\"subtype\":\"success\",\
         \"is_error\":false,\"result\":\"from claude\",\"session_id\":\"s-1\",\"num_turns\":1}'\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&claude, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let w = RealWorker::start(
        &t,
        &[
            "--preset",
            "command",
            "--agent",
            "tr a-z A-Z",
            "--preset",
            "claude",
        ],
        &[("PATH".to_string(), path)],
    );
    let status = t.client.read_status(S0).unwrap().unwrap();
    assert_eq!(status.presets, ["command", "claude"]);

    let plain = t
        .client
        .write_task(S0, &Task::new("hello").with_id("p1"))
        .unwrap();
    let r = result_of(&t, &plain, &w);
    assert_eq!(
        (r.output.as_str(), r.agent.as_deref()),
        ("HELLO", Some("command"))
    );

    let mut task = Task::new("hello").with_id("p2");
    task.agent = Some("claude".into());
    let id = t.client.write_task(S0, &task).unwrap();
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}", r.error);
    assert_eq!(
        (r.output.as_str(), r.agent.as_deref()),
        ("from claude", Some("claude"))
    );
    assert_eq!(r.session_id.as_deref(), Some("s-1"));

    let mut task = Task::new("hello").with_id("p3");
    task.agent = Some("codex".into());
    let id = t.client.write_task(S0, &task).unwrap();
    let r = result_of(&t, &id, &w);
    assert_eq!(r.outcome, Some(conductor::protocol::Outcome::Rejected));
    let error = r.error.unwrap();
    assert!(
        error.contains("agent preset codex") && error.contains("command, claude"),
        "{error}"
    );

    // The queue: a codex task is left for a worker that serves codex; the claude one
    // submitted after it runs here.
    run_conductor(
        &t,
        &["submit", "later", "--id", "q1", "--agent-preset", "codex"],
        0,
    );
    run_conductor(
        &t,
        &["submit", "now", "--id", "q2", "--agent-preset", "claude"],
        0,
    );
    let r = t
        .client
        .wait_for_task(&TaskId::from("q2"), BOUND)
        .expect("q2's result");
    assert_eq!(r.agent.as_deref(), Some("claude"));
    assert!(
        pending_entry(&t, "q1").is_some(),
        "the codex task still waits"
    );
    assert!(queue_result(&t, "q1").is_none());
    let tasks = run_conductor(&t, &["tasks", "--json"], 0).stdout;
    assert!(tasks.contains("codex"), "{tasks}");
    drop(w);
}

/// The environment Gemini CLI gets: its own HOME whose `~/.gemini/settings.json` picks
/// API-key auth (with `GOOGLE_GEMINI_BASE_URL` set it would otherwise pick "gateway",
/// which headless mode refuses), bounds its attempts and sends no usage statistics; the
/// server as its API; a concrete default model (with `auto` it first asks a router model
/// for a complexity score in JSON).
fn gemini_env(
    t: &TestRoot,
    agents: &Path,
    server: &ModelServer,
    attempts: u32,
) -> Vec<(String, String)> {
    let home = t.dir.path().join("home");
    fs::create_dir_all(home.join(".gemini")).unwrap();
    fs::write(
        home.join(".gemini/settings.json"),
        serde_json::to_vec_pretty(&json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"maxAttempts": attempts, "enableAutoUpdate": false},
            "privacy": {"usageStatisticsEnabled": false},
        }))
        .unwrap(),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        agents.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    [
        ("HOME", home.display().to_string()),
        ("PATH", path),
        ("GEMINI_API_KEY", "test-key".into()),
        ("GOOGLE_GEMINI_BASE_URL", server.url()),
        ("GEMINI_MODEL", "gemini-2.5-flash".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn gemini_edits_files_and_runs_commands_in_the_task_dir_unattended() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let written = dir.join("written.txt");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "Running a command first.",
             "tools": [{"name": "run_shell_command",
                        "input": {"command": "echo from-gemini > gemini.txt && ls"}}]},
            {"tools": [{"name": "write_file",
                        "input": {"file_path": written, "content": "written by gemini\n"}}]},
            {"text": "Gemini is done: FINAL.", "usage": {"input_tokens": 300, "output_tokens": 40}},
        ]}),
    );
    let env = gemini_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    let mut task = Task::new("write files with gemini").with_id("gm1");
    task.dir = Some(dir.clone());
    task.model = Some("gemini-2.5-pro".into());
    let id = t.client.write_task(S0, &task).unwrap();
    let r = result_of(&t, &id, &w);

    assert!(r.success, "{:?}\n{:?}\n{}", r.error, r.stderr, w.stderr());
    assert_eq!(r.output, "Gemini is done: FINAL.");
    let session = r.session_id.clone().expect("a session id");
    assert_eq!(session.len(), 36, "a UUID: {session}");
    assert!(r.input_tokens.unwrap() >= 300, "{:?}", r.input_tokens);
    assert!(r.output_tokens.unwrap() >= 40, "{:?}", r.output_tokens);
    assert_eq!(
        fs::read_to_string(dir.join("gemini.txt")).unwrap(),
        "from-gemini\n"
    );
    assert_eq!(fs::read_to_string(&written).unwrap(), "written by gemini\n");

    let sent = server.scripted();
    assert_eq!(sent.len(), 3, "{sent:?}");
    // The task's model, not the environment's default, on every request.
    for s in &sent {
        let path = s["path"].as_str().unwrap();
        assert!(
            path.contains("/models/gemini-2.5-pro:"),
            "the task's model: {path}"
        );
    }
    assert!(sent[0]["body"]["contents"]
        .to_string()
        .contains("write files with gemini"));
    assert!(
        sent[1]["body"]["contents"]
            .to_string()
            .contains("gemini.txt"),
        "the command's output went back to the model"
    );
    assert_eq!(sent[0]["headers"]["x-goog-api-key"], "test-key");

    let log = task_log(&t, &id);
    assert_lines(
        &log,
        &[
            "Running a command first.",
            "› run_shell_command echo from-gemini > gemini.txt && ls",
            "  ‹ gemini.txt",
            "Gemini is done: FINAL.",
        ],
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("› write_file ") && l.contains("written.txt")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with(&format!("· session {session} · gemini-2.5-pro"))),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("✓ done · 2 tool calls · ") && l.contains("tokens in")),
        "{log}"
    );
    assert!(!log.contains("{\"type\""), "raw events in the log:\n{log}");
    assert_stream_rendered(&t, &id, &["message"]);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn gemini_retry_resume_continues_the_session() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "The secret word is PERIWINKLE."},
            {"text": "You asked me before; it was PERIWINKLE."},
        ]}),
    );
    let env = gemini_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    let id = submit(&t, "gmr1", "pick a secret word", &dir);
    let first = result_of(&t, &id, &w);
    assert!(first.success, "{:?}\n{:?}", first.error, first.stderr);
    let session = first.session_id.clone().expect("a session id");

    let out = run_conductor(&t, &["retry", "0", "gmr1", "--resume", "--wait"], 0);
    assert_eq!(out.stdout, "You asked me before; it was PERIWINKLE.\n");
    let again = t
        .client
        .read_result_for(S0, &TaskId::from("gmr1-r1"))
        .unwrap()
        .expect("the retry's result");
    assert!(again.success, "{:?}\n{:?}", again.error, again.stderr);
    assert_eq!(again.session_id.as_deref(), Some(session.as_str()));

    // The model saw the earlier turns in the resumed conversation.
    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let resumed = sent[1]["body"]["contents"].to_string();
    assert!(resumed.contains("pick a secret word"), "{resumed}");
    assert!(
        resumed.contains("The secret word is PERIWINKLE."),
        "{resumed}"
    );
    assert!(!sent[0]["body"]["contents"]
        .to_string()
        .contains("PERIWINKLE"));
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn gemini_giving_up_on_the_api_fails_the_task_with_the_providers_message() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 503, "body": "the scripted provider is down",
                                    "headers": {"retry-after": "0"}}, "times": 20}]}),
    );
    // Two attempts: gemini waits about 5 s before its second.
    let env = gemini_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    let id = submit(&t, "gm2", "this will not work", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    assert_eq!(r.outcome, Some(conductor::protocol::Outcome::Failure));
    let error = r.error.unwrap();
    assert!(error.starts_with("gemini reported an error: "), "{error}");
    assert!(error.contains("the scripted provider is down"), "{error}");
    assert!(r.session_id.is_some());
    assert_eq!(server.scripted().len(), 2, "gemini retried once");
    let log = task_log(&t, &id);
    assert!(
        log.lines()
            .any(|l| l.starts_with("✗ error: ") && l.contains("the scripted provider is down")),
        "{log}"
    );
    assert_stream_rendered(&t, &id, &["message"]);
}

#[test]
fn gemini_with_a_rejected_api_key_fails_saying_how_to_log_in() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "API key not valid. Please pass a valid API key."},
                          "times": 20}]}),
    );
    let env = gemini_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    let id = submit(&t, "gm3", "hello", &dir);
    let r = result_of(&t, &id, &w);
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(
        error.starts_with("not logged in / invalid API key — set GEMINI_API_KEY"),
        "{error}"
    );
    assert_eq!(
        server.scripted()[0]["headers"]["x-goog-api-key"],
        "test-key"
    );
}

/// Live processes carrying the task's marker (`CONDUCTOR_TASK_ID=<id>` in their
/// environment, as every process the agent starts inherits it): pid and command line.
fn task_processes(id: &str) -> Vec<(u32, String)> {
    let marker = format!("CONDUCTOR_TASK_ID={id}");
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(env) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()) {
            let cmd = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

/// Wait (bounded) until the task's Bash tool has both `tail -f` running.
fn wait_for_tails(id: &str, w: &RealWorker) {
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let seen = task_processes(id);
        let has = |s: &str| seen.iter().any(|(_, c)| c.trim_end() == s);
        if has("tail -f bg.txt") && has("tail -f fg.txt") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task's commands never ran: {seen:?}\nworker:\n{}",
            w.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait (bounded) until no process of the task is left; name them if some are.
fn assert_no_task_process(id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = task_processes(id);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes of task {id} left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn claude_cancelled_or_shut_down_leaves_none_of_its_processes_behind() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    // Claude Code refuses a Bash call starting with `sleep`, and one using `&` (without
    // an approval nobody is there to give): its own `run_in_background` starts the
    // background process, and a foreground `tail -f` keeps the tool call running.
    fs::write(dir.join("bg.txt"), "").unwrap();
    fs::write(dir.join("fg.txt"), "").unwrap();
    let background = json!({"tools": [{"name": "Bash", "input": {
        "command": "tail -f bg.txt", "description": "follow bg.txt",
        "run_in_background": true}}]});
    let foreground = json!({"tools": [{"name": "Bash", "input": {
        "command": "tail -f fg.txt", "description": "follow fg.txt", "timeout": 600000}}]});
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [background.clone(), foreground.clone(), background, foreground]}),
    );
    let env = claude_env(&t, &agents, &server, 0);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);

    // Cancelled: the agent, its Bash tool's shell and the process it put in the background.
    let id = submit(&t, "cancel1", "wait for a long time", &dir);
    wait_for_tails("cancel1", &w);
    run_conductor(&t, &["cancel", "0", "cancel1"], 0);
    let r = result_of(&t, &id, &w);
    assert_eq!(
        r.outcome,
        Some(conductor::protocol::Outcome::Cancelled),
        "{r:?}"
    );
    assert_stopped_reads_as_text(&r);
    assert_no_task_process("cancel1");

    // The worker stopped (SIGTERM) mid-task: the same.
    let id = submit(&t, "shut1", "wait again", &dir);
    wait_for_tails("shut1", &w);
    drop(w);
    assert_no_task_process("shut1");
    let r = t
        .client
        .read_result_for(S0, &id)
        .unwrap()
        .expect("a result");
    assert_eq!(
        r.outcome,
        Some(conductor::protocol::Outcome::Interrupted),
        "{r:?}"
    );
    assert_stopped_reads_as_text(&r);
    assert_nothing_left(t.path());
}

/// A claude task stopped mid-run: its output is the rendered log (the Bash call it was
/// in), not the raw events, with the session its init event named and its turns so far.
#[track_caller]
fn assert_stopped_reads_as_text(r: &TaskResult) {
    assert!(!r.output.contains("{\"type\""), "raw events: {}", r.output);
    assert!(r.output.contains("› Bash tail -f"), "{}", r.output);
    let session = r.session_id.as_deref().expect("the init event's session");
    assert_eq!(session.len(), 36, "a UUID: {session}");
    assert!(r.num_turns.is_some_and(|n| n >= 1), "{r:?}");
}

#[test]
fn codex_retry_resume_continues_the_thread() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"text": "The secret word is PERIWINKLE."},
            {"text": "You asked me before; it was PERIWINKLE."},
        ]}),
    );
    let env = codex_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let id = submit(&t, "cxr1", "pick a secret word", &dir);
    let first = result_of(&t, &id, &w);
    assert!(first.success, "{:?}\n{:?}", first.error, first.stderr);
    let thread = first.session_id.clone().expect("a thread id");

    let out = run_conductor(&t, &["retry", "0", "cxr1", "--resume", "--wait"], 0);
    assert_eq!(out.stdout, "You asked me before; it was PERIWINKLE.\n");
    let again = t
        .client
        .read_result_for(S0, &TaskId::from("cxr1-r1"))
        .unwrap()
        .expect("the retry's result");
    assert_eq!(again.session_id.as_deref(), Some(thread.as_str()));

    let sent = server.scripted();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let resumed = sent[1]["body"]["input"].to_string();
    assert!(resumed.contains("pick a secret word"), "{resumed}");
    assert!(
        resumed.contains("The secret word is PERIWINKLE."),
        "{resumed}"
    );
    assert!(!sent[0]["body"]["input"].to_string().contains("PERIWINKLE"));
}

#[test]
fn claude_and_codex_pass_the_tasks_model() {
    for agent in ["claude", "codex"] {
        let Some(agents) = need_agent(agent) else {
            return;
        };
        let t = TestRoot::new();
        let server = ModelServer::start(
            t.dir.path(),
            json!({"turns": [{"text": "answered by the task's model"}]}),
        );
        let env = if agent == "claude" {
            claude_env(&t, &agents, &server, 0)
        } else {
            codex_env(&t, &agents, &server, 0)
        };
        let w = RealWorker::start(&t, &["--preset", agent], &env);
        let model = format!("{agent}-model-of-the-task");
        let out = run_conductor(
            &t,
            &["send", "0", "--model", &model, "--wait", "which model?"],
            0,
        );
        assert_eq!(
            out.stdout,
            "answered by the task's model\n",
            "{}",
            w.stderr()
        );
        let sent = server.scripted();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["body"]["model"], model.as_str(), "{agent}");
    }
}

/// `conductor doctor --agent …` with the agent's environment, as JSON: its exit code and
/// the trial's check (`agent <preset>`).
fn doctor_agent(t: &TestRoot, args: &[&str], env: &[(String, String)], code: i32) -> Value {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let ran = run_conductor_env(t, &all, env, code);
    let report: Value = serde_json::from_str(&ran.stdout).expect("doctor's JSON");
    let trials: Vec<Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("agent "))
        .cloned()
        .collect();
    assert_eq!(trials.len(), 1, "one trial: {report}");
    trials[0].clone()
}

#[test]
fn doctor_agent_says_claude_works_against_its_api() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let server = ModelServer::start(t.dir.path(), json!({"turns": [{"text": "ok"}]}));
    let env = claude_env(&t, &agents, &server, 0);
    let check = doctor_agent(&t, &["--agent", "claude"], &env, 0);
    assert_eq!(check["name"], "agent claude");
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("answered in"),
        "{check}"
    );
    // It really asked the model, with the key it was given.
    let sent = server.scripted();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["headers"]["x-api-key"], "test-key");
    assert!(
        conversation_text(&sent[0]).contains("Reply with the single word"),
        "{sent:?}"
    );
}

#[test]
fn doctor_agent_says_claude_is_not_logged_in() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "invalid x-api-key"}, "times": 10}]}),
    );
    let env = claude_env(&t, &agents, &server, 0);
    let check = doctor_agent(&t, &["--agent", "claude"], &env, 1);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"].as_str().unwrap().starts_with(
            "not logged in / invalid API key — run `claude login` or set ANTHROPIC_API_KEY"
        ),
        "{check}"
    );
    assert_eq!(check["fix"], "run `claude login` or set ANTHROPIC_API_KEY");
}

/// Without a preset named, `doctor --agent` tries what the root's live workers serve.
#[test]
fn doctor_agent_tries_the_preset_the_live_workers_serve_codex_not_logged_in() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "invalid key"}, "times": 20}]}),
    );
    let env = codex_env(&t, &agents, &server, 0);
    let _w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let check = doctor_agent(&t, &["--agent"], &env, 1);
    assert_eq!(check["name"], "agent codex", "{check}");
    assert!(
        check["detail"].as_str().unwrap().starts_with(
            "not logged in / invalid API key — run `codex login` or set OPENAI_API_KEY"
        ),
        "{check}"
    );
    assert_eq!(
        server.scripted()[0]["headers"]["authorization"],
        "Bearer test-key"
    );
}

#[test]
fn doctor_agent_says_gemini_is_not_logged_in() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [{"error": {"status": 401, "body": "API key not valid. Please pass a valid API key."},
                          "times": 20}]}),
    );
    let env = gemini_env(&t, &agents, &server, 1);
    let check = doctor_agent(&t, &["--agent", "gemini"], &env, 1);
    assert_eq!(check["name"], "agent gemini");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .starts_with("not logged in / invalid API key — set GEMINI_API_KEY"),
        "{check}"
    );
}

#[test]
fn doctor_agent_says_an_agent_is_not_installed_and_how_to_install_it() {
    let t = TestRoot::new();
    let empty = t.dir.path().join("empty-bin");
    fs::create_dir_all(&empty).unwrap();
    let env = vec![("PATH".to_string(), empty.display().to_string())];
    let check = doctor_agent(&t, &["--agent", "codex"], &env, 1);
    assert_eq!(check["status"], "fail");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.starts_with("not installed: "), "{check}");
    assert!(
        detail.contains(&empty.display().to_string()),
        "names PATH: {check}"
    );
    assert_eq!(
        check["fix"],
        "install Codex (`npm install -g @openai/codex`) so `codex` is on PATH"
    );
    // A command line that is not a preset is only looked for on PATH, never run.
    let ran = run_conductor_env(&t, &["doctor", "--json", "--agent", "cat"], &[], 0);
    assert!(!ran.stdout.contains("\"agent cat\""), "{}", ran.stdout);
}

/// A task sent to a slot's inbox and refused by the usage limit goes back into that inbox
/// with the reset as its `notBefore`; the slot says why it is idle, a second send to it is
/// refused as busy, and at the reset the task runs there.
#[test]
fn claude_usage_limit_defers_an_inbox_task_back_into_its_inbox_until_the_reset() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = task_dir(&t);
    let reset = unix_now() + 10;
    let server = ModelServer::start(
        t.dir.path(),
        usage_limited_script(reset, &["done after the reset"]),
    );
    let env = subscriber_env(&t, &agents, &server);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = submit(&t, "inb1", "the inbox task", &dir);

    let inbox = t.client.worker(S0).task();
    let mut deferred = None;
    wait_until(BOUND, "the task deferred back into the inbox", || {
        deferred = fs::read(&inbox)
            .ok()
            .and_then(|b| serde_json::from_slice::<Task>(&b).ok())
            .filter(|t| t.not_before.is_some());
        deferred.is_some()
    });
    let deferred = deferred.unwrap();
    assert_eq!(deferred.id, Some(id.clone()));
    let not_before = deferred.not_before().unwrap();
    assert_eq!(
        not_before,
        SystemTime::UNIX_EPOCH + Duration::from_secs(reset)
    );
    assert_eq!(deferred.attempt(), 1, "a deferral is no attempt");
    assert!(!t.client.worker(S0).result_for(&id).exists(), "no result");
    // Its slot goes idle (the task moved first), saying until when.
    let mut problem = String::new();
    wait_until(BOUND, "the slot idle, saying why", || {
        let status = t.client.read_status(S0).unwrap().unwrap();
        problem = status.problem.unwrap_or_default();
        status.status == conductor::WorkerState::Idle && !problem.is_empty()
    });
    assert!(
        problem.starts_with("claude is rate-limited until "),
        "{problem}"
    );
    // The inbox holds it: another send to the slot is refused as busy (exit 3).
    let busy = run_conductor(&t, &["send", "0", "another"], 3);
    assert!(busy.stderr.contains("inb1"), "{}", busy.stderr);

    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{}", r.error, w.stderr());
    assert_eq!(r.output, "done after the reset");
    assert_eq!(r.attempt, Some(1));
    let started = conductor::protocol::parse_rfc3339(r.started_at.as_deref().unwrap()).unwrap();
    assert!(started >= not_before, "started {:?}", r.started_at);
    let sent = server.scripted();
    assert_eq!(
        sent.iter()
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [429, 200]
    );
    assert!(sent[1]["t_start"].as_f64().unwrap() >= reset as f64);
}

#[test]
fn doctor_agent_says_claude_is_rate_limited_until_the_reset() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let reset = unix_now() + 3600;
    let server = ModelServer::start(t.dir.path(), usage_limited_script(reset, &[]));
    let env = subscriber_env(&t, &agents, &server);
    let check = doctor_agent(&t, &["--agent", "claude"], &env, 1);
    let detail = check["detail"].as_str().unwrap();
    let until =
        conductor::queue::limits::hh_mm(SystemTime::UNIX_EPOCH + Duration::from_secs(reset));
    assert!(
        detail.starts_with(&format!("rate-limited until {until} (")),
        "{check}"
    );
    // Only tried: nothing recorded on the root.
    assert!(!t.client.root().agent_limit("claude").exists());
}

#[test]
fn doctor_agent_says_claude_cannot_reach_its_api() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let server = ModelServer::start(t.dir.path(), json!({"turns": []}));
    let mut env = claude_env(&t, &agents, &server, 0);
    // A port nothing listens on: bound, then let go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (k, v) in env.iter_mut() {
        if k == "ANTHROPIC_BASE_URL" {
            *v = format!("http://127.0.0.1:{closed}");
        }
    }
    let check = doctor_agent(&t, &["--agent", "claude"], &env, 1);
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .starts_with("cannot reach the API: "),
        "{check}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .contains("ANTHROPIC_BASE_URL"),
        "{check}"
    );
}

mod until_loop;
mod worktree_tasks;
