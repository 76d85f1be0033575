//! The real agent CLIs working in a task's own git worktree (`worktree: true`, the default
//! place next to the repository): each writes a file with its own tool, the file lands on
//! the task's branch and not in the user's checkout. And what the agent is refused is
//! part of its result (Claude's `permission_denials`).

use std::fs;
use std::path::{Path, PathBuf};

use conductor::{Task, TaskId, TaskResult};
use serde_json::{json, Value};

use super::{
    claude_env, codex_env, gemini_env, need_agent, result_of, task_log, ModelServer, RealWorker, S0,
};
use crate::harness::{assert_nothing_left, git, git_repo, run_conductor, TestRoot};

/// A repository at `<temp>/repo` on branch main with one commit (a.txt).
fn repo(t: &TestRoot) -> PathBuf {
    git_repo(t, &[("a.txt", "base\n")])
}

/// Where task `id`'s worktree goes by default: next to the repository.
fn default_worktree(repo: &Path, id: &str) -> PathBuf {
    repo.parent()
        .unwrap()
        .join("repo.conductor-worktrees")
        .join(id)
}

/// Send a `worktree: true` task running in `repo` to slot 0.
fn send_worktree_task(t: &TestRoot, id: &str, prompt: &str, repo: &Path) -> TaskId {
    let mut task = Task::new(prompt).with_id(id);
    task.dir = Some(repo.to_path_buf());
    task.worktree = Some(true);
    t.client.write_task(S0, &task).expect("write_task")
}

/// The file `name` as task `id`'s branch holds it.
fn on_branch(repo: &Path, id: &str, name: &str) -> String {
    git(repo, &["show", &format!("conductor/{id}:{name}")])
}

/// The task succeeded on a kept branch in the default place, holding `files` (name,
/// content), none of them in the user's checkout, which is clean.
#[track_caller]
fn assert_on_branch_only(r: &TaskResult, repo: &Path, files: &[(&str, &str)]) {
    let id = r.task_id.to_string();
    let w = r.worktree.as_ref().expect("a worktree");
    assert_eq!(w.path, default_worktree(repo, &id), "{w:?}");
    assert!(w.kept, "{w:?}");
    assert_eq!(w.files_changed, files.len() as u64, "{w:?}");
    for (name, content) in files {
        assert_eq!(on_branch(repo, &id, name), *content, "{name}");
        assert!(!repo.join(name).exists(), "{name} is not in the checkout");
    }
    assert_eq!(git(repo, &["status", "--porcelain"]), "");
    assert!(r.denials.is_empty(), "{:?}", r.denials);
}

#[test]
fn claude_writes_and_runs_commands_in_a_worktree_task() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let repo = repo(&t);
    let wt = default_worktree(&repo, "cw1");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Write", "input": {"file_path": wt.join("claude.txt"),
                                                    "content": "written by claude\n"}}]},
            {"tools": [{"name": "Bash", "input": {"command": "echo from-bash > bash.txt",
                                                  "description": "write a file"}}]},
            {"text": "Both written."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = send_worktree_task(&t, "cw1", "write two files", &repo);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{}", r.error, task_log(&t, &id));
    assert_eq!(r.output, "Both written.");
    assert_on_branch_only(
        &r,
        &repo,
        &[
            ("claude.txt", "written by claude\n"),
            ("bash.txt", "from-bash\n"),
        ],
    );
    let log = task_log(&t, &id);
    assert!(!log.contains("permission denied"), "{log}");
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn codex_writes_a_file_in_a_worktree_task() {
    let Some(agents) = need_agent("codex") else {
        return;
    };
    let t = TestRoot::new();
    let repo = repo(&t);
    let patch = "*** Begin Patch\n*** Add File: codex.txt\n+written by codex\n*** End Patch\n";
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "exec_command",
                        "input": {"cmd": format!("apply_patch <<'EOF'\n{patch}EOF\n")}}]},
            {"text": "Codex wrote it."},
        ]}),
    );
    let env = codex_env(&t, &agents, &server, 1);
    let w = RealWorker::start(&t, &["--preset", "codex"], &env);
    let id = send_worktree_task(&t, "xw1", "write a file with codex", &repo);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{}", r.error, task_log(&t, &id));
    // Codex took the patch as its own file change (`apply_patch`), not a shell command.
    let log = task_log(&t, &id);
    assert!(
        log.lines()
            .any(|l| l.starts_with("› add ") && l.ends_with("xw1/codex.txt")),
        "{log}"
    );
    assert_eq!(r.output, "Codex wrote it.");
    assert_on_branch_only(&r, &repo, &[("codex.txt", "written by codex\n")]);
    drop(w);
    assert_nothing_left(t.path());
}

