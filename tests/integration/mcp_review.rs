//! The review tools over MCP (`diff`, `merge`, `discard`) and `merge --all` on the CLI, with real git: worktree tasks run by a worker whose fake agent (`tests/agents/edit.sh`) writes files, a conflicting pair among them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use conductor::mcp::schema;
use conductor::Slot;
use rmcp::model::CallToolResult;
use serde_json::{json, Value};

use crate::harness::{agent, assert_nothing_left, bin, git, git_repo, TestRoot, WorkerProc};
use crate::mcp::{call, close, connect, ok, runtime, tool_error, Mcp};
use crate::prereq::require;

/// A repository at `<temp>/repo` on branch main with one commit: a.txt.
fn repo(t: &TestRoot) -> PathBuf {
    git_repo(t, &[("a.txt", "base\n")])
}

fn branches(repo: &Path) -> Vec<String> {
    git(
        repo,
        &[
            "branch",
            "--list",
            "conductor/*",
            "--format=%(refname:short)",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

/// The tool's answer, which must fit its output schema.
#[track_caller]
fn fits(tools: &[rmcp::model::Tool], name: &str, r: &CallToolResult) -> Value {
    let v = ok(r);
    let tool = tools.iter().find(|t| t.name == name).expect("listed");
    let out = Value::Object((*tool.output_schema.clone().expect("an output schema")).clone());
    schema::check(&out, &v).unwrap_or_else(|e| panic!("{name}'s answer misfits: {e}: {v}"));
    v
}

/// Submit a worktree task in `repo` over MCP and wait for it to finish (one at a time,
/// so they finish in the order submitted).
async fn run_task(mcp: &Mcp, repo: &Path, id: &str, prompt: &str) {
    ok(&call(
        mcp,
        "submit",
        json!({"prompt": prompt, "id": id, "worktree": true, "dir": repo}),
    )
    .await);
    let waited = ok(&call(mcp, "wait", json!({"ids": [id], "timeoutSecs": 50})).await);
    assert_eq!(waited["tasks"][0]["state"], "done", "{waited}");
}

#[test]
fn diff_merge_and_discard_over_mcp_a_conflict_leaving_the_repository_as_it_was() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    runtime().block_on(async {
        let mcp = connect(&t, &[]).await;
        let tools = mcp.list_all_tools().await.expect("tools/list");
        run_task(&mcp, &repo, "r1", "WRITE a.txt one").await;
        run_task(&mcp, &repo, "r2", "WRITE a.txt two").await;
        run_task(&mcp, &repo, "r3", "WRITE c.txt three").await;
        assert_eq!(
            branches(&repo),
            ["conductor/r1", "conductor/r2", "conductor/r3"]
        );

        let d = fits(
            &tools,
            "diff",
            &call(&mcp, "diff", json!({"id": "r1"})).await,
        );
        assert_eq!(d["branch"], "conductor/r1", "{d}");
        assert_eq!(d["filesChanged"], 1, "{d}");
        assert_eq!(d["diffstat"], "+1 -1 in 1 file", "{d}");
        let patch = d["patch"].as_str().unwrap();
        assert!(patch.contains("-base") && patch.contains("+one"), "{d}");
        assert!(d["stat"].as_str().unwrap().contains("a.txt"), "{d}");
        assert_eq!(d["truncated"], false);
        assert_eq!(d["patchBytes"], patch.len());
        let short = fits(
            &tools,
            "diff",
            &call(&mcp, "diff", json!({"id": "r1", "maxBytes": 20})).await,
        );
        assert_eq!(short["truncated"], true, "{short}");
        assert!(short["patch"].as_str().unwrap().len() <= 20, "{short}");
        assert_eq!(short["patchBytes"], patch.len());

        // All, in the order they finished: r2 conflicts with r1, r3 goes on.
        let before_all = git(&repo, &["rev-parse", "HEAD"]);
        let m = fits(
            &tools,
            "merge",
            &call(&mcp, "merge", json!({"all": true})).await,
        );
        assert_eq!(m["merged"], json!(["r1", "r3"]), "{m}");
        assert_eq!(m["conflicts"], json!(["r2"]), "{m}");
        assert_eq!(m["left"], json!([]), "{m}");
        assert_eq!(m["allMerged"], false);
        let order: Vec<&str> = m["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["r1", "r2", "r3"], "{m}");
        assert_eq!(m["tasks"][1]["outcome"], "conflict");
        assert_eq!(m["tasks"][1]["files"], json!(["a.txt"]), "{m}");
        assert_eq!(m["tasks"][0]["into"], "main");
        assert_eq!(git(&repo, &["status", "--porcelain"]), "", "clean");
        let merges = git(
            &repo,
            &[
                "log",
                "--first-parent",
                "--format=%s",
                &format!("{}..HEAD", before_all.trim()),
            ],
        );
        assert_eq!(merges.lines().count(), 2, "{merges}");
        assert_eq!(
            std::fs::read_to_string(repo.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(repo.join("c.txt").exists());
        assert_eq!(
            branches(&repo),
            ["conductor/r2"],
            "the conflicting branch is kept"
        );

        // The conflicting one alone: the repository exactly as it was.
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let m = fits(
            &tools,
            "merge",
            &call(&mcp, "merge", json!({"id": "r2"})).await,
        );
        assert_eq!(m["conflicts"], json!(["r2"]), "{m}");
        assert_eq!(m["tasks"][0]["files"], json!(["a.txt"]), "{m}");
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "HEAD unchanged");
        assert_eq!(
            git(&repo, &["status", "--porcelain"]),
            "",
            "status unchanged"
        );
        let squashed = fits(
            &tools,
            "merge",
            &call(&mcp, "merge", json!({"id": "r2", "squash": true})).await,
        );
        assert_eq!(squashed["conflicts"], json!(["r2"]), "{squashed}");
        assert_eq!(
            git(&repo, &["rev-parse", "HEAD"]),
            head,
            "squash: HEAD unchanged"
        );
        assert_eq!(git(&repo, &["status", "--porcelain"]), "");

        // A checkout with uncommitted changes: the task is left, with the reason.
        std::fs::write(repo.join("a.txt"), "mine\n").unwrap();
        let m = fits(
            &tools,
            "merge",
            &call(&mcp, "merge", json!({"all": true})).await,
        );
        assert_eq!(m["left"], json!(["r2"]), "{m}");
        let reason = m["tasks"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("a.txt"), "{m}");
        git(&repo, &["checkout", "--", "a.txt"]);
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);

        // Redo on top: a new task from HEAD, its prompt carrying the conflict; it merges.
        let e = tool_error(
            &call(
                &mcp,
                "retry",
                json!({"id": "r2", "rebase": true, "prompt": "x"}),
            )
            .await,
        );
        assert!(e.contains("without `prompt`"), "{e}");
        let e = tool_error(&call(&mcp, "retry", json!({"id": "r1", "rebase": true})).await);
        assert!(e.contains("is merged"), "{e}");
        let redo = ok(&call(
            &mcp,
            "retry",
            json!({"id": "r2", "rebase": true, "newId": "r2-top"}),
        )
        .await);
        assert_eq!(redo["id"], "r2-top", "{redo}");
        let waited = ok(&call(&mcp, "wait", json!({"ids": ["r2-top"], "timeoutSecs": 50})).await);
        assert_eq!(waited["tasks"][0]["state"], "done", "{waited}");
        let record = t.path().join("workers/0/tasks/r2-top.json");
        let record: Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
        let prompt = record["prompt"].as_str().unwrap();
        assert!(prompt.starts_with("WRITE a.txt two\n"), "{prompt}");
        assert!(prompt.contains("conflicts in: a.txt"), "{prompt}");
        let m = fits(
            &tools,
            "merge",
            &call(&mcp, "merge", json!({"id": "r2-top"})).await,
        );
        assert_eq!(m["merged"], json!(["r2-top"]), "{m}");
        assert_eq!(
            std::fs::read_to_string(repo.join("a.txt")).unwrap(),
            "two\n"
        );

        let gone = fits(
            &tools,
            "discard",
            &call(&mcp, "discard", json!({"id": "r2", "force": true})).await,
        );
        assert_eq!(gone["alreadyGone"], false, "{gone}");
        assert_eq!(gone["branch"], "conductor/r2");
        assert!(branches(&repo).is_empty());
        let again = fits(
            &tools,
            "discard",
            &call(&mcp, "discard", json!({"id": "r2", "force": true})).await,
        );
        assert_eq!(again["alreadyGone"], true, "{again}");
        let e = tool_error(&call(&mcp, "merge", json!({"id": "r2"})).await);
        assert!(e.contains("gone"), "{e}");
        // The patch of a merged task is still shown, from its recorded head.
        let d = fits(
            &tools,
            "diff",
            &call(&mcp, "diff", json!({"id": "r3"})).await,
        );
        assert_eq!(d["branchExists"], false, "{d}");
        assert!(d["patch"].as_str().unwrap().contains("+three"), "{d}");

        // Bad requests are tool errors naming what is wrong.
        let e = tool_error(&call(&mcp, "merge", json!({})).await);
        assert!(e.contains("`id`") && e.contains("all"), "{e}");
        let e = tool_error(&call(&mcp, "merge", json!({"id": "r1", "all": true})).await);
        assert!(e.contains("not both"), "{e}");
        let e = tool_error(&call(&mcp, "diff", json!({"id": "nope"})).await);
        assert!(e.contains("no task nope"), "{e}");
        let e = tool_error(&call(&mcp, "diff", json!({"id": "r1", "bogus": 1})).await);
        assert!(e.contains("unknown argument `bogus`"), "{e}");
        let plain = t.dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        ok(&call(
            &mcp,
            "submit",
            json!({"prompt": "WRITE p.txt x", "id": "p1", "dir": plain}),
        )
        .await);
        ok(&call(&mcp, "wait", json!({"ids": ["p1"], "timeoutSecs": 50})).await);
        let e = tool_error(&call(&mcp, "diff", json!({"id": "p1"})).await);
        assert!(e.contains("did not run in a worktree"), "{e}");
        close(mcp).await;
    });
    drop(w);
    assert_nothing_left(t.path());
}

fn conductor(t: &TestRoot, args: &[&str]) -> std::process::Output {
    Command::new(bin("conductor"))
        .args(args)
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .output()
        .expect("run conductor")
}

#[test]
fn cli_merge_all_goes_on_past_a_conflict_and_reports_each_task() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    let bound = Duration::from_secs(60);
    for (id, prompt) in [
        ("c1", "WRITE a.txt one"),
        ("c2", "WRITE a.txt two"),
        ("c3", "WRITE d.txt four"),
    ] {
        let out = conductor(
            &t,
            &[
                "submit",
                "--worktree",
                "--dir",
                repo.to_str().unwrap(),
                "--id",
                id,
                prompt,
            ],
        );
        assert!(out.status.success(), "{out:?}");
        t.client
            .wait_for_task(&conductor::TaskId::from(id), bound)
            .unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    let out = conductor(&t, &["merge", "--all"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("merged task c1") && stdout.contains("merged task c3"),
        "{stdout}"
    );
    assert!(
        stderr.contains("task c2") && stderr.contains("conflicts in a.txt"),
        "{stderr}"
    );
    assert!(
        stderr.contains("merged 2, 1 conflicting, 0 check failed, 0 left of 3 tasks"),
        "{stderr}"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(branches(&repo), ["conductor/c2"]);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn the_python_sdk_finds_the_review_tools_answers_fit_their_output_schemas() {
    require!(crate::prereq::python_mcp());
    let t = TestRoot::new();
    let repo = repo(&t);
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_sdk/review.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(bin("conductor"))
        .arg(t.path())
        .arg(&repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Python SDK's session failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    for tool in ["diff", "merge", "discard"] {
        assert!(
            seen["tools"].as_array().unwrap().contains(&json!(tool)),
            "{seen}"
        );
    }
    assert!(
        seen["diff"]["patch"].as_str().unwrap().contains("+one"),
        "{seen}"
    );
    assert_eq!(seen["merge"]["merged"], json!(["r1", "r3"]), "{seen}");
    assert_eq!(seen["merge"]["conflicts"], json!(["r2"]), "{seen}");
    assert_eq!(seen["discard"]["alreadyGone"], false, "{seen}");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(branches(&repo).is_empty());
    drop(w);
    assert_nothing_left(t.path());
}
