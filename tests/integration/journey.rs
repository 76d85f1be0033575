//! The journey of issue 35 as a test: a real Claude Code, given conductor with
//! `claude mcp add conductor -- conductor mcp`, fans work out to three workers running
//! the real Claude Code, each task in its own worktree (the default place), and reviews
//! and merges their work, all over MCP. Every CLI talks to the scripted model server
//! (`tests/model_server/server.py`), which plays the orchestrator's turns and, by route,
//! each worker task's own. (The worktree task of each agent alone, Codex and Gemini CLI
//! too, is in `real_agents/worktree_tasks.rs`.)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use conductor::{Slot, TaskId, TaskResult};
use serde_json::{json, Value};

use crate::harness::{assert_nothing_left, bin, git, stop_child, wait_until, TestRoot};
use crate::real_agents::{claude_env, need_agent, ModelServer};

/// A real CLI starting, talking to the server and running tools: seconds, not minutes.
const BOUND: Duration = Duration::from_secs(90);
/// The orchestrator's whole run: its MCP server, three workers' tasks, the merges.
const JOURNEY_BOUND: Duration = Duration::from_secs(150);

/// The committed line the first two tasks both change, each its own way.
const GREETING: &str = "greeting = hello\n";

/// A repository with one commit holding the line the tasks change, and a file nobody
/// committed (so `git status` has something to keep).
fn repo(t: &TestRoot) -> PathBuf {
    let dir = t.dir.path().join("repo");
    fs::create_dir(&dir).unwrap();
    git(&dir, &["init", "--quiet", "--initial-branch=main"]);
    git(&dir, &["config", "user.name", "Test Person"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    fs::write(dir.join("greeting.txt"), GREETING).unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "--quiet", "-m", "start"]);
    fs::write(dir.join("scratch.txt"), "not committed\n").unwrap();
    dir.canonicalize().unwrap()
}

/// `env` with HOME set to a fresh `home` folder of the test's own.
fn with_home(t: &TestRoot, env: Vec<(String, String)>, home: &str) -> Vec<(String, String)> {
    let home = t.dir.path().join(home);
    fs::create_dir_all(&home).unwrap();
    let mut env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k != "HOME").collect();
    env.push(("HOME".into(), home.display().to_string()));
    env
}

/// `conductor-worker N REPO --preset claude`, one per slot, each Claude Code with its
/// own HOME; stopped (SIGTERM, then SIGKILL) when dropped.
struct Workers {
    children: Vec<Option<Child>>,
    stderr: Vec<PathBuf>,
}

impl Workers {
    fn start(t: &TestRoot, repo: &Path, n: u32, env: &[(String, String)]) -> Workers {
        let mut ws = Workers {
            children: Vec::new(),
            stderr: Vec::new(),
        };
        for slot in 0..n {
            let stderr = t.dir.path().join(format!("worker-{slot}.stderr"));
            let env = with_home(t, env.to_vec(), &format!("home-worker-{slot}"));
            let child = Command::new(bin("conductor-worker"))
                .arg(slot.to_string())
                .arg(repo)
                .args(["--preset", "claude"])
                .env("CONDUCTOR_HOME", t.path())
                .env_remove("CONDUCTOR_WORKER")
                .env("RUST_LOG", "conductor=debug")
                .envs(env)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(&stderr).unwrap())
                .spawn()
                .expect("spawn conductor-worker");
            ws.children.push(Some(child));
            ws.stderr.push(stderr);
        }
        for (slot, child) in ws.children.iter_mut().enumerate() {
            let child = child.as_mut().unwrap();
            let pid = child.id();
            let slot = Slot(slot as u32);
            wait_until(BOUND, &format!("worker {slot} to serve"), || {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("worker {slot} exited at start ({st})");
                }
                conductor::pool::serving(t.client.root(), slot, pid)
            });
        }
        ws
    }

    /// Every worker's debug log, for a failure's message.
    fn stderr(&self) -> String {
        self.stderr
            .iter()
            .map(|p| {
                format!(
                    "--- {}\n{}",
                    p.display(),
                    fs::read_to_string(p).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            stop_child(c);
        }
    }
}

/// Run `cmd` to its end within `bound` (killed and reaped past it), its output kept in
/// files under `dir` named `name`.
fn run_bounded(mut cmd: Command, dir: &Path, name: &str, bound: Duration) -> Output {
    let out = dir.join(format!("{name}.stdout"));
    let err = dir.join(format!("{name}.stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let mut status = None;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(bound, &format!("{name} to finish"), || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        })
    }));
    if waited.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let output = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: fs::read(&out).unwrap_or_default(),
        stderr: fs::read(&err).unwrap_or_default(),
    };
    if let Err(panic) = waited {
        eprintln!(
            "{name} was killed; its stdout:\n{}\nits stderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::panic::resume_unwind(panic);
    }
    output
}

