//! Issue 37 items 1 and 5 with real git: every worktree task's review state read from
//! git (so merges and deletions made by hand count) in `tasks`, `tasks --review`,
//! `status --json`; and no work lost — `discard` of unmerged work asks for `--force`,
//! gc keeps a worktree with uncommitted changes, removal keeps a branch holding
//! commits no other branch has.

use std::path::{Path, PathBuf};

use conductor::Slot;
use serde_json::Value;

use crate::harness::{git, git_repo, TestRoot, WorkerProc};
use crate::worktrees::{branches, conductor_ok, edit_agent, repo, result, submit};

/// Each listed task's review state, by id, from `tasks --json` with `extra` filters.
fn review_states(t: &TestRoot, extra: &[&str]) -> Vec<(String, String)> {
    let mut args = vec!["tasks", "--json", "--all"];
    args.extend(extra);
    let v: Value = serde_json::from_str(&conductor_ok(t, &args, 0).stdout).unwrap();
    let mut out: Vec<(String, String)> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["review"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn review_states_follow_git_through_merges_and_deletions_by_hand() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "s1", "WRITE one.txt 1", &[]);
    submit(&t, &repo, "s2", "WRITE a.txt two", &[]);
    submit(&t, &repo, "s3", "WRITE a.txt three", &[]);
    submit(&t, &repo, "s4", "nothing to do", &[]);
    submit(&t, &repo, "s5", "WRITE five.txt 5", &[]);
    for id in ["s1", "s2", "s3", "s4", "s5"] {
        result(&t, id);
    }
    assert_eq!(
        review_states(&t, &[]),
        pairs(&[
            ("s1", "unmerged"),
            ("s2", "unmerged"),
            ("s3", "unmerged"),
            ("s4", "unchanged"),
            ("s5", "unmerged"),
        ])
    );
    let table = conductor_ok(&t, &["tasks"], 0).stdout;
    assert!(table.contains("· unmerged"), "{table}");

    // By hand: s1 merged with git, s5 squashed in with git (its commits on no other
    // branch, its change in HEAD). Through conductor: s2 — which makes s3 conflict.
    git(
        &repo,
        &[
            "merge",
            "--no-ff",
            "--quiet",
            "-m",
            "by hand",
            "conductor/s1",
        ],
    );
    git(&repo, &["merge", "--squash", "--quiet", "conductor/s5"]);
    git(&repo, &["commit", "--quiet", "-m", "s5 squashed by hand"]);
    conductor_ok(&t, &["merge", "s2"], 0);
    assert_eq!(
        review_states(&t, &[]),
        pairs(&[
            ("s1", "merged"),
            ("s2", "merged"),
            ("s3", "conflicting"),
            ("s4", "unchanged"),
            ("s5", "merged"),
        ])
    );
    // What is left to review, and a filter by named states.
    assert_eq!(
        review_states(&t, &["--review"]),
        pairs(&[("s3", "conflicting")])
    );
    assert_eq!(
        review_states(&t, &["--review-state", "merged,unchanged"]).len(),
        4
    );
    let bad = conductor_ok(&t, &["tasks", "--review-state", "done"], 2);
    assert!(bad.stderr.contains("no review state"), "{}", bad.stderr);

    // s5's branch holds its own commit but its change is in HEAD: no --force needed.
    conductor_ok(&t, &["discard", "s5"], 0);
    // s3 deleted by hand: discarded.
    let wt = repo_worktree(&repo, "conductor/s3");
    git(
        &repo,
        &["worktree", "remove", "--force", wt.to_str().unwrap()],
    );
    git(&repo, &["branch", "-D", "conductor/s3"]);
    let status: Value =
        serde_json::from_str(&conductor_ok(&t, &["status", "--json"], 0).stdout).unwrap();
    let r = &status["review"];
    assert_eq!(
        (
            &r["unmerged"],
            &r["conflicting"],
            &r["merged"],
            &r["discarded"],
            &r["unchanged"]
        ),
        (&0.into(), &0.into(), &3.into(), &1.into(), &1.into()),
        "{status:#}"
    );
    assert_eq!(r["left"], serde_json::json!([]), "{status:#}");
    assert!(review_states(&t, &["--review"]).is_empty());
}

/// The worktree directory `branch` is checked out in.
fn repo_worktree(repo: &Path, branch: &str) -> PathBuf {
    let list = git(repo, &["worktree", "list", "--porcelain"]);
    let mut path = None;
    for line in list.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = Some(PathBuf::from(p));
        }
        if line == format!("branch refs/heads/{branch}") {
            return path.unwrap();
        }
    }
    panic!("no worktree on {branch}: {list}");
}

