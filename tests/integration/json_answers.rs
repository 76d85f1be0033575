//! Issue 36.4: `--json` on the commands that had none (`cancel`, `retry`, `diff`, `discard`), each line or document what a script reads instead of the text.

use conductor::Slot;
use serde_json::Value;

use crate::harness::{TestRoot, WorkerProc};
use crate::worktrees::{conductor_ok, edit_agent, repo, result, submit};

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{out}")))
        .collect()
}

#[test]
fn cancel_retry_diff_and_discard_answer_in_json() {
    let t = TestRoot::new();
    let repo = repo(&t);
    // Nobody serves the queue yet: a queued task is withdrawn.
    conductor_ok(&t, &["submit", "never runs", "--id", "gone"], 0);
    let out = conductor_ok(&t, &["cancel", "gone", "--json"], 0);
    let v = lines(&out.stdout);
    assert_eq!(v.len(), 1, "{}", out.stdout);
    assert_eq!(v[0]["id"], "gone");
    assert_eq!(v[0]["outcome"], "withdrawn", "{}", out.stdout);
    // Cancelling it again: finished already, exit 1, still one JSON line.
    let out = conductor_ok(&t, &["cancel", "gone", "--json"], 1);
    let v = lines(&out.stdout);
    assert_eq!(v[0]["outcome"], "finished", "{}", out.stdout);
    assert_eq!(v[0]["state"], "cancelled", "{}", out.stdout);

    let _w = WorkerProc::start(&t, Slot(0), &edit_agent(), &[], &[]);
    submit(&t, &repo, "j1", "WRITE a.txt json", &[]);
    result(&t, "j1");
    let out = conductor_ok(&t, &["diff", "j1", "--json"], 0);
    let d: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(d["branch"], "conductor/j1", "{d}");
    assert_eq!(d["filesChanged"], 1, "{d}");
    assert!(d["patch"].as_str().unwrap().contains("+json"), "{d}");

    let out = conductor_ok(&t, &["retry", "j1", "--json"], 0);
    let v = lines(&out.stdout);
    assert_eq!(v[0]["retried"], "j1", "{}", out.stdout);
    assert_eq!(v[0]["id"], "j1-r1", "{}", out.stdout);
    result(&t, "j1-r1");

    let out = conductor_ok(&t, &["discard", "j1", "--force", "--json"], 0);
    let d: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(d["branch"], "conductor/j1", "{d}");
    assert_eq!(d["alreadyGone"], false, "{d}");
    let out = conductor_ok(&t, &["discard", "j1", "--force", "--json"], 0);
    let d: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(d["alreadyGone"], true, "{d}");
}
