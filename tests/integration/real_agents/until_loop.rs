//! `--until` with the real Claude Code CLI (issue 37.9), through the user's flow: `conductor
//! submit --worktree --until CHECK`, a worker of the claude preset. Round 1 writes a file
//! that fails the check; round 2 resumes the same session, its prompt the check's output,
//! and fixes it; the result says 2 rounds and a passed check.

use serde_json::json;

use super::{
    claude_env, conversation_text, need_agent, result_of, task_log, ModelServer, RealWorker,
};
use crate::harness::TestRoot;
use crate::harness::{assert_nothing_left, git, git_repo, run_conductor};
use conductor::TaskId;

#[test]
fn claude_until_resumes_its_session_with_the_checks_output_and_passes_in_round_two() {
    let Some(agents) = need_agent("claude") else {
        return;
    };
    let t = TestRoot::new();
    let repo = git_repo(&t, &[("a.txt", "base\n")]);
    let wt = repo
        .parent()
        .unwrap()
        .join("repo.conductor-worktrees")
        .join("cu1");
    let server = ModelServer::start(
        t.dir.path(),
        json!({"turns": [
            {"tools": [{"name": "Write", "input": {"file_path": wt.join("answer.txt"),
                                                    "content": "wrong\n"}}]},
            {"text": "Wrote the answer."},
            {"tools": [{"name": "Write", "input": {"file_path": wt.join("answer.txt"),
                                                    "content": "right\n"}}]},
            {"text": "Fixed the answer."},
        ]}),
    );
    let env = claude_env(&t, &agents, &server, 2);
    let w = RealWorker::start(&t, &["--preset", "claude"], &env);
    let check = "grep -q right answer.txt || { echo \"CHECK-SAYS: answer.txt holds $(cat answer.txt)\"; exit 1; }";
    let dir = repo.to_str().unwrap();
    run_conductor(
        &t,
        &[
            "submit",
            "--worktree",
            "--dir",
            dir,
            "--id",
            "cu1",
            "--until",
            check,
            "write the answer",
        ],
        0,
    );
    let id = TaskId::from("cu1");
    let r = result_of(&t, &id, &w);
    assert!(r.success, "{:?}\n{}", r.error, task_log(&t, &id));
    assert_eq!(r.until.rounds, Some(2), "{r:?}");
    let verdict = r.until.check.as_ref().expect("the check's verdict");
    assert!(
        verdict.passed && verdict.exit_code == Some(0),
        "{verdict:?}"
    );
    assert_eq!(r.output, "Fixed the answer.");
    assert_eq!(git(&repo, &["show", "conductor/cu1:answer.txt"]), "right\n");

    // Round 2 resumed the session: the model saw round 1's turns, then the check's output.
    let sent = server.scripted();
    assert_eq!(sent.len(), 4, "{sent:#?}");
    let resumed = conversation_text(&sent[2]);
    assert!(resumed.contains("write the answer"), "{resumed}");
    assert!(resumed.contains("Wrote the answer."), "{resumed}");
    assert!(
        resumed.contains("CHECK-SAYS: answer.txt holds wrong"),
        "{resumed}"
    );
    assert!(!conversation_text(&sent[0]).contains("CHECK-SAYS"));
    let log = task_log(&t, &id);
    assert!(log.contains("after round 1, the check"), "{log}");
    drop(w);
    assert_nothing_left(t.path());
}
