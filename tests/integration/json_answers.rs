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

/// `logs --json` is one document; `logs -f --json` JSON Lines of stream events ending
/// with the task's end; `init`, `create-worker`, `recover`, `queue cancel` and
/// `queue retry` answer in JSON too (issue 36.4).
#[test]
fn logs_init_recover_and_the_queue_verbs_answer_in_json() {
    use crate::harness::run_conductor;
    let t = TestRoot::new();
    let made = run_conductor(&t, &["init", "2", "--json"], 0);
    let d: Value = serde_json::from_str(&made.stdout).unwrap();
    assert_eq!(d["slots"].as_array().map(Vec::len), Some(2), "{d}");
    assert_eq!(d["slots"][1]["slot"], 1, "{d}");
    assert!(!made.stdout.contains("next:"), "{}", made.stdout);
    let d: Value =
        serde_json::from_str(&run_conductor(&t, &["create-worker", "2", "--json"], 0).stdout)
            .unwrap();
    assert_eq!(d["slots"][0]["created"], true, "{d}");
    assert_eq!(d["rootCreated"], false, "{d}");
    let out = run_conductor(&t, &["recover", "--json"], 0).stdout;
    let v = lines(&out);
    assert_eq!(v.len(), 3, "{out}");
    assert_eq!(v[2]["slot"], 2, "{out}");
    assert_eq!(v[0]["interrupted"], Value::Null, "{out}");
    // `status --json` is the status verb's answer, as the MCP `status` tool serializes it.
    let d: Value =
        serde_json::from_str(&run_conductor(&t, &["status", "--json"], 0).stdout).unwrap();
    assert_eq!(d["workers"].as_array().map(Vec::len), Some(3), "{d}");
    assert_eq!(d["servedByLiveWorker"], false, "{d}");
    assert!(d.get("review").is_some(), "{d}");

    // The queue's own verbs, as `cancel` and `retry` answer.
    run_conductor(&t, &["submit", "never runs", "--id", "q1"], 0);
    let v = lines(&run_conductor(&t, &["queue", "cancel", "q1", "--json"], 0).stdout);
    assert_eq!(
        (&v[0]["id"], &v[0]["outcome"]),
        (&"q1".into(), &"withdrawn".into())
    );
    let v = lines(&run_conductor(&t, &["queue", "retry", "q1", "--json"], 0).stdout);
    assert_eq!(
        (&v[0]["retried"], &v[0]["id"]),
        (&"q1".into(), &"q1-r1".into())
    );
    run_conductor(&t, &["cancel", "q1-r1"], 0);

    // A slot's live log, and a finished task's by id, followed or not.
    let paths = t.client.worker(Slot(0));
    std::fs::write(paths.output_log(), "live €\n").unwrap();
    let d: Value =
        serde_json::from_str(&run_conductor(&t, &["logs", "0", "--json"], 0).stdout).unwrap();
    assert_eq!(
        (&d["slot"], &d["text"]),
        (&0.into(), &"live €\n".into()),
        "{d}"
    );
    std::fs::remove_file(paths.output_log()).unwrap();
    let _w = WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    run_conductor(
        &t,
        &["send", "0", "logged hello", "--id", "l1", "--wait"],
        0,
    );
    let d: Value =
        serde_json::from_str(&run_conductor(&t, &["logs", "l1", "--json"], 0).stdout).unwrap();
    assert_eq!(d["id"], "l1", "{d}");
    assert_eq!(d["state"], "done", "{d}");
    assert_eq!(d["text"], "logged hello", "{d}");
    assert_eq!(d["logBytes"], 12, "{d}");
    let out = run_conductor(&t, &["logs", "l1", "-f", "--json"], 0).stdout;
    let v = lines(&out);
    assert_eq!(v[0]["event"], "output", "{out}");
    assert_eq!(v[0]["text"], "logged hello", "{out}");
    let end = v.last().unwrap();
    assert_eq!(
        (&end["event"], &end["state"]),
        (&"end".into(), &"done".into()),
        "{out}"
    );
    // No log: the same refusal as without --json.
    run_conductor(&t, &["send", "1", "in the inbox", "--id", "q2"], 0);
    let r = run_conductor(&t, &["logs", "q2", "--json"], 2);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}
