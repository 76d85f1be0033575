//! Issue 37 item 2 with real git: `merge --all` as a merge queue — conflicts found
//! first without touching the work tree, the check run on each merged result in a
//! scratch worktree (removed afterwards), only what is clean and green merged, every
//! task reported, the repository as it was for every task not merged.

use conductor::Slot;
use serde_json::Value;

use crate::harness::{git, TestRoot, WorkerProc};
use crate::worktrees::{branches, conductor_ok, edit_agent, repo, result, submit};

const CHECK: &str = "if [ -f bad.txt ]; then echo 'bad.txt is here'; exit 3; fi; echo green";

#[test]
fn merge_all_merges_only_the_clean_and_green_and_reports_every_task() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    // One worker: they finish in this order, the order the queue takes them.
    for (id, prompt) in [
        ("q1", "WRITE one.txt 1"),
        ("q2", "WRITE a.txt two"),
        ("q3", "WRITE a.txt three"),
        ("q4", "WRITE bad.txt bad"),
    ] {
        submit(&t, &repo, id, prompt, &[]);
        result(&t, id);
    }
    let out = conductor_ok(&t, &["merge", "--all", "--check", CHECK, "--json"], 1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let tasks = v["tasks"].as_array().unwrap();
    let outcomes: Vec<(&str, &str)> = tasks
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("q1", "merged"),
            ("q2", "merged"),
            ("q3", "conflict"),
            ("q4", "checkFailed")
        ],
        "{v:#}"
    );
    assert_eq!(v["allMerged"], false);
    assert_eq!(tasks[2]["files"], serde_json::json!(["a.txt"]), "{v:#}");
    assert_eq!(tasks[3]["exit"], 3, "{v:#}");
    assert!(
        tasks[3]["outputTail"]
            .as_str()
            .unwrap()
            .contains("bad.txt is here"),
        "{v:#}"
    );

    // The repository holds q1 and q2, clean; q3 and q4 kept on their branches; no
    // scratch worktree is left.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "two\n"
    );
    assert!(repo.join("one.txt").is_file() && !repo.join("bad.txt").exists());
    assert_eq!(branches(&repo), ["conductor/q3", "conductor/q4"]);
    let list = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        list.lines().filter(|l| l.starts_with("worktree ")).count(),
        3,
        "{list}"
    );
    assert!(!list.contains(".merge-check"), "{list}");
    let head = git(&repo, &["rev-parse", "HEAD"]);

    // Again, with the check from config.json and as text: each dead end says what next.
    std::fs::write(
        t.path().join("config.json"),
        serde_json::json!({ "mergeCheck": CHECK }).to_string(),
    )
    .unwrap();
    let again = conductor_ok(&t, &["merge", "--all"], 1);
    let err = &again.stderr;
    assert!(err.contains("conflicts in a.txt"), "{err}");
    assert!(err.contains("fails the check (exit 3)"), "{err}");
    assert!(err.contains("bad.txt is here"), "{err}");
    assert!(err.contains("git merge conductor/q3"), "{err}");
    assert!(err.contains("conductor discard q4 --force"), "{err}");
    assert!(
        err.contains("merged 0, 1 conflicting, 1 check failed, 0 left of 2 tasks"),
        "{err}"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "nothing changed");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[test]
fn a_conflicting_task_is_redone_on_top_with_its_prompt_conflict_and_old_diff() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "c1", "WRITE a.txt two", &[]);
    submit(&t, &repo, "c2", "WRITE a.txt three", &[]);
    result(&t, "c1");
    result(&t, "c2");
    conductor_ok(&t, &["merge", "c1"], 0);
    let conflict = conductor_ok(&t, &["merge", "c2"], 1);
    assert!(
        conflict.stderr.contains("conductor retry c2 --rebase"),
        "{}",
        conflict.stderr
    );

    let new = conductor_ok(&t, &["retry", "c2", "--rebase"], 0);
    let new_id = new.stdout.trim().to_string();
    let r = result(&t, &new_id);
    assert_eq!(r["outcome"], "success", "{r:#}");
    // Its prompt: the original, the conflict, the old diff.
    let rec: Value = serde_json::from_str(
        &std::fs::read_to_string(t.path().join(format!("workers/0/tasks/{new_id}.json"))).unwrap(),
    )
    .unwrap();
    let prompt = rec["prompt"].as_str().unwrap();
    assert!(prompt.starts_with("WRITE a.txt three\n"), "{prompt}");
    assert!(prompt.contains("conflicts in: a.txt"), "{prompt}");
    assert!(prompt.contains("+three"), "{prompt}");
    // From HEAD: it merges cleanly now; the old branch is kept until discarded.
    conductor_ok(&t, &["merge", &new_id], 0);
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "three\n"
    );
    assert_eq!(branches(&repo), ["conductor/c2"]);
    // Only unmerged or conflicting work is redone.
    let merged = conductor_ok(&t, &["retry", "c1", "--rebase"], 2);
    assert!(merged.stderr.contains("is merged"), "{}", merged.stderr);
}
