//! Issue 37 item 9 with real git and real workers: a task run until its check passes
//! (`--until`, rounds bounded by `--until-rounds`), a worker killed between rounds, and
//! best of N (`submit --attempts`). The agent is `tests/agents/until_fixer.sh` (command
//! preset: each round a fresh agent in the same worktree, its prompt the task's and the
//! check's report).

use std::time::Duration;

use conductor::Slot;
use serde_json::Value;

use crate::harness::{agent, git, wait_until, TestRoot, WorkerProc};
use crate::worktrees::{branches, conductor_ok, repo, result, submit};

/// Fails, printing WANT-RIGHT (which the agent answers by writing "right"), until
/// answer.txt holds "right".
const FIX_CHECK: &str =
    "grep -q right answer.txt || { echo 'answer.txt is wrong: WANT-RIGHT'; exit 1; }";

fn fixer() -> String {
    agent("until_fixer.sh").display().to_string()
}

fn path_of(r: &Value) -> std::path::PathBuf {
    r["worktree"]["path"].as_str().unwrap().into()
}

#[test]
fn a_failed_check_starts_another_round_which_fixes_it() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &fixer(), &[], &[]);
    submit(
        &t,
        &repo,
        "u1",
        "make answer.txt right",
        &["--until", FIX_CHECK],
    );
    let r = result(&t, "u1");
    assert_eq!(r["success"], true, "{r:#}");
    assert_eq!(r["rounds"], 2, "{r:#}");
    assert_eq!(r["check"]["passed"], true, "{r:#}");
    assert_eq!(r["check"]["exitCode"], 0, "{r:#}");
    assert_eq!(r["check"]["command"], FIX_CHECK, "{r:#}");
    // Round 2's prompt: the task's, then the check's report (its output's end).
    let wt = path_of(&r);
    let second = std::fs::read_to_string(wt.join("prompt-2.txt")).unwrap();
    assert!(second.starts_with("make answer.txt right"), "{second}");
    assert!(
        second.contains("answer.txt is wrong: WANT-RIGHT"),
        "{second}"
    );
    assert!(second.contains("round 2 of 3"), "{second}");
    // The branch holds the fixed work; the task log tells both rounds and both checks.
    assert_eq!(git(&repo, &["show", "conductor/u1:answer.txt"]), "right\n");
    let log = std::fs::read_to_string(t.path().join("workers/0/tasks/u1.log")).unwrap();
    let (one, two) = (
        log.find("round 1 done").unwrap(),
        log.find("round 2 done").unwrap(),
    );
    assert!(one < two, "{log}");
    assert!(log.contains("after round 1, the check"), "{log}");
    assert!(log.contains("after round 2, the check"), "{log}");
    let record = t.path().join("workers/0/until.json");
    wait_until(Duration::from_secs(60), "the loop's record to go", || {
        !record.exists()
    });
}

#[test]
fn a_check_that_never_passes_fails_the_task_at_its_bound_and_keeps_the_branch() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &fixer(), &[], &[]);
    let check = "echo still broken; exit 3";
    submit(
        &t,
        &repo,
        "u2",
        "try",
        &["--until", check, "--until-rounds", "2"],
    );
    let r = result(&t, "u2");
    assert_eq!(r["success"], false, "{r:#}");
    assert_eq!(r["outcome"], "failure", "{r:#}");
    assert_eq!(r["rounds"], 2, "{r:#}");
    assert_eq!(r["check"]["passed"], false, "{r:#}");
    assert_eq!(r["check"]["exitCode"], 3, "{r:#}");
    assert!(r["check"]["outputTail"]
        .as_str()
        .unwrap()
        .contains("still broken"));
    let err = r["error"].as_str().unwrap();
    assert!(
        err.contains("still failed after 2 round(s) (exit 3)"),
        "{err}"
    );
    // Exactly two runs; the work is kept for review, never deleted.
    assert_eq!(git(&repo, &["show", "conductor/u2:.rounds"]), "2\n");
    assert_eq!(branches(&repo), ["conductor/u2"]);
    let listed = conductor_ok(&t, &["tasks", "--review", "--all"], 0).stdout;
    assert!(
        listed.contains("unmerged · check failed (2 rounds)"),
        "{listed}"
    );
}