#[test]
fn gemini_writes_a_file_in_a_worktree_task() {
    let Some(agents) = need_agent("gemini") else {
        return;
    };
    let t = TestRoot::new();
    let repo = repo(&t);
    let wt = default_worktree(&repo, "gw1");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "write_file",
                        "input": {"file_path": wt.join("gemini.txt"),
                                  "content": "written by gemini\n"}}]},
            {"text": "Gemini wrote it."},
        ]}),
    );
    let env = gemini_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "gemini"], &env);
    let id = send_worktree_task(&t, "gw1", "write a file with gemini", &repo);
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{}", r.error, task_log(&t, &id));
    assert_eq!(r.output, "Gemini wrote it.");
    assert_on_branch_only(&r, &repo, &[("gemini.txt", "written by gemini\n")]);
    drop(w);
    assert_nothing_left(t.path());
}

/// The old place, `.git/conductor-worktrees` (set as `worktreeDir` here), is where Claude
/// Code refuses every write: the task that changed nothing because of it fails, naming
/// the refusal, and the refusals are in its result.
#[test]
fn a_claude_worktree_task_refused_its_writes_fails_naming_the_refusal() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let repo = repo(&t);
    let old = repo.join(".git/conductor-worktrees");
    fs::write(
        t.path().join("config.json"),
        serde_json::to_vec(&json!({"worktreeDir": old})).unwrap(),
    )
    .unwrap();
    let target = old.join("cr1/claude.txt");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Write", "input": {"file_path": target,
                                                    "content": "x\n"}}]},
            {"text": "I could not write it."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let id = send_worktree_task(&t, "cr1", "write a file", &repo);
    let r = result_of(&t, &id, &w);
    assert!(!r.success, "{r:?}");
    let why = r.error.clone().unwrap_or_default();
    assert!(
        why.starts_with("the agent was refused Write(") && why.contains("it changed nothing"),
        "{why}"
    );
    assert_eq!(r.denials.len(), 1, "{:?}", r.denials);
    assert!(why.contains("which is a sensitive file"), "{why}");
    assert_eq!(r.denials[0].tool, "Write");
    assert!(!target.exists());
    let wtc = r.worktree.as_ref().expect("a worktree");
    assert!(!wtc.kept, "{wtc:?}");
    drop(w);
    assert_nothing_left(t.path());
}

/// A task narrowed to `git status` as its only Bash command, in mode `dontAsk`, whose
/// other Bash call Claude refuses: the refusal is in result.json, in `conductor
/// result`'s output and `tasks`; the task (no worktree) succeeds with that warning.
#[test]
fn a_claude_refusal_is_in_the_result_and_shown_by_result() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let dir = t.dir.path().canonicalize().unwrap();
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Bash", "input": {"command": "echo changed > notes.txt",
                                                  "description": "change the notes"}}]},
            {"text": "Bash was refused."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let mut task = Task::new("change the notes").with_id("dn1");
    task.dir = Some(dir.clone());
    task.allowed_tools = Some(vec!["Read".into(), "Bash(git status:*)".into()]);
    task.permission_mode = Some("dontAsk".into());
    let id = t.client.write_task(S0, &task).unwrap();
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}", r.error);
    assert!(!dir.join("notes.txt").exists());
    let raw: Value =
        serde_json::from_slice(&fs::read(t.client.worker(S0).result_for(&id)).unwrap()).unwrap();
    let denials = raw["denials"].as_array().expect("denials in result.json");
    assert_eq!(denials.len(), 1, "{raw:#}");
    assert_eq!(denials[0]["tool"], "Bash", "{raw:#}");
    assert_eq!(denials[0]["input"], "echo changed > notes.txt", "{raw:#}");
    let reason = denials[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("Permission to use Bash has been denied") && !reason.contains('<'),
        "Claude's words, without its tags: {raw:#}"
    );
    let shown = run_conductor(&t, &["result", "dn1"], 0);
    assert_eq!(
        shown.stdout, "Bash was refused.\n",
        "the output alone on stdout"
    );
    assert!(
        shown.stderr.contains(
            "task dn1: warning: the agent was refused 1 tool call: \
                               Bash(echo changed > notes.txt)"
        ),
        "{}",
        shown.stderr
    );
    let listed = run_conductor(&t, &["tasks"], 0).stdout;
    assert!(listed.contains("done (1 refused)"), "{listed}");
    drop(w);
    assert_nothing_left(t.path());
}