#[test]
fn discard_and_gc_never_lose_uncommitted_or_unmerged_work_without_force() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "k1", "WRITE k.txt k", &[]);
    let r = result(&t, "k1");
    let path = PathBuf::from(r["worktree"]["path"].as_str().unwrap());
    // A person goes on working in the task's worktree: nothing committed.
    std::fs::write(path.join("mine.txt"), "mine\n").unwrap();

    // gc past the worktrees' retention keeps a worktree with uncommitted changes.
    std::fs::write(
        t.path().join("config.json"),
        r#"{"worktreeRetentionSecs": 0}"#,
    )
    .unwrap();
    let gc = conductor_ok(&t, &["gc", "--older-than", "1h", "--apply"], 1);
    assert!(
        gc.stderr.contains("uncommitted") || gc.stdout.contains("uncommitted"),
        "{}\n{}",
        gc.stdout,
        gc.stderr
    );
    assert!(path.join("mine.txt").is_file(), "gc kept the person's file");

    // discard asks for --force, for the uncommitted file and then for the commits.
    let refused = conductor_ok(&t, &["discard", "k1"], 3);
    assert!(refused.stderr.contains("uncommitted"), "{}", refused.stderr);
    assert!(path.join("mine.txt").is_file());
    std::fs::remove_file(path.join("mine.txt")).unwrap();
    let refused = conductor_ok(&t, &["discard", "k1"], 3);
    assert!(
        refused.stderr.contains("1 commit(s) no other branch has"),
        "{}",
        refused.stderr
    );
    assert_eq!(branches(&repo), ["conductor/k1"]);
    // Once another branch holds its commits, nothing is lost: no --force needed.
    git(&repo, &["branch", "keep-k1", "conductor/k1"]);
    conductor_ok(&t, &["discard", "k1"], 0);
    assert!(branches(&repo).is_empty());
    assert!(!path.exists());
}

#[test]
fn removal_keeps_a_branch_holding_commits_no_other_branch_has() {
    let t = TestRoot::new();
    let repo = git_repo(&t, &[("a.txt", "base\n")]);
    let wt = t.dir.path().join("wt");
    let wt_s = wt.to_str().unwrap();
    git(
        &repo,
        &["worktree", "add", "--quiet", "-b", "conductor/x1", wt_s],
    );
    std::fs::write(wt.join("a.txt"), "work\n").unwrap();
    git(&wt, &["commit", "--quiet", "-am", "work"]);
    // What a task sent back to the queue, recovery or a crashed worker's clean-up do.
    conductor::worktree::remove(&repo, &wt, Some("conductor/x1"));
    assert_eq!(branches(&repo), ["conductor/x1"]);
    assert!(wt.join("a.txt").is_file(), "its worktree is kept with it");
    assert_eq!(
        conductor::worktree::keep::unique_commits(&repo, "conductor/x1").unwrap(),
        1
    );
    // Merged, the same removal takes both.
    git(&repo, &["merge", "--quiet", "--ff-only", "conductor/x1"]);
    conductor::worktree::remove(&repo, &wt, Some("conductor/x1"));
    assert!(branches(&repo).is_empty());
    assert!(!wt.exists());
}

/// `tasks` reads each repository's branches and `HEAD` once for the whole listing: six
/// worktree tasks in one repository cost a few git calls for the repository and at
/// most two for each task left to merge (a trial merge, `HEAD`'s tree once), not the
/// five to seven a task it cost when each was judged alone.
#[test]
fn a_listing_reads_a_repository_once_not_once_a_task() {
    let t = TestRoot::new();
    let repo = repo(&t);
    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    let ids = ["g1", "g2", "g3", "g4", "g5", "g6"];
    for (n, id) in ids.iter().enumerate() {
        submit(&t, &repo, id, &format!("WRITE file{n}.txt {n}"), &[]);
    }
    for id in ids {
        result(&t, id);
    }
    git(
        &repo,
        &[
            "merge",
            "--no-ff",
            "--quiet",
            "-m",
            "by hand",
            "conductor/g1",
        ],
    );

    // git on PATH logs each call, then runs the real one.
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = t.path().join("git-counting");
    std::fs::create_dir_all(&bin).unwrap();
    let log = t.path().join("git-calls.log");
    let wrapper = bin.join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.trim()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = crate::harness::run_conductor_env(
        &t,
        &["tasks", "--json", "--all"],
        &[("PATH".to_string(), path)],
        0,
    );
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let reviews: Vec<&str> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["review"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        reviews.iter().filter(|r| **r == "merged").count(),
        1,
        "{reviews:?}"
    );
    assert_eq!(
        reviews.iter().filter(|r| **r == "unmerged").count(),
        5,
        "{reviews:?}"
    );
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    let n = calls.lines().count();
    // 4 for the repository, then a trial merge for each of the 5 unmerged and HEAD's
    // tree once: 10. Judged one by one it was 6 × 5 + 5 × 2 = 40.
    assert!(n <= 12, "{n} git calls for 6 worktree tasks:\n{calls}");
}
