//! What a person sees: views that fit the width and show prompts rather than ids, log
//! files without escape sequences, outcome names, one vocabulary of flags.

use std::fs;
use std::time::Duration;

use conductor::{Slot, Task, TaskId};
use serde_json::Value;

use crate::harness::{agent, bin, wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);

/// `conductor ARGS` on the test root with `env`, never colouring or sizing from the
/// environment the tests run in.
fn conductor_with(t: &TestRoot, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = assert_cmd::Command::new(bin("conductor"));
    c.args(args)
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .timeout(BOUND);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run conductor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[track_caller]
fn ok(t: &TestRoot, args: &[&str], env: &[(&str, &str)]) -> String {
    let (code, stdout, stderr) = conductor_with(t, args, env);
    assert_eq!(code, 0, "conductor {args:?}\n{stdout}\n{stderr}");
    stdout
}

const LONG: [&str; 3] = [
    "refactor the configuration loader so that every error names the file, the field and the accepted range, and add tests for each of them",
    "write the release notes for version 2.0 from the merged pull requests since the last tag, grouped by area, with one sentence per change",
    "find out why the integration tests of the queue flake on a loaded two-core machine and fix the cause rather than widening the timeouts",
];

#[test]
fn status_queue_and_tasks_fit_sixty_columns_and_show_the_prompts() {
    let t = TestRoot::new();
    {
        let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        for (i, p) in LONG.iter().enumerate().take(2) {
            let id = t
                .client
                .write_task(S0, &Task::new(*p).with_id(format!("done{i}").as_str()))
                .unwrap();
            t.client.wait_for_result(S0, &id, BOUND).unwrap();
        }
    }
    // With no worker left, queued tasks stay pending (and say why).
    ok(
        &t,
        &["submit", LONG[2], "--id", "later", "--key", "alice"],
        &[],
    );
    ok(&t, &["submit", LONG[0], "--id", "later2"], &[]);

    for view in ["status", "queue", "tasks"] {
        let out = ok(&t, &[view], &[("COLUMNS", "60")]);
        for line in out.lines() {
            assert!(
                line.chars().count() <= 60,
                "`{view}` wider than 60 columns:\n{line}\n---\n{out}"
            );
        }
        assert!(!out.contains('\x1b'), "{view}: escapes in a pipe:\n{out}");
        let shows_a_prompt = LONG
            .iter()
            .any(|p| out.contains(&p[..15]) && !out.contains(*p));
        assert!(shows_a_prompt, "`{view}` shows no cut prompt:\n{out}");
    }
    // Where the width allows, the ids are there too; unbounded (a pipe), the table is
    // not cut (the previews themselves stop at 120 characters).
    let wide = ok(&t, &["tasks"], &[("COLUMNS", "250")]);
    assert!(wide.contains("done1") && wide.contains("later2"), "{wide}");
    let piped = ok(&t, &["tasks"], &[]);
    assert!(LONG.iter().all(|p| piped.contains(&p[..110])), "{piped}");
    let queue = ok(&t, &["queue"], &[("COLUMNS", "60")]);
    assert!(queue.contains("no idle worker"), "{queue}");
}

#[test]
fn a_worker_log_file_holds_compact_lines_and_no_escape_sequences() {
    let t = TestRoot::new();
    // As if started from a colour terminal, but with stderr going to a file.
    let w = WorkerProc::start(
        &t,
        S0,
        "sh -c 'cat; echo oops >&2; exit 3'",
        &[],
        &[("NO_COLOR", ""), ("TERM", "xterm-256color")],
    );
    let id = t
        .client
        .write_task(S0, &Task::new(LONG[1]).with_id("logged"))
        .unwrap();
    let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
    assert!(!r.success);
    // A refused inbox file makes a warning line too.
    fs::write(t.client.worker(S0).task(), "{ not json").unwrap();
    wait_until(BOUND, "the broken task is rejected", || {
        w.stderr().contains("warn")
    });
    let log = w.stderr();
    assert!(
        !log.contains('\x1b'),
        "escape sequences in the log file:\n{log:?}"
    );
    let finished = log
        .lines()
        .find(|l| l.contains("FAILED"))
        .unwrap_or_else(|| panic!("no line for the failed task:\n{log}"));
    assert!(finished.contains("write the release notes"), "{log}");
    assert!(finished.contains("logged"), "{log}");
    // `14:03:07 …`: the local time to the second, no date, no level for INFO.
    let stamp: Vec<char> = finished.chars().take(9).collect();
    assert!(
        stamp[2] == ':' && stamp[5] == ':' && stamp[8] == ' ',
        "{finished}"
    );
    assert!(!log.contains(" INFO "), "{log}");
}

#[test]
fn run_names_how_each_task_ended_and_totals_the_cost() {
    let t = TestRoot::new();
    // Timed out, then cancelled (the chain stops), all under their prompts.
    let (code, stdout, stderr) = conductor_with(
        &t,
        &[
            "run",
            "--chain",
            "--timeout",
            "1s",
            "--agent",
            "sleep 30",
            "--root",
            t.path().to_str().unwrap(),
            "first step that never ends",
            "second step",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("── [1/2] first step that never ends"),
        "{stdout}"
    );
    assert!(stdout.contains("TIMED OUT"), "{stdout}");
    assert!(stdout.contains("── [2/2] second step"), "{stdout}");
    assert!(stdout.contains("CANCELLED"), "{stdout}");
    assert!(!stdout.contains("FAILED"), "{stdout}");
    assert!(
        stderr.contains("2 task(s): 0 succeeded, 2 failed (1 TIMED OUT, 1 CANCELLED)"),
        "{stderr}"
    );

    // Cost and turns per task and in total; a private root is not named once deleted.
    let fake = agent("fake_claude.sh").display().to_string();
    let args = ["run", "--json", "-n", "2", "--preset", "claude", "--agent"];
    let (code, stdout, _) = conductor_with(&t, &[&args[..], &[&fake, "a", "b"]].concat(), &[]);
    assert_eq!(code, 0, "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert!(doc.get("root").is_none(), "{doc}");
    assert_eq!(doc["numTurns"], 4, "{doc}");
    assert!(
        (doc["costUsd"].as_f64().unwrap() - 0.0084).abs() < 1e-9,
        "{doc}"
    );
    let (code, stdout, stderr) = conductor_with(
        &t,
        &["run", "--keep", "--preset", "claude", "--agent", &fake, "c"],
        &[],
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("ok in") && stdout.contains("$0.0042 · 2 turns"),
        "{stdout}"
    );
    assert!(stderr.contains("$0.0042 · 2 turns"), "{stderr}");
    let kept = stderr
        .lines()
        .find_map(|l| l.strip_prefix("kept the root: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(std::path::Path::new(kept).join("workers/0").is_dir());
    // The private root is written without fsyncs (synced once at the end when kept);
    // the user's own root (--root) keeps the default, fsyncs on.
    let config: Value =
        serde_json::from_slice(&fs::read(std::path::Path::new(kept).join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["fsync"], false, "{config}");
    fs::remove_dir_all(kept).unwrap();
    let own = t.dir.path().join("own-root");
    let own_s = own.display().to_string();
    let (code, stdout, _) =
        conductor_with(&t, &["run", "--root", &own_s, "--agent", "cat", "d"], &[]);
    assert_eq!(code, 0, "{stdout}");
    let config = fs::read_to_string(own.join("config.json")).unwrap_or_default();
    assert!(!config.contains("fsync"), "{config}");
}

#[test]
fn one_duration_syntax_and_the_preset_wherever_an_agent_is_named() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    ok(
        &t,
        &["submit", "x", "--id", "d1", "--timeout", "1h30m"],
        &[],
    );
    let pending = conductor::queue::Queue::new(t.client.root().clone())
        .pending()
        .unwrap();
    let task: Task = serde_json::from_slice(&fs::read(&pending[0].path).unwrap()).unwrap();
    assert_eq!(task.timeout_secs, Some(5400));
    ok(
        &t,
        &["send", "0", "y", "--id", "d2", "--timeout", "90"],
        &[],
    );
    assert_eq!(
        t.client.read_task(S0).unwrap().unwrap().timeout_secs,
        Some(90)
    );
    ok(&t, &["gc", "--older-than", "1"], &[]);
    ok(&t, &["tasks", "--since", "1h30m"], &[]);
    for (cmd, flag) in [
        (vec!["submit"], "--timeout"),
        (vec!["send"], "--timeout"),
        (vec!["run"], "--timeout"),
        (vec!["wait"], "--wait-timeout"),
        (vec!["gc"], "--older-than"),
        (vec!["worker"], "--kill-grace"),
    ] {
        let help = ok(&t, &[&cmd[..], &["--help"]].concat(), &[]);
        let said = help
            .split(flag)
            .nth(1)
            .map(|rest| rest.chars().take(300).collect::<String>())
            .unwrap_or_default();
        assert!(said.contains("seconds"), "{cmd:?} {flag}: {said}");
    }

    // doctor checks the preset's command line.
    let (_, stdout, stderr) = conductor_with(&t, &["doctor", "--preset", "claude", "--json"], &[]);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let agent_check = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent")
        .unwrap_or_else(|| panic!("{doc}"))
        .to_string();
    assert!(agent_check.contains("claude"), "{agent_check}");
    let (code, _, stderr) = conductor_with(&t, &["doctor", "--preset", "nope"], &[]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn retry_resumes_the_session_a_stopped_claude_announced() {
    let t = TestRoot::new();
    let fake = agent("claude_announces_then_hangs.sh")
        .display()
        .to_string();
    let _w = WorkerProc::start(&t, S0, &fake, &["--preset", "claude"], &[]);
    let mut task = Task::new("keep going").with_id("long");
    task.timeout_secs = Some(1);
    let id = t.client.write_task(S0, &task).unwrap();
    let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
    assert_eq!(r.outcome, Some(conductor::Outcome::Timeout), "{r:?}");

    let stdout = ok(&t, &["retry", "0", "long", "--resume", "--wait"], &[]);
    assert!(stdout.starts_with("resumed sess-"), "{stdout}");
    let again = t
        .client
        .read_result_for(S0, &TaskId::from("long-r1"))
        .unwrap()
        .unwrap();
    assert!(again.success, "{again:?}");
}

/// Issue 25, item 5: at 60 columns `status` and `tasks` keep the ID column (shortened
/// to a unique prefix), and that prefix — any unique prefix of at least 4 characters —
/// names the task to every command that takes an id.
#[test]
fn narrow_views_keep_a_short_id_that_every_command_takes() {
    let t = TestRoot::new();
    // A running task for `status`, queued ones for `tasks`.
    let _w = WorkerProc::start(&t, S0, "sleep 60", &[], &[]);
    let running = t.client.write_task(S0, &Task::new(LONG[0])).unwrap();
    t.client
        .wait_for_status(S0, &[conductor::WorkerState::Working], BOUND)
        .unwrap();
    let mut queued = Vec::new();
    for p in &LONG[1..] {
        let out = ok(
            &t,
            &["submit", p, "--key", "k", "--agent-preset", "codex"],
            &[],
        );
        queued.push(out.trim().to_string());
    }
    assert!(queued.iter().all(|id| id.len() > 16), "{queued:?}");

    let status = ok(&t, &["status"], &[("COLUMNS", "60")]);
    let tasks = ok(&t, &["tasks"], &[("COLUMNS", "60")]);
    for (view, out) in [("status", &status), ("tasks", &tasks)] {
        assert!(out.lines().next().unwrap().contains("ID"), "{view}:\n{out}");
        for line in out.lines() {
            assert!(line.chars().count() <= 60, "{view}: {line:?}\n{out}");
        }
    }
    // The short form shown is a prefix of the id, shorter than it, and names it.
    let shown = |out: &str, id: &str| -> String {
        out.split_whitespace()
            .find(|w| w.len() >= 4 && w.len() < id.len() && id.starts_with(*w))
            .unwrap_or_else(|| panic!("no short form of {id} in:\n{out}"))
            .to_string()
    };
    let run_short = shown(&status, &running.to_string());
    let short = shown(&tasks, &queued[0]);
    shown(&tasks, &queued[1]);

    let res = ok(&t, &["tasks", "--json"], &[]);
    assert!(res.contains(&queued[0]), "{res}");
    // Every command that takes an id takes the short form.
    let logs = conductor_with(&t, &["logs", &run_short], &[]);
    assert_eq!(logs.0, 0, "logs {run_short}: {logs:?}");
    let cancelled = ok(&t, &["cancel", &short], &[]);
    assert!(cancelled.contains(&queued[0]), "{cancelled}");
    let waited = conductor_with(&t, &["wait", &short, "--json"], &[]);
    assert!(waited.1.contains(&queued[0]), "{waited:?}");
    let result = conductor_with(&t, &["result", &short, "--json"], &[]);
    assert!(result.1.contains("cancelled"), "{result:?}");

    // Too short, or several ids start with it: refused, saying why.
    ok(&t, &["submit", "x", "--id", "same-1"], &[]);
    ok(&t, &["submit", "y", "--id", "same-2"], &[]);
    let (code, _, err) = conductor_with(&t, &["cancel", "same"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ambiguous") && err.contains("same-1") && err.contains("same-2"),
        "{err}"
    );
    let (code, _, err) = conductor_with(&t, &["cancel", "sam"], &[]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("no task sam"), "{err}");
}

/// A folder holding `codex` — the fake of `tests/agents/fake-codex` — first on a `PATH`.
pub(crate) fn path_with_fake_codex(t: &TestRoot) -> String {
    let bin = t.dir.path().join("fake-bin");
    fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(agent("fake-codex"), bin.join("codex")).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The row of slot `n` in `conductor status`'s table.
fn status_row(out: &str, n: u32) -> String {
    out.lines()
        .find(|l| l.starts_with(&format!("{n} ")))
        .unwrap_or_else(|| panic!("no row for slot {n}:\n{out}"))
        .to_string()
}

#[test]
fn status_shows_which_agent_runs_and_ran_each_task_and_what_the_worker_serves() {
    let t = TestRoot::new();
    let path = path_with_fake_codex(&t);
    let _w = WorkerProc::start(
        &t,
        S0,
        "cat",
        &["--preset", "command", "--preset", "codex"],
        &[("PATH", &path)],
    );
    let gate = t.dir.path().join("go");
    let mut task = Task::new(format!("look gate={}", gate.display())).with_id("cx-run");
    task.agent = Some("codex".into());
    let id = t.client.write_task(S0, &task).unwrap();
    let working = t
        .client
        .wait_for_status(S0, &[conductor::WorkerState::Working], BOUND)
        .unwrap();
    let pid = working.agent_pid.expect("the agent's pid");

    let wide = [("COLUMNS", "200")];
    let row = status_row(&ok(&t, &["status"], &wide), 0);
    assert!(row.contains(&format!("codex {pid}")), "{row}");
    assert!(row.contains("command,codex"), "{row}");
    let json: Value = serde_json::from_str(&ok(&t, &["status", "--json"], &[])).unwrap();
    let slot = &json["workers"][0];
    assert_eq!(slot["agent"], "codex", "{slot}");
    assert_eq!(slot["presets"], serde_json::json!(["command", "codex"]));

    fs::write(&gate, "").unwrap();
    let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.agent.as_deref(), Some("codex"));
    assert!(r.output.starts_with("fake codex: look"), "{}", r.output);
    wait_until(
        BOUND,
        "the slot idle after cx-run",
        || matches!(t.client.read_status(S0), Ok(Some(s)) if s.status != conductor::WorkerState::Working),
    );
    let row = status_row(&ok(&t, &["status"], &wide), 0);
    assert!(row.contains(" codex "), "the agent that ran it: {row}");

    // A task naming no preset runs under the worker's first.
    let id = t
        .client
        .write_task(S0, &Task::new("plain").with_id("cmd-run"))
        .unwrap();
    let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
    assert_eq!(r.agent.as_deref(), Some("command"));
    wait_until(BOUND, "status naming cmd-run's agent", || {
        let json: Value = serde_json::from_str(&ok(&t, &["status", "--json"], &[])).unwrap();
        json["workers"][0]["taskId"] == "cmd-run" && json["workers"][0]["agent"] == "command"
    });
}
