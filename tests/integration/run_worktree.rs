//! `conductor run --worktree` leaves its work reachable (issue 35, item 4): its private
//! root is gone when it ends, but the summary and `--json` name each task's branch and
//! diffstat, and `conductor diff|merge|discard ID`, run from the repository, find the
//! branch `conductor/ID` there.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::harness::{agent, bin, git, TestRoot};

/// `conductor args…` in `cwd`, with no root anywhere (`CONDUCTOR_HOME` names none):
/// (exit code, stdout, stderr).
fn conductor_in(t: &TestRoot, cwd: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("conductor"))
        .args(args)
        .current_dir(cwd)
        .env("CONDUCTOR_HOME", t.dir.path().join("no-root-here"))
        .env("TMPDIR", t.dir.path())
        .env("GIT_PAGER", "cat")
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn run_worktree_branches_are_named_and_diff_merge_discard_work_after_the_run() {
    let t = TestRoot::new();
    let repo = t.dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "--quiet", "--initial-branch=main"]);
    git(&repo, &["config", "user.name", "Test Person"]);
    git(&repo, &["config", "user.email", "test@example.com"]);
    std::fs::write(repo.join("a.txt"), "base\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "start"]);
    let repo = repo.canonicalize().unwrap();
    let edit = agent("edit.sh").display().to_string();
    let dir = repo.to_str().unwrap();

    // Two tasks, each writing a file in its own worktree; the private root is deleted.
    let run = [
        "run",
        "--json",
        "-n",
        "2",
        "--worktree",
        "--dir",
        dir,
        "--agent",
        &edit,
    ];
    let prompts = [
        "WRITE new.txt hello from the run",
        "WRITE other.txt thrown away",
    ];
    let (code, stdout, stderr) = conductor_in(&t, &repo, &[&run[..], &prompts[..]].concat());
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<String> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["taskId"].as_str().unwrap().to_string())
        .collect();
    let branches = doc["branches"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(branches.len(), 2, "{doc}");
    for (b, id) in branches.iter().zip(&ids) {
        assert_eq!(b["taskId"], id.as_str());
        assert_eq!(b["branch"], format!("conductor/{id}"));
        assert_eq!(b["diffstat"], "+1 -0 in 1 file", "{b}");
        assert_eq!(
            b["next"],
            format!("cd {dir} && conductor diff {id} && conductor merge {id}  (or: git merge conductor/{id})")
        );
    }
    let (keep, toss) = (&ids[0], &ids[1]);

    // From the repository, with no conductor root at all.
    let (code, diff, err) = conductor_in(&t, &repo, &["diff", keep]);
    assert_eq!(code, 0, "{err}");
    assert!(diff.contains("+hello from the run"), "{diff}");
    assert!(!diff.contains("other.txt"), "{diff}");
    let (code, out, err) = conductor_in(&t, &repo, &["merge", keep]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with(&format!(
            "merged task {keep} (conductor/{keep}, +1 -0 in 1 file) into main"
        )),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("new.txt")).unwrap(),
        "hello from the run\n"
    );
    let elsewhere = t.dir.path();
    let (code, out, err) = conductor_in(&t, elsewhere, &["discard", toss, "--dir", dir, "--force"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let left = git(&repo, &["branch", "--list", "conductor/*"]);
    assert!(left.trim().is_empty(), "{left}");
    assert!(!repo.join("other.txt").exists());

    // The text summary names the branch and says what to run.
    let run = [
        "run",
        "--worktree",
        "--dir",
        dir,
        "--agent",
        &edit,
        "WRITE third.txt x",
    ];
    let (code, stdout, stderr) = conductor_in(&t, &repo, &run);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("   branch conductor/"), "{stdout}");
    assert!(stdout.contains(" · +1 -0 in 1 file"), "{stdout}");
    let step = stderr
        .lines()
        .find(|l| l.starts_with("task ") && l.contains(&format!(": cd {dir} && conductor diff ")))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(step.contains("&& conductor merge "), "{step}");
    // Unknown everywhere: the root's error stands.
    let (code, _, err) = conductor_in(&t, &repo, &["diff", "no-such-task"]);
    assert_eq!(code, 2, "{err}");
}
