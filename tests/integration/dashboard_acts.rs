//! The dashboard acts (issue 37, item 8): merge, discard and retry the selected worker's ended task after a y/n line, pause and resume it, through the real dashboard in tmux.

use std::fs;
use std::time::Duration;

use conductor::{Slot, Task, TaskId};

use crate::dashboard::Shell;
use crate::harness::{agent, assert_nothing_left, git, wait_until, TestRoot, WorkerProc};
use crate::prereq::{self, require};

const BOUND: Duration = Duration::from_secs(30);

pub(crate) fn repo(t: &TestRoot) -> std::path::PathBuf {
    let repo = t.dir.path().join("repo");
    fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "--quiet", "--initial-branch=main"]);
    git(&repo, &["config", "user.name", "Test Person"]);
    git(&repo, &["config", "user.email", "test@example.com"]);
    fs::write(repo.join("a.txt"), "base\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "--quiet", "-m", "start"]);
    repo.canonicalize().unwrap()
}

pub(crate) fn run_in_worktree(
    t: &TestRoot,
    repo: &std::path::Path,
    id: &str,
    prompt: &str,
) -> TaskId {
    let mut task = Task::new(prompt).with_id(id);
    task.dir = Some(repo.to_path_buf());
    task.worktree = Some(true);
    let id = t.client.write_task(Slot(0), &task).unwrap();
    let r = t.client.wait_for_result(Slot(0), &id, BOUND).unwrap();
    assert!(r.success, "{r:?}");
    id
}

fn branches(repo: &std::path::Path) -> String {
    git(repo, &["branch", "--list", "conductor/*"])
}

#[test]
fn the_dashboard_merges_discards_retries_and_pauses_asking_before_it_destroys() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let repo = repo(&t);
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    run_in_worktree(&t, &repo, "am1", "WRITE merged.txt from the task");

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    sh.wait_for("conductor/am1");
    // `m` asks first; anything but y does nothing.
    sh.keys(&["m"]);
    sh.wait_for("Merge task am1's branch into its repository? y/n");
    sh.keys(&["n"]);
    sh.wait_for("nothing done");
    assert!(branches(&repo).contains("conductor/am1"));
    sh.keys(&["m"]);
    sh.wait_for("Merge task am1's branch");
    sh.keys(&["y"]);
    sh.wait_for("merged task am1 into main");
    assert_eq!(
        fs::read_to_string(repo.join("merged.txt")).unwrap(),
        "from the task\n"
    );
    assert!(!branches(&repo).contains("conductor/am1"));

    // `D` discards the next one's branch and worktree, after y.
    run_in_worktree(&t, &repo, "ad1", "WRITE thrown.txt away");
    sh.wait_for("conductor/ad1");
    sh.keys(&["D"]);
    sh.wait_for("Discard task ad1: delete its worktree and branch");
    sh.keys(&["y"]);
    sh.wait_for("discarded task ad1");
    assert!(!branches(&repo).contains("conductor/ad1"));
    assert!(!repo.join("thrown.txt").exists());

    // `r` runs it again under a new id, after y.
    sh.keys(&["r"]);
    sh.wait_for("Run task ad1 again under a new id? y/n");
    sh.keys(&["y"]);
    sh.wait_for("task ad1 runs again as ad1-r1");
    let again = t
        .client
        .wait_for_task(&TaskId::from("ad1-r1"), BOUND)
        .unwrap();
    assert!(again.success, "{again:?}");

    // `p` pauses the worker and resumes it, asking nothing.
    let paused = t.path().join("paused/slot-0");
    sh.keys(&["p"]);
    sh.wait_for("paused slot 0: it starts no new task (p resumes)");
    assert!(paused.exists());
    sh.keys(&["p"]);
    sh.wait_for("resumed slot 0");
    wait_until(BOUND, "the pause file to go", || !paused.exists());
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(w);
    assert_nothing_left(t.path());
}