/// The real `claude` with the orchestrator's environment, in the repository (found on
/// that environment's PATH: `Command` would look on the test's own).
fn claude(repo: &Path, env: &[(String, String)], args: &[&str]) -> Command {
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let exe = std::env::split_paths(path.unwrap_or_default())
        .map(|d| d.join("claude"))
        .find(|p| p.is_file())
        .expect("claude on the orchestrator's PATH");
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .current_dir(repo)
        .env_remove("CONDUCTOR_WORKER")
        .envs(env.iter().cloned());
    cmd
}

/// One MCP tool call the orchestrator made and what it was told.
#[derive(Debug)]
struct Call {
    name: String,
    input: Value,
    answer: String,
    is_error: bool,
}

impl Call {
    /// The answer as JSON (conductor's tools answer JSON text).
    fn json(&self) -> Value {
        serde_json::from_str(&self.answer)
            .unwrap_or_else(|e| panic!("{} answered no JSON ({e}): {}", self.name, self.answer))
    }
}

/// The tool calls of a conversation (an Anthropic request's `messages`), each with the
/// result the agent sent back for it.
fn calls_of(request: &Value) -> Vec<Call> {
    let messages = request["body"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let blocks: Vec<&Value> = messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .collect();
    let answer = |id: &Value| {
        blocks
            .iter()
            .find(|b| b["type"] == "tool_result" && &b["tool_use_id"] == id)
            .map(|b| {
                let text = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    other => other.to_string(),
                };
                (text, b["is_error"] == true)
            })
    };
    blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| {
            let (answer, is_error) = answer(&b["id"]).unwrap_or_default();
            Call {
                name: b["name"].as_str().unwrap_or_default().to_string(),
                input: b["input"].clone(),
                answer,
                is_error,
            }
        })
        .collect()
}

/// The worker tasks of the journey: id, route match (in the prompt), and the turns its
/// Claude Code plays: A and B change the committed line each its own way, C adds a file.
fn worker_routes() -> Value {
    let edit = |word: &str| {
        json!([
            {"tools": [{"name": "Read", "input": {"file_path": "greeting.txt"}}]},
            {"tools": [{"name": "Edit", "input": {"file_path": "greeting.txt",
                                                   "old_string": "hello", "new_string": word}}]},
            {"text": format!("The greeting now says {word}."),
             "usage": {"input_tokens": 300, "output_tokens": 30}},
        ])
    };
    json!([
        {"match": "TASK-A", "turns": edit("alpha")},
        {"match": "TASK-B", "turns": edit("beta")},
        {"match": "TASK-C", "turns": [
            {"tools": [{"name": "Write", "input": {"file_path": "added.txt",
                                                    "content": "added by C\n"}}]},
            {"text": "Added added.txt.", "usage": {"input_tokens": 200, "output_tokens": 20}},
        ]},
    ])
}

const TASKS: [(&str, &str); 3] = [
    (
        "ja",
        "TASK-A: in greeting.txt, greet alpha instead of hello.",
    ),
    (
        "jb",
        "TASK-B: in greeting.txt, greet beta instead of hello.",
    ),
    ("jc", "TASK-C: add a file added.txt."),
];

