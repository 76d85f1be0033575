//! The dashboard shows each worker's ended worktree task's review state and redoes a conflicting one on top (`R`, as `conductor retry ID --rebase`) after a y/n line (issue 37, items 1 and 8).

use std::fs;
use std::time::Duration;

use conductor::{Slot, TaskId};

use crate::dashboard::Shell;
use crate::dashboard_acts::{repo, run_in_worktree};
use crate::harness::{agent, assert_nothing_left, git, TestRoot, WorkerProc};
use crate::prereq::{self, require};

const BOUND: Duration = Duration::from_secs(30);

#[test]
fn the_dashboard_shows_review_states_and_redoes_a_conflicting_task_on_top() {
    require!(prereq::tmux());
    let t = TestRoot::new();
    let repo = repo(&t);
    let edit = agent("edit.sh").display().to_string();
    let w = WorkerProc::start(&t, Slot(0), &edit, &[], &[]);
    run_in_worktree(&t, &repo, "rv1", "WRITE a.txt from the task");

    let sh = Shell::start(&t);
    sh.dashboard(&t, "dashboard");
    sh.wait_for("[unmerged +1 -1]");
    // What landed meanwhile touches the same line: the branch now conflicts.
    fs::write(repo.join("a.txt"), "from main\n").unwrap();
    git(&repo, &["commit", "--quiet", "-am", "main moves on"]);
    sh.wait_for("[conflicting +1 -1]");

    // `R` asks first; anything but y does nothing.
    sh.keys(&["R"]);
    sh.wait_for("Redo task rv1 on top of the current branch, in a new worktree? y/n");
    sh.keys(&["n"]);
    sh.wait_for("nothing done");
    sh.keys(&["R"]);
    sh.wait_for("Redo task rv1 on top");
    sh.keys(&["y"]);
    sh.wait_for("task rv1 is redone on top as rv1-r1");
    let again = t
        .client
        .wait_for_task(&TaskId::from("rv1-r1"), BOUND)
        .unwrap();
    assert!(again.success, "{again:?}");
    sh.keys(&["q"]);
    sh.assert_given_back(&t);
    drop(sh);
    drop(w);
    assert_nothing_left(t.path());
}