#[test]
fn a_worker_killed_between_rounds_leaves_one_result_that_counts_its_rounds() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let mut w = WorkerProc::start(&t, Slot(0), &fixer(), &[], &[]);
    let marker = t.dir.path().join("round-two-hangs");
    let prompt = format!("fix it HANG2 {}", marker.display());
    submit(&t, &repo, "u3", &prompt, &["--until", FIX_CHECK]);
    wait_until(Duration::from_secs(60), "round 2 to be running", || {
        marker.exists()
    });
    assert!(t.path().join("workers/0/until.json").exists());
    w.crash();
    conductor_ok(&t, &["recover", "0"], 0);
    let r = result(&t, "u3");
    assert_eq!(r["outcome"], "interrupted", "{r:#}");
    assert_eq!(r["rounds"], 2, "{r:#}");
    assert_eq!(r["check"]["passed"], false, "{r:#}");
    assert_eq!(r["worktree"]["kept"], true, "{r:#}");
    // Round 2 ran once (no rerun after the crash), its partial work committed.
    assert_eq!(git(&repo, &["show", "conductor/u3:.rounds"]), "2\n");
    let json: Value =
        serde_json::from_str(&conductor_ok(&t, &["tasks", "--json", "--all"], 0).stdout).unwrap();
    let listed = json["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "one task, one result: {json:#}");
    assert!(!t.path().join("workers/0/until.json").exists());
}

#[test]
fn attempts_run_one_prompt_in_n_worktrees_and_mark_which_passed() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w0 = WorkerProc::start(&t, Slot(0), &fixer(), &[], &[]);
    let _w1 = WorkerProc::start(&t, Slot(1), &fixer(), &[], &[]);
    // The second attempt's check always fails; the others pass at once.
    let check = "case $CONDUCTOR_TASK_ID in *-2) echo no luck; exit 1;; esac";
    let dir = repo.to_str().unwrap();
    let ran = conductor_ok(
        &t,
        &[
            "submit",
            "--dir",
            dir,
            "--id",
            "best",
            "--attempts",
            "3",
            "--until",
            check,
            "--until-rounds",
            "1",
            "--wait",
            "try it",
        ],
        0,
    );
    assert!(
        ran.stderr
            .contains("2 of 3 attempts passed (best-1, best-3)"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        branches(&repo),
        ["conductor/best-1", "conductor/best-2", "conductor/best-3"]
    );
    let listed = conductor_ok(&t, &["tasks", "--review", "--label", "attempts:best"], 0).stdout;
    for (id, mark) in [
        ("best-1", "passed"),
        ("best-2", "failed"),
        ("best-3", "passed"),
    ] {
        let line = listed
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{listed}"));
        assert!(
            line.contains(&format!("unmerged · check {mark} (1 round)")),
            "{listed}"
        );
    }
    let json: Value =
        serde_json::from_str(&conductor_ok(&t, &["tasks", "--review", "--json"], 0).stdout)
            .unwrap();
    let passed: Vec<&str> = json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["check"]["passed"] == true)
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(passed.len(), 2, "{json:#}");
}

#[test]
fn a_worker_killed_while_its_check_runs_leaves_no_check_behind() {
    let t = TestRoot::new();
    let repo = repo(&t);
    // The worker is slow to record the check: it must not have run meanwhile (a worker
    // killed then left it behind, seen on a loaded machine).
    let slow = [(
        conductor::review::check::ENV_DEBUG_RECORD_CHECK_AFTER_MS,
        "300",
    )];
    let mut w = WorkerProc::start(&t, Slot(0), &fixer(), &[], &slow);
    let marker = t.dir.path().join("check-runs");
    let check = format!(": > {}; sleep 300", marker.display());
    submit(&t, &repo, "u4", "go", &["--until", &check]);
    wait_until(Duration::from_secs(60), "the check to be running", || {
        marker.exists()
    });
    w.crash();
    conductor_ok(&t, &["recover", "0"], 0);
    let r = result(&t, "u4");
    assert_eq!(r["outcome"], "interrupted", "{r:#}");
    assert_eq!(r["worktree"]["kept"], true, "{r:#}");
    // Recovery stopped the check's whole group, as it stops an agent.
    crate::harness::assert_nothing_left(t.path());
}
