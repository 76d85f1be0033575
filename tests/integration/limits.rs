//! A usage or rate limit met again and again: each time deferred, up to the bound
//! (`preset::MAX_DEFERRALS`), then the task fails saying so (a fake Gemini CLI whose
//! every run is refused by the quota, suggesting a 1 s wait).

use std::time::Duration;

use conductor::{Slot, TaskId};

use crate::harness::{agent, run_conductor, TestRoot, WorkerProc};

#[test]
fn a_limit_met_past_the_deferral_bound_fails_the_task_saying_so() {
    let t = TestRoot::new();
    let dir = t.dir.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    let fake = format!("sh {}", agent("gemini_quota.sh").display());
    let w = WorkerProc::start(&t, Slot(0), &fake, &["--preset", "gemini"], &[]);
    run_conductor(
        &t,
        &[
            "submit",
            "quota",
            "--id",
            "q1",
            "--dir",
            dir.to_str().unwrap(),
        ],
        0,
    );
    let r = t
        .client
        .wait_for_task(&TaskId::from("q1"), Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("no result: {e}\n{}", w.stderr()));
    assert!(!r.success);
    let error = r.error.unwrap();
    assert!(error.contains("You exceeded your current quota"), "{error}");
    let bound = conductor::preset::MAX_DEFERRALS;
    assert!(
        error.ends_with(&format!(
            "(still limited after {bound} deferrals: conductor stopped waiting)"
        )),
        "{error}"
    );
    assert_eq!(r.attempt, Some(1), "a deferral is no attempt");
    let runs = std::fs::read_to_string(dir.join("quota-runs.txt")).unwrap();
    assert_eq!(runs.lines().count() as u32, bound + 1, "{runs}");
}
