//! Faults of the fourth storm (issue 38): damaged copies, dependencies already gone,
//! what a killed worker or a deleted root leaves, a worker waiting for disk space.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use conductor::{Slot, Task};

use crate::faults::{root_on, temp_dir, SmallDisk};
use crate::harness::{run_conductor, wait_until, TestRoot, WorkerProc};
use crate::prereq::require;

const S0: Slot = Slot(0);
const BOUND: Duration = Duration::from_secs(30);

/// Set `path`'s mtime `ago` into the past.
fn age(path: &Path, ago: Duration) {
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - ago).unwrap();
}

/// Issue 38.5: the queue's result replaced by an empty file while the slot's copy and
/// the task record are whole: `result` reads the slot's copy, and once no copy is whole,
/// `retry` (what `doctor` advises) runs the record again.
#[test]
fn a_damaged_queue_result_gives_way_to_the_whole_copies_its_task_left() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    run_conductor(&t, &["submit", "--id", "d1", "the prompt kept"], 0);
    run_conductor(&t, &["wait", "d1"], 0);
    drop(w);
    let queued = t.path().join("queue/results/d1.json");
    fs::remove_file(&queued).unwrap();
    fs::write(&queued, "").unwrap();
    let r = run_conductor(&t, &["result", "d1"], 0);
    assert_eq!(r.stdout.trim(), "the prompt kept", "{r:?}");
    // The slot's copy (one file with workers/0/result.json) damaged too: no result to
    // show, but the record still runs it again.
    fs::write(t.path().join("workers/0/results/d1.json"), "").unwrap();
    run_conductor(&t, &["result", "d1"], 1);
    let r = run_conductor(&t, &["retry", "d1"], 0);
    assert_eq!(r.stdout.trim(), "d1-r1", "{r:?}");
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = run_conductor(&t, &["wait", "d1-r1"], 0);
    assert_eq!(r.stdout.trim(), "the prompt kept", "{r:?}");
}

/// Issue 38.6: `submit --after X` where gc collected X (sent to a slot) is refused at
/// once, not cancelled at a later queue scan.
#[test]
fn a_dependency_gc_collected_is_refused_at_submit() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    run_conductor(&t, &["send", "0", "--id", "x1", "collected soon"], 0);
    run_conductor(&t, &["wait", "x1"], 0);
    drop(w);
    run_conductor(&t, &["gc", "--older-than", "0s", "--apply"], 0);
    // As gc's default (24 h) finds it: long registered.
    age(&t.path().join("ids/x1"), Duration::from_secs(3600));
    let began = Instant::now();
    let r = run_conductor(&t, &["submit", "--after", "x1", "--id", "y1", "never"], 2);
    assert!(r.stderr.contains("x1") && r.stderr.contains("gc"), "{r:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(!t.path().join("ids/y1").exists(), "y1 was not taken");
}

/// Whether `pid` lives (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Issue 38.2: a hung callback outlived its SIGKILLed worker (ppid 1, its own group),
/// timed out by nobody. Whoever recovers the slot ends it: the worker restarted on it,
/// or `conductor recover`.
#[test]
fn a_callback_outliving_its_killed_worker_is_ended_by_whoever_recovers_the_slot() {
    let t = TestRoot::new();
    let pids = t.dir.path().join("callback.pids");
    let config = serde_json::json!({
        // The shell and a child in its group, both recorded; neither ends by itself.
        "callback": format!("sleep 1000 & echo \"$$ $!\" >> {}; wait", pids.display()),
        "callbackTimeoutSecs": 3600,
    });
    fs::write(t.client.root().config_file(), config.to_string()).unwrap();
    let recorded = || -> Vec<i32> {
        fs::read_to_string(&pids)
            .unwrap_or_default()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    };
    let mut restarted = None;
    for (round, recoverer) in ["a restarted worker", "conductor recover"]
        .iter()
        .enumerate()
    {
        drop(restarted.take());
        let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        let id = format!("cb{round}");
        run_conductor(&t, &["send", "0", "--id", &id, "a task"], 0);
        run_conductor(&t, &["wait", &id], 0);
        wait_until(BOUND, "the callback to start", || {
            recorded().len() == 2 * (round + 1)
        });
        let group = recorded()[2 * round..].to_vec();
        w.crash();
        assert!(
            group.iter().all(|p| alive(*p)),
            "{recoverer}: the callback went with its worker: {group:?}"
        );
        match round {
            0 => restarted = Some(WorkerProc::start(&t, S0, "cat", &[], &[])),
            _ => {
                let r = run_conductor(&t, &["recover", "0"], 0);
                assert!(
                    r.stdout.contains("callback") || r.stderr.contains("callback"),
                    "{r:?}"
                );
            }
        }
        wait_until(BOUND, "the dead worker's callback to be ended", || {
            group.iter().all(|p| !alive(*p))
        });
        assert!(
            fs::read_dir(t.path().join("workers/0/callbacks"))
                .unwrap()
                .next()
                .is_none(),
            "{recoverer}: its record is gone"
        );
    }
}