/// What the orchestrating Claude Code does, turn by turn, with conductor's MCP tools:
/// load them, submit the three tasks (each in a worktree), wait, read the results,
/// review each change, and merge: A, then C, then B, whose change conflicts with A's.
fn orchestrator_turns() -> Value {
    let tool = |name: &str, input: Value| json!({"name": format!("mcp__conductor__{name}"), "input": input});
    let ids: Vec<&str> = TASKS.iter().map(|(id, _)| *id).collect();
    let each =
        |name: &str| -> Vec<Value> { ids.iter().map(|id| tool(name, json!({"id": id}))).collect() };
    let submits: Vec<Value> = TASKS
        .iter()
        .map(|(id, prompt)| {
            tool(
                "submit",
                json!({"id": id, "prompt": prompt, "worktree": true}),
            )
        })
        .collect();
    let wait = tool("wait", json!({"ids": ids, "timeoutSecs": 50}));
    let merge = |id: &str| json!({"tools": [tool("merge", json!({"id": id}))]});
    let load = ["submit", "wait", "result", "diff", "merge"]
        .map(|t| format!("mcp__conductor__{t}"))
        .join(",");
    json!([
        {"text": "Loading conductor's tools.",
         "tools": [{"name": "ToolSearch", "input": {"query": format!("select:{load}")}}]},
        {"text": "Handing the three changes to workers.", "tools": submits},
        {"tools": [wait.clone()]},
        // Should the first wait end before all three (a loaded machine), the second
        // waits on; once they are done it answers at once.
        {"tools": [wait]},
        {"tools": each("result")},
        {"text": "Reviewing each change.", "tools": each("diff")},
        merge("ja"),
        merge("jc"),
        merge("jb"),
        {"text": "JOURNEY DONE", "usage": {"input_tokens": 500, "output_tokens": 40}},
    ])
}

/// The orchestrator's calls of tool `name` (`mcp__conductor__NAME`), none refused.
fn calls_named<'a>(calls: &'a [Call], name: &str) -> Vec<&'a Call> {
    let full = format!("mcp__conductor__{name}");
    let found: Vec<&Call> = calls.iter().filter(|c| c.name == full).collect();
    for c in &found {
        assert!(!c.is_error, "{c:#?}");
    }
    found
}

/// What the orchestrator was shown of each change: the patch of its own edit.
fn assert_diffs_told(calls: &[Call], base: &str) {
    let diffs = calls_named(calls, "diff");
    assert_eq!(diffs.len(), 3, "{calls:#?}");
    let want = [
        &["-greeting = hello", "+greeting = alpha"][..],
        &["-greeting = hello", "+greeting = beta"][..],
        &["+added by C"][..],
    ];
    for (((id, _), lines), call) in TASKS.iter().zip(want).zip(diffs) {
        let d = call.json();
        assert_eq!(d["id"], *id, "{d}");
        assert_eq!(d["branch"], format!("conductor/{id}"), "{d}");
        assert_eq!(d["base"], base, "{d}");
        assert_eq!(d["filesChanged"], 1, "{d}");
        let patch = d["patch"].as_str().unwrap_or_default();
        for l in lines {
            assert!(
                patch.lines().any(|x| x == *l),
                "no {l:?} in {id}'s patch:\n{patch}"
            );
        }
    }
}

/// The merges as the orchestrator was told them: A and C merged, each a new HEAD; B a
/// conflict in greeting.txt. Returns the HEADs A's and C's merges made.
fn assert_merges_told(calls: &[Call]) -> (String, String) {
    let merges = calls_named(calls, "merge");
    assert_eq!(merges.len(), 3, "{calls:#?}");
    let told: Vec<Value> = merges.iter().map(|c| c.json()).collect();
    let mut heads = Vec::new();
    for (v, id) in told.iter().zip(["ja", "jc"]) {
        assert_eq!(v["allMerged"], true, "{v}");
        assert_eq!(v["merged"], json!([id]), "{v}");
        assert_eq!(v["tasks"][0]["outcome"], "merged", "{v}");
        assert_eq!(v["tasks"][0]["into"], "main", "{v}");
        heads.push(
            v["tasks"][0]["head"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    let conflict = &told[2];
    assert_eq!(conflict["allMerged"], false, "{conflict}");
    assert_eq!(conflict["conflicts"], json!(["jb"]), "{conflict}");
    assert_eq!(conflict["tasks"][0]["outcome"], "conflict", "{conflict}");
    assert_eq!(
        conflict["tasks"][0]["files"],
        json!(["greeting.txt"]),
        "{conflict}"
    );
    (heads[0].clone(), heads[1].clone())
}

/// The main branch after the merges: two merge commits, A's then C's, each joining the
/// task's commit; the conflicting merge of B undone (HEAD still C's merge, `git status`
/// as before the journey, no merge in progress) and B's branch kept as it was.
fn assert_main_branch(
    repo: &Path,
    base: &str,
    results: &[TaskResult],
    heads: (String, String),
    status: &str,
) {
    let head_of = |i: usize| results[i].worktree.as_ref().unwrap().head_commit.clone();
    let parents = |commit: &str| -> Vec<String> {
        let line = git(repo, &["rev-list", "--parents", "-n", "1", commit]);
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    let (merged_a, merged_c) = heads;
    assert_eq!(git(repo, &["rev-parse", "HEAD"]).trim(), merged_c);
    assert_eq!(git(repo, &["branch", "--show-current"]).trim(), "main");
    assert_eq!(parents(&merged_c), [merged_a.clone(), head_of(2)]);
    assert_eq!(parents(&merged_a), [base.to_string(), head_of(0)]);
    let merges = git(repo, &["rev-list", "--merges", "main"]);
    assert_eq!(merges.lines().count(), 2, "{merges}");
    assert_eq!(
        fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "greeting = alpha\n"
    );
    assert_eq!(
        fs::read_to_string(repo.join("added.txt")).unwrap(),
        "added by C\n"
    );
    assert_eq!(git(repo, &["status", "--porcelain"]), status);
    let merging = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--quiet", "--verify", "MERGE_HEAD"])
        .output()
        .unwrap();
    assert!(!merging.status.success(), "a merge left in progress");
    // Merged branches are gone; the conflicting one is kept to resolve by hand.
    let branches = git(
        repo,
        &[
            "branch",
            "--list",
            "conductor/*",
            "--format=%(refname:short)",
        ],
    );
    assert_eq!(branches.trim(), "conductor/jb");
    assert_eq!(git(repo, &["rev-parse", "conductor/jb"]).trim(), head_of(1));
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

/// What the orchestrator was told of each task: finished, succeeded, with its cost,
/// session id and worktree branch.
fn assert_results_told(calls: &[Call]) {
    let results = calls_named(calls, "result");
    assert_eq!(results.len(), 3, "{calls:#?}");
    let mut sessions = Vec::new();
    for ((id, _), call) in TASKS.iter().zip(&results) {
        let v = call.json();
        assert_eq!(v["id"], *id, "{v}");
        let r = &v["result"];
        assert_eq!(r["success"], true, "{v}");
        assert!(r["costUsd"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
        let session = r["sessionId"].as_str().unwrap_or_default();
        assert!(is_uuid(session), "{v}");
        sessions.push(session.to_string());
        assert_eq!(r["worktree"]["branch"], format!("conductor/{id}"), "{v}");
        assert_eq!(r["worktree"]["kept"], true, "{v}");
    }
    sessions.sort();
    sessions.dedup();
    assert_eq!(sessions.len(), 3, "each task its own session");
}

/// Each task's result on the root, and its branch's content: the change its agent made
/// by its own tools, committed by conductor.
fn assert_branches(t: &TestRoot, repo: &Path, base: &str) -> Vec<TaskResult> {
    let want = [
        ("greeting.txt", "greeting = alpha\n"),
        ("greeting.txt", "greeting = beta\n"),
        ("added.txt", "added by C\n"),
    ];
    let mut all = Vec::new();
    for ((id, _), (file, content)) in TASKS.iter().zip(want) {
        let r = t
            .client
            .wait_for_task(&TaskId::from(*id), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{id}'s result: {e}"));
        assert!(r.success, "{id}: {:?}", r.error);
        assert!(r.cost_usd.unwrap_or(0.0) > 0.0, "{id}: {:?}", r.cost_usd);
        assert!(r.denials.is_empty(), "{id}: {:?}", r.denials);
        let change = r.worktree.clone().expect("a worktree change");
        // The default place, next to the repository.
        let place = repo.parent().unwrap().join("repo.conductor-worktrees");
        assert_eq!(change.path, place.join(id), "{change:?}");
        assert_eq!(change.base_commit, base);
        assert_eq!(change.files_changed, 1, "{change:?}");
        assert!(change.committed_for_agent, "{change:?}");
        // The commit stays when a merge removes the branch.
        let at = format!("{}:{file}", change.head_commit);
        assert_eq!(git(repo, &["show", &at]), content, "{id}'s branch");
        all.push(r);
    }
    all
}

/// Every script played out, no conversation past its end: the orchestrator's turns
/// and each task's own. Returns the orchestrator's last request, its whole conversation.
fn played_out(server: &ModelServer) -> Value {
    let requests = server.requests();
    let played = |route: Value| {
        requests
            .iter()
            .filter(|r| r["kind"] == "scripted" && r["route"] == route)
            .count()
    };
    assert_eq!(
        played(Value::Null),
        orchestrator_turns().as_array().unwrap().len()
    );
    for route in worker_routes().as_array().unwrap() {
        assert_eq!(
            played(route["match"].clone()),
            route["turns"].as_array().unwrap().len(),
            "{route}"
        );
    }
    assert!(
        !requests.iter().any(|r| r["kind"] == "exhausted"),
        "a conversation went past its script"
    );
    requests
        .into_iter()
        .rev()
        .find(|r| r["kind"] == "scripted" && r["route"].is_null())
        .unwrap()
}

/// The orchestrator's environment: Claude Code's with its own HOME, conductor's own
/// `conductor` first on PATH (for `conductor mcp`), the test's root.
fn orchestrator_env(t: &TestRoot, env: Vec<(String, String)>) -> Vec<(String, String)> {
    let conductor_dir = bin("conductor").parent().unwrap().to_path_buf();
    let mut env = with_home(t, env, "home-orchestrator");
    for (k, v) in env.iter_mut() {
        if k == "PATH" {
            *v = format!("{}:{v}", conductor_dir.display());
        }
    }
    env.push(("CONDUCTOR_HOME".into(), t.path().display().to_string()));
    env
}

#[test]
fn claude_orchestrates_three_claude_workers_in_worktrees_over_mcp() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let repo = repo(&t);
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": orchestrator_turns(), "routes": worker_routes()}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let workers = Workers::start(&t, &repo, 3, &env);

    let env = orchestrator_env(&t, env);
    let add = ["mcp", "add", "conductor", "--", "conductor", "mcp"];
    let added = run_bounded(claude(&repo, &env, &add), t.dir.path(), "mcp-add", BOUND);
    assert!(added.status.success(), "claude mcp add: {added:?}");

    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let status_before = git(&repo, &["status", "--porcelain"]);
    let orchestrate = [
        "-p",
        "Have three workers change this repository, each in its own worktree, then review and merge their work.",
        "--output-format",
        "json",
        "--allowedTools",
        "mcp__conductor",
    ];
    let ran = run_bounded(
        claude(&repo, &env, &orchestrate),
        t.dir.path(),
        "orchestrator",
        JOURNEY_BOUND,
    );
    let said: Value = serde_json::from_slice(&ran.stdout).unwrap_or_else(|e| {
        panic!(
            "the orchestrator printed no JSON ({e}): {ran:?}\nworkers:\n{}",
            workers.stderr()
        )
    });
    assert_eq!(
        said["is_error"],
        false,
        "{said}\nworkers:\n{}",
        workers.stderr()
    );
    assert_eq!(said["result"], "JOURNEY DONE", "{said}");
    assert!(ran.status.success(), "{ran:?}");

    let calls = calls_of(&played_out(&server));
    for submit in calls.iter().filter(|c| c.name == "mcp__conductor__submit") {
        assert!(!submit.is_error, "{submit:#?}");
        assert_eq!(submit.json()["id"], submit.input["id"], "{submit:#?}");
    }
    assert_results_told(&calls);
    assert_diffs_told(&calls, &base);
    let heads = assert_merges_told(&calls);
    let results = assert_branches(&t, &repo, &base);
    assert_main_branch(&repo, &base, &results, heads, &status_before);
    // Three workers: all started at once, each took one.
    let mut ran_on: Vec<Option<u32>> = results.iter().map(|r| r.worker).collect();
    ran_on.sort();
    assert_eq!(ran_on, [Some(0), Some(1), Some(2)], "{results:#?}");
    assert!(
        said["total_cost_usd"].as_f64().unwrap_or(0.0) > 0.0,
        "{said}"
    );
    drop(workers);
    assert_nothing_left(t.path());
}