/// Issue 38.8: the root deleted under a live worker: it logged nothing, went on serving
/// a root made again on the path while `status` called it gone and a second worker
/// was refused. Now it says so and stops; started again, it serves the new root.
#[test]
fn a_worker_whose_root_is_deleted_says_so_and_stops() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    fs::remove_dir_all(t.path()).unwrap();
    let st = w.wait_exit(BOUND);
    assert_eq!(st.code(), Some(2), "{}", w.stderr());
    assert!(
        w.stderr()
            .contains("was deleted while this worker served it"),
        "{}",
        w.stderr()
    );
    // Made again on the same path under a running worker: it stops too.
    t.client.init_queue().unwrap();
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    fs::remove_dir_all(t.path()).unwrap();
    t.client.init_queue().unwrap();
    let st = w.wait_exit(BOUND);
    assert_eq!(st.code(), Some(2), "{}", w.stderr());
    assert!(
        w.stderr().contains("while this worker served it"),
        "{}",
        w.stderr()
    );
    // The new root is served by the worker started again, visibly.
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = run_conductor(&t, &["status"], 0);
    assert!(r.stdout.contains("idle"), "{r:?}");
    run_conductor(&t, &["send", "0", "--id", "n1", "new root"], 0);
    let r = run_conductor(&t, &["wait", "n1"], 0);
    assert_eq!(r.stdout.trim(), "new root");
}

/// Issue 38.4: a worker started on a full disk stayed up and said why, yet `status`
/// showed no worker and `conductor wait` on a task in its inbox ended at once (exit 4,
/// "no live worker"). It now holds its slot's gate while it waits: shown, waited for.
#[test]
fn a_worker_waiting_for_disk_space_shows_and_is_waited_for() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "2m"));
    let t = root_on(&disk, dir);
    t.client.create_worker(S0).unwrap();
    t.client
        .write_task(S0, &Task::new("hello").with_id("later"))
        .unwrap();
    let filler = disk.fill_leaving(0);
    let w = WorkerProc::spawn(&t, S0, "cat", &[], &[]);
    wait_until(BOUND, "the worker to say the disk is full", || {
        w.stderr().contains("disk full")
    });
    let r = run_conductor(&t, &["status"], 0);
    assert!(
        r.stdout.contains("waiting for disk space") && r.stdout.contains("live"),
        "{r:?}"
    );
    // Past the grace a wait gives a slot nobody serves (2 s): it times out instead.
    let r = run_conductor(&t, &["wait", "later", "--timeout", "4s"], 1);
    assert!(r.stderr.contains("timed out"), "{r:?}");
    fs::remove_file(&filler).unwrap();
    let r = run_conductor(&t, &["wait", "later"], 0);
    assert_eq!(r.stdout.trim(), "hello", "{}", w.stderr());
}

/// Issue 38.2 for the hooks: a hung `budgetCallback` (started by the worker whose
/// task's cost spent the budget) outlived its SIGKILLed worker, as the on-finish
/// callback did, because it was not recorded in the slot. Whoever recovers the slot
/// ends it now.
#[test]
fn a_budget_hook_outliving_its_killed_worker_is_ended_by_whoever_recovers_the_slot() {
    let t = TestRoot::new();
    let pids = t.dir.path().join("hook.pids");
    let config = serde_json::json!({
        "dailyBudgetUsd": 0.01,
        // The shell and a child in its group, both recorded; neither ends by itself.
        "budgetCallback": format!("sleep 1000 & echo \"$$ $!\" >> {}; wait", pids.display()),
        "callbackTimeoutSecs": 3600,
    });
    fs::write(t.client.root().config_file(), config.to_string()).unwrap();
    let fake = crate::harness::agent("fake-claude-stream")
        .display()
        .to_string();
    let mut w = WorkerProc::start(&t, S0, &fake, &["--preset", "claude"], &[]);
    // Its cost ($0.0375) spends the day's $0.01.
    run_conductor(&t, &["send", "0", "--id", "spender", "spend"], 0);
    run_conductor(&t, &["wait", "spender"], 0);
    let group = || -> Vec<i32> {
        fs::read_to_string(&pids)
            .unwrap_or_default()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    };
    wait_until(BOUND, "the budget hook to start", || group().len() == 2);
    let group = group();
    // Whatever the outcome, no hook outlives the test.
    let _reaper = KillOnDrop(group.clone());
    w.crash();
    assert!(
        group.iter().all(|p| alive(*p)),
        "the hook went with its worker: {group:?}"
    );
    let _restarted = WorkerProc::start(&t, S0, &fake, &["--preset", "claude"], &[]);
    wait_until(BOUND, "the dead worker's budget hook to be ended", || {
        group.iter().all(|p| !alive(*p))
    });
    assert!(
        fs::read_dir(t.path().join("workers/0/callbacks"))
            .unwrap()
            .next()
            .is_none(),
        "its record is gone"
    );
}

/// SIGKILLs the processes it names, still alive, when dropped.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in self.0.iter().filter(|p| alive(**p)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
