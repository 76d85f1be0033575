//! The `conductor` inspection and maintenance commands through the real binary:
//! status, logs, wait, cancel, locks, gc, doctor, init/create-worker, completions.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use conductor::dirlock::{Acquire, DirLock, LockOptions, LockOwner};
use conductor::protocol::now_rfc3339;
use conductor::{host, Outcome, Slot, Status, Task, TaskId, WorkerState};
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::harness::Bg;
use crate::harness::{agent, bin, wait_until, TestRoot, WorkerProc};

/// Generous: the machine has two cores and is busy.
const BOUND: Duration = Duration::from_secs(60);
const S0: Slot = Slot(0);
const S1: Slot = Slot(1);

/// `conductor …` on the test root (never the user's), bounded.
fn conductor(t: &TestRoot) -> assert_cmd::Command {
    let mut c = assert_cmd::Command::new(bin("conductor"));
    c.env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .timeout(BOUND);
    c
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(t: &TestRoot, args: &[&str]) -> Ran {
    let out = conductor(t).args(args).output().expect("run conductor");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run, expect exit `code`, return stdout.
#[track_caller]
fn run_ok(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    let r = run(t, args);
    assert_eq!(
        r.code,
        Some(code),
        "conductor {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    r
}

#[track_caller]
fn json_of(t: &TestRoot, args: &[&str], code: i32) -> Value {
    let r = run_ok(t, args, code);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
        panic!(
            "conductor {args:?}: not one JSON document ({e}):\n{}",
            r.stdout
        )
    })
}

fn slot_json(t: &TestRoot, slot: Slot) -> Value {
    let v = json_of(t, &["status", &slot.to_string(), "--json"], 0);
    let workers = v["workers"].as_array().expect("workers array");
    assert_eq!(workers.len(), 1, "{v}");
    workers[0].clone()
}

fn flags(slot: &Value) -> Vec<String> {
    slot["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

/// Whether process `pid` has an inotify watch on `dir` (it is armed and waiting).
fn watches(pid: u32, dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = fs::metadata(dir).map(|m| m.ino()) else {
        return false;
    };
    let needle = format!(" ino:{ino:x} ");
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines()
                .any(|l| l.starts_with("inotify ") && l.contains(&needle))
        })
    })
}

fn sh(script: &str) -> String {
    agent(script).display().to_string()
}

fn send(t: &TestRoot, slot: Slot, id: &str, prompt: &str) {
    t.client
        .write_task(slot, &Task::new(prompt).with_id(id))
        .unwrap_or_else(|e| panic!("write_task {id}: {e}"));
}

fn wait_working(t: &TestRoot, slot: Slot, id: &str) -> Status {
    let want = TaskId::from(id);
    let mut last = None;
    wait_until(BOUND, &format!("worker {slot} working on {id}"), || {
        last = t.client.read_status(slot).ok().flatten();
        matches!(&last, Some(s) if s.status == WorkerState::Working && s.task_id.as_ref() == Some(&want))
    });
    last.unwrap()
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("reap true");
    assert!(!host::pid_alive(pid), "pid {pid} was reused at once");
    pid
}

/// A lock directory as a holder with `pid` on this host would have left it.
fn plant_lock(lock: &Path, pid: u32) {
    fs::create_dir_all(lock).unwrap();
    let owner = LockOwner {
        pid,
        host: host::hostname().to_string(),
        boot_id: host::boot_id().to_string(),
        start_time: None,
        nonce: "planted".to_string(),
        acquired_at: now_rfc3339(),
        heartbeat_at: None,
        host_id: Some(host::host_id().to_string()),
        epoch: 1,
        task: None,
    };
    fs::write(lock.join("owner.json"), serde_json::to_vec(&owner).unwrap()).unwrap();
    fs::write(lock.join("pid"), format!("{pid}\n")).unwrap();
}

/// Set a file's mtime into the past with `touch -d`.
fn make_old(path: &Path, ago: &str) {
    let st = Command::new("touch")
        .args(["-d", ago])
        .arg(path)
        .status()
        .expect("run touch");
    assert!(st.success(), "touch -d {ago} {}", path.display());
}

// ----------------------------------------------------------------------------- status

#[test]
fn status_shows_an_idle_worker_and_its_pid() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    t.client.create_worker(S1).unwrap();

    let out = conductor(&t)
        .env("COLUMNS", "80")
        .arg("status")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("SLOT"), "{out}");
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "wider than 80 columns:\n{out}"
    );
    let row0 = lines
        .iter()
        .find(|l| l.starts_with("0 "))
        .expect("row for slot 0");
    assert!(row0.contains("idle"), "{out}");
    assert!(row0.contains(&format!("{} live", w.pid)), "{out}");
    let row1 = lines
        .iter()
        .find(|l| l.starts_with("1 "))
        .expect("row for slot 1");
    assert!(row1.contains("idle") && row1.contains("none"), "{out}");

    let s = slot_json(&t, S0);
    assert_eq!(s["state"], "idle");
    assert_eq!(s["workerLive"], true);
    assert_eq!(s["workerPid"], w.pid);
    assert_eq!(s["lock"], Value::Null);
    assert!(flags(&s).is_empty(), "{s}");
    assert!(s["statusAgeSecs"].as_f64().unwrap() >= 0.0);

    let all = json_of(&t, &["status", "--json"], 0);
    assert_eq!(all["workers"].as_array().unwrap().len(), 2);
    assert_eq!(all["workers"][1]["workerLive"], false);
    // The shared queue's capacity beside the slots.
    assert!(all["slots"]["used"].is_u64(), "{all}");
    assert_eq!(all["pending"]["total"], 0, "{all}");
    assert!(all["byKey"].is_object() && all["locks"].is_array(), "{all}");

    // An unknown slot is a usage error.
    let r = run_ok(&t, &["status", "7"], 2);
    assert!(r.stderr.contains("no worker slot 7"), "{}", r.stderr);
}

#[test]
fn status_shows_a_working_task_with_its_agent_and_lock() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, S0, "busy1", "x");
    let st = wait_working(&t, S0, "busy1");
    let agent_pid = st.agent_pid.expect("agent pid in status");

    let s = slot_json(&t, S0);
    assert_eq!(s["state"], "working");
    assert_eq!(s["taskId"], "busy1");
    assert_eq!(s["agentPid"], agent_pid);
    assert_eq!(s["agentAlive"], true);
    assert_eq!(s["workerPid"], w.pid);
    assert_eq!(s["workerLive"], true);
    assert_eq!(s["lock"]["pid"], w.pid);
    assert_eq!(s["lock"]["stale"], false);
    assert_eq!(s["running"]["taskId"], "busy1");
    assert!(s["heartbeatAgeSecs"].as_f64().is_some(), "{s}");
    assert!(flags(&s).is_empty(), "{s}");

    let out = run_ok(&t, &["status", "0"], 0).stdout;
    let row = out.lines().find(|l| l.starts_with("0 ")).expect("row");
    for want in [
        "working",
        "busy1",
        &agent_pid.to_string(),
        &format!("{} live", w.pid),
    ] {
        assert!(row.contains(want), "{want:?} missing:\n{out}");
    }
    assert!(!out.contains('!'), "no flags expected:\n{out}");
}

#[test]
fn status_flags_a_dead_worker_its_orphaned_task_and_stale_lock() {
    let t = TestRoot::new();
    let mut w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    send(&t, S0, "k1", "x");
    wait_working(&t, S0, "k1");
    w.signal(Signal::SIGKILL);
    w.wait_exit(BOUND);

    let mut s = Value::Null;
    wait_until(BOUND, "all three flags", || {
        s = slot_json(&t, S0);
        let f = flags(&s);
        ["dead-worker", "orphaned-task", "stale-lock"]
            .iter()
            .all(|want| f.iter().any(|g| g == want))
    });
    assert_eq!(s["state"], "working");
    assert_eq!(s["workerLive"], false);
    assert_eq!(s["workerPid"], w.pid);
    assert_eq!(s["lock"]["stale"], true);
    assert!(
        s["lock"]["reason"].as_str().unwrap().contains("dead"),
        "{s}"
    );

    let out = run_ok(&t, &["status"], 0).stdout;
    for want in [
        "dead worker",
        "orphaned task (k1)",
        "stale lock",
        &format!("{} gone", w.pid),
        "conductor recover 0",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }

    // Recovery (which also kills what is left of the agent's group) clears them all.
    run_ok(&t, &["recover", "0"], 0);
    let s = slot_json(&t, S0);
    assert!(flags(&s).is_empty(), "{s}");
    assert_eq!(s["state"], "error");
}

#[test]
fn status_flags_a_stale_lock_and_a_waiting_inbox() {
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    let dead = dead_pid();
    plant_lock(&paths.lock_dir(), dead);
    send(&t, S0, "t9", "waiting");

    let s = slot_json(&t, S0);
    assert_eq!(flags(&s), vec!["stale-lock", "inbox-waiting"]);
    assert_eq!(s["inbox"]["taskId"], "t9");
    assert_eq!(s["lock"]["pid"], dead);
    assert_eq!(s["state"], "idle");

    let out = run_ok(&t, &["status"], 0).stdout;
    assert!(out.contains("inbox waiting (t9)"), "{out}");
    assert!(
        out.contains(&format!("stale lock: holder pid {dead} is dead")),
        "{out}"
    );
    assert!(out.contains(&format!("{dead} stale")), "{out}");
}

#[test]
fn status_watch_redraws_when_a_slot_changes() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let mut bg = Bg::spawn(&t, &["status", "--watch"], true);
    bg.wait_stdout("the first table", |o| o.contains("idle"));
    let dir = t.client.worker(S0).dir;
    wait_until(BOUND, "the watcher to be armed", || watches(bg.pid(), &dir));

    let mut st = Status::new(WorkerState::Working);
    st.task_id = Some(TaskId::from("w1"));
    t.client.write_status(S0, &st).unwrap();
    bg.wait_stdout("a redraw showing w1", |o| o.contains("w1"));
    // Into a pipe the frames follow one another, with no escape sequences; on a
    // terminal the screen is cleared between them.
    let frames = bg.stdout();
    assert!(!frames.contains('\x1b'), "escapes into a pipe: {frames:?}");
    assert!(frames.matches("(Ctrl-C to quit)").count() >= 2, "{frames}");

    bg.signal(Signal::SIGINT);
    assert_eq!(bg.wait_exit().code(), Some(0), "{}", bg.stderr());
}

// ----------------------------------------------------------------------------- logs

#[test]
fn logs_prints_the_live_log_and_a_finished_tasks_log() {
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    // No output.log yet: nothing to print, not an error.
    assert_eq!(run_ok(&t, &["logs", "0"], 0).stdout, "");

    fs::write(paths.output_log(), "line one\nline two\n").unwrap();
    assert_eq!(run_ok(&t, &["logs", "0"], 0).stdout, "line one\nline two\n");

    fs::write(paths.task_log(&TaskId::from("old")), "kept output\n").unwrap();
    assert_eq!(
        run_ok(&t, &["logs", "0", "--task", "old"], 0).stdout,
        "kept output\n"
    );
    let r = run_ok(&t, &["logs", "0", "--task", "never"], 2);
    assert!(r.stderr.contains("no log for task never"), "{}", r.stderr);
    run_ok(&t, &["logs", "3"], 2);
}

#[test]
fn logs_follow_keeps_following_the_name_across_replaced_files() {
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    fs::write(paths.output_log(), "first\n").unwrap();
    let mut bg = Bg::spawn(&t, &["logs", "0", "-f"], true);
    bg.wait_stdout("what was there", |o| o == "first\n");
    wait_until(BOUND, "the follower to watch the slot", || {
        watches(bg.pid(), &paths.dir)
    });

    // Appended while it runs.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(paths.output_log())
        .unwrap();
    use std::io::Write;
    f.write_all(b"second\n").unwrap();
    bg.wait_stdout("the appended line", |o| o == "first\nsecond\n");

    // The task ends: the worker moves the log away and starts a fresh one.
    f.write_all(b"last words\n").unwrap();
    drop(f);
    fs::rename(paths.output_log(), paths.task_log(&TaskId::from("a"))).unwrap();
    fs::write(paths.output_log(), "third\n").unwrap();
    bg.wait_stdout("the old file's tail, then the new file", |o| {
        o == "first\nsecond\nlast words\nthird\n"
    });

    bg.signal(Signal::SIGINT);
    assert_eq!(bg.wait_exit().code(), Some(130), "{}", bg.stderr());
}

#[test]
fn logs_follow_streams_a_real_agent_and_ends_when_stdout_closes() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    let paths = t.client.worker(S0);
    // Nobody reads its output: it ends by itself, successfully, even with nothing
    // to write (no task has run yet).
    let mut deaf = Bg::spawn(&t, &["logs", "0", "-f"], false);
    assert_eq!(deaf.wait_exit().code(), Some(0), "{}", deaf.stderr());

    let mut bg = Bg::spawn(&t, &["logs", "0", "-f"], true);
    wait_until(BOUND, "the follower to watch the slot", || {
        watches(bg.pid(), &paths.dir)
    });
    send(&t, S0, "live1", "x");
    bg.wait_stdout("the agent's output", |o| o == "working\n");

    bg.signal(Signal::SIGTERM);
    assert_eq!(bg.wait_exit().code(), Some(130), "{}", bg.stderr());
}

// ----------------------------------------------------------------------------- wait

#[test]
fn wait_with_a_task_id_prints_its_output() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    send(&t, S0, "t1", "hello there");
    let r = run_ok(&t, &["wait", "0", "t1"], 0);
    assert_eq!(r.stdout, "hello there\n");

    let v = json_of(&t, &["wait", "0", "t1", "--json"], 0);
    assert_eq!(v["taskId"], "t1");
    assert_eq!(v["success"], true);
    assert_eq!(v["output"], "hello there");
}

#[test]
fn wait_without_an_id_waits_for_the_running_task_and_fails_when_it_fails() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    // Nothing current yet.
    let r = run_ok(&t, &["wait", "0"], 1);
    assert!(r.stderr.contains("nothing to wait for"), "{}", r.stderr);

    send(&t, S0, "w2", "x");
    wait_working(&t, S0, "w2");
    let mut bg = Bg::spawn(&t, &["wait", "0", "--json"], true);
    let results = t.client.worker(S0).results_dir();
    wait_until(BOUND, "the waiter to be armed", || {
        watches(bg.pid(), &results)
    });
    fs::write(t.client.worker(S0).cancel(), "w2\n").unwrap();

    assert_eq!(bg.wait_exit().code(), Some(1), "a cancelled task failed");
    let v: Value = serde_json::from_str(&bg.stdout()).expect("one JSON result");
    assert_eq!(v["taskId"], "w2");
    assert_eq!(v["outcome"], "cancelled");
    assert!(bg.stderr().contains("task w2 CANCELLED"), "{}", bg.stderr());
}

#[test]
fn wait_gives_up_after_its_timeout_with_a_clear_error() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let started = Instant::now();
    let r = run_ok(&t, &["wait", "0", "never", "--wait-timeout", "0.5"], 1);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(r.stderr.contains("timed out after 0.5s"), "{}", r.stderr);
    assert!(r.stderr.contains("task never"), "{}", r.stderr);
    // Durations in words work too; a bad one is a usage error.
    // The old spelling is still taken (a hidden alias).
    run_ok(&t, &["wait", "0", "never", "--timeout", "300ms"], 1);
    run_ok(&t, &["wait", "0", "never", "--timeout", "soon"], 2);
}

// ----------------------------------------------------------------------------- cancel

#[test]
fn cancel_stops_the_running_task_and_refuses_when_nothing_runs() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, &sh("slow.sh"), &[], &[]);
    let r = run_ok(&t, &["cancel", "0"], 1);
    assert!(
        r.stderr.contains("nothing is running on worker 0"),
        "{}",
        r.stderr
    );

    send(&t, S0, "c1", "x");
    let st = wait_working(&t, S0, "c1");
    // Another id: refused, nothing written.
    let r = run_ok(&t, &["cancel", "0", "--task", "other"], 1);
    assert!(r.stderr.contains("task c1 is"), "{}", r.stderr);
    assert!(!t.client.worker(S0).cancel().exists());

    let r = run_ok(&t, &["cancel", "0", "--task", "c1"], 0);
    assert!(r.stdout.contains("task c1"), "{}", r.stdout);
    let result = t
        .client
        .wait_for_result(S0, &TaskId::from("c1"), BOUND)
        .unwrap();
    assert_eq!(result.outcome, Some(Outcome::Cancelled));
    wait_until(BOUND, "agent gone", || {
        !host::pid_alive(st.agent_pid.unwrap())
    });
    wait_until(BOUND, "running.json retired", || {
        !t.client.worker(S0).running().exists()
    });
    run_ok(&t, &["cancel", "0"], 1);
}

// ----------------------------------------------------------------------------- locks

fn lock_named<'a>(locks: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    locks["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == kind && l["name"] == name)
}

#[test]
fn locks_lists_every_kind_and_clean_removes_only_stale_ones_with_apply() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let root = t.client.root().clone();
    let dead = dead_pid();
    // A stale key lock, a live one (held by this test process), a stale run-slot
    // lock, a dead process's parked spare, and a free gate of another role.
    plant_lock(&root.key_lock("alice"), dead);
    let live = match DirLock::try_acquire(&root.key_lock("bob"), &LockOptions::default()).unwrap() {
        Acquire::Acquired(l) => l,
        Acquire::Held(h) => panic!("bob's lock held: {h}"),
    };
    plant_lock(&root.slot_lock(0), dead);
    let w1 = t.client.create_worker(S1).unwrap();
    let spare = w1.dir.join(format!(".lock.spare.{dead}"));
    plant_lock(&spare, dead);
    fs::write(root.gates_dir().join("launcher"), "").unwrap();

    let v = json_of(&t, &["locks", "--json"], 0);
    let gate = lock_named(&v, "gate", "worker 0").expect("worker 0's gate");
    assert_eq!(gate["status"], "alive");
    assert_eq!(gate["pid"], w.pid);
    let alice = lock_named(&v, "key", "key alice").expect("alice");
    assert_eq!(alice["status"], "stale");
    assert_eq!(alice["pid"], dead);
    assert!(alice["reason"].as_str().unwrap().contains("dead"));
    let bob = lock_named(&v, "key", "key bob").expect("bob");
    assert_eq!(bob["status"], "alive");
    assert_eq!(bob["pid"], std::process::id());
    assert!(bob["acquiredAt"].is_string());
    assert_eq!(
        lock_named(&v, "run-slot", "run-slot 0").expect("slot 0")["status"],
        "stale"
    );
    assert_eq!(
        lock_named(&v, "spare", &format!("worker 1 (pid {dead})")).expect("spare")["status"],
        "stale"
    );
    assert_eq!(
        lock_named(&v, "gate", ".locks/launcher").expect("launcher gate")["status"],
        "free"
    );

    let human = run_ok(&t, &["locks"], 0).stdout;
    for want in ["key alice", "stale", "alive", "free", &w.pid.to_string()] {
        assert!(human.contains(want), "{want:?} missing:\n{human}");
    }

    // Dry run: reported, nothing removed.
    let dry = run_ok(&t, &["locks", "clean"], 0).stdout;
    assert!(dry.contains("would remove: key key alice"), "{dry}");
    assert!(dry.contains("run-slot 0"), "{dry}");
    assert!(dry.contains("--apply"), "{dry}");
    assert!(!dry.contains("bob"), "{dry}");
    assert!(root.key_lock("alice").exists() && root.slot_lock(0).exists() && spare.exists());

    let applied = json_of(&t, &["locks", "clean", "--apply", "--json"], 0);
    let cleaned = applied["locks"].as_array().unwrap();
    assert_eq!(cleaned.len(), 3, "{applied}");
    assert!(
        cleaned.iter().all(|c| c["action"] == "removed"),
        "{applied}"
    );
    assert!(!root.key_lock("alice").exists());
    assert!(!root.slot_lock(0).exists());
    assert!(!spare.exists());
    // The live ones are untouched.
    assert!(root.key_lock("bob").join("owner.json").exists());
    assert!(t.client.worker(S0).worker_gate().exists());
    assert_eq!(
        run_ok(&t, &["locks", "clean", "--apply"], 0).stdout,
        "no stale locks\n"
    );
    live.release().unwrap();
}

// ----------------------------------------------------------------------------- gc

#[test]
fn gc_plans_then_removes_only_old_files_and_never_a_running_tasks() {
    let t = TestRoot::new();
    let w0 = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let p0 = t.client.worker(S0);
    for id in ["old1", "new1"] {
        send(&t, S0, id, id);
        t.client
            .wait_for_result(S0, &TaskId::from(id), BOUND)
            .unwrap();
    }
    wait_until(BOUND, "new1 retired", || {
        p0.task_record(&TaskId::from("new1")).exists() && !p0.running().exists()
    });
    let old1 = TaskId::from("old1");
    let old_files = [
        p0.result_for(&old1),
        p0.task_record(&old1),
        p0.task_log(&old1),
    ];
    for f in &old_files {
        make_old(f, "2 days ago");
    }
    fs::write(p0.rejected_dir().join("x.task.json"), "{").unwrap();
    fs::write(p0.rejected_dir().join("x.task.json.reason"), "bad\n").unwrap();
    make_old(&p0.rejected_dir().join("x.task.json"), "2 days ago");
    make_old(&p0.rejected_dir().join("x.task.json.reason"), "2 days ago");
    let old_tmp = p0.dir.join(".status.json.dead.tmp");
    let new_tmp = p0.dir.join(".status.json.fresh.tmp");
    fs::write(&old_tmp, "x").unwrap();
    fs::write(&new_tmp, "x").unwrap();
    make_old(&old_tmp, "1 hour ago");
    let queue_tmp = t.client.root().queue_tmp().join(".t.json.gone.tmp");
    fs::write(&queue_tmp, "x").unwrap();
    make_old(&queue_tmp, "1 hour ago");
    // .trash/ of a served slot is its worker's business.
    fs::create_dir_all(p0.trash_dir()).unwrap();
    fs::write(p0.trash_dir().join("planted"), "x").unwrap();

    // Slot 1 runs a task; its files are old but must stay.
    let _w1 = WorkerProc::start(&t, S1, &sh("slow.sh"), &[], &[]);
    let p1 = t.client.worker(S1);
    send(&t, S1, "run1", "x");
    wait_working(&t, S1, "run1");
    let run1 = TaskId::from("run1");
    fs::write(p1.task_record(&run1), "{}").unwrap();
    for f in [p1.running(), p1.task_record(&run1)] {
        make_old(&f, "3 days ago");
    }

    // Slot 2 has no worker: its .trash/ goes.
    let p2 = t.client.create_worker(Slot(2)).unwrap();
    fs::create_dir_all(p2.trash_dir()).unwrap();
    fs::write(p2.trash_dir().join("leftover"), "xyz").unwrap();

    let mut expected: Vec<PathBuf> = old_files.to_vec();
    expected.extend([
        p0.rejected_dir().join("x.task.json"),
        p0.rejected_dir().join("x.task.json.reason"),
        old_tmp.clone(),
        queue_tmp.clone(),
        p2.trash_dir().join("leftover"),
    ]);
    expected.sort();

    let plan = json_of(&t, &["gc", "--json"], 0);
    assert_eq!(plan["applied"], false);
    let mut listed: Vec<PathBuf> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| PathBuf::from(i["path"].as_str().unwrap()))
        .collect();
    listed.sort();
    assert_eq!(listed, expected, "{plan}");
    assert!(plan["bytes"].as_u64().unwrap() > 0);
    assert!(plan["protected"]
        .as_array()
        .unwrap()
        .contains(&Value::from("run1")));

    let human = run_ok(&t, &["gc", "--older-than", "24h"], 0).stdout;
    assert!(human.contains("would remove 8 files"), "{human}");
    assert!(human.contains("workers/0/results/old1.json"), "{human}");
    assert!(human.contains("--apply"), "{human}");
    assert!(!human.contains("new1"), "{human}");
    assert!(
        expected.iter().all(|p| p.exists()),
        "a dry run removes nothing"
    );

    // A longer threshold spares the 2-day-old files (temp files still go).
    let lenient = json_of(&t, &["gc", "--older-than", "7d", "--json"], 0);
    assert_eq!(lenient["items"].as_array().unwrap().len(), 3, "{lenient}");

    let applied = run_ok(&t, &["gc", "--apply"], 0).stdout;
    assert!(applied.contains("removed 8 files"), "{applied}");
    assert!(expected.iter().all(|p| !p.exists()), "{applied}");
    for keep in [
        p0.result_for(&TaskId::from("new1")),
        p0.task_record(&TaskId::from("new1")),
        p0.result(),
        p0.status(),
        new_tmp,
        p0.trash_dir().join("planted"),
        p1.running(),
        p1.task_record(&run1),
        p1.status(),
    ] {
        assert!(keep.exists(), "{} must stay", keep.display());
    }
    assert!(t.client.read_result(S0).unwrap().is_some());
    assert_eq!(
        t.client.read_status(S1).unwrap().unwrap().status,
        WorkerState::Working
    );
    assert_eq!(
        run_ok(&t, &["gc"], 0).stdout.lines().next().unwrap_or(""),
        "nothing to collect (older than 1d; temp files older than 10m)"
    );
    drop(w0);
}

// ----------------------------------------------------------------------------- doctor

#[test]
fn doctor_passes_on_a_healthy_root_and_fails_without_the_agent_or_on_bad_json() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();

    let v = json_of(&t, &["doctor", "--agent", "cat", "--json"], 0);
    assert_eq!(v["ok"], true, "{v}");
    let checks = v["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for want in [
        "root",
        "permissions",
        "json",
        "locks",
        "watcher",
        "filesystem",
        "inotify",
        "tmux",
        "agent",
    ] {
        assert!(names.contains(&want), "{want} not checked: {names:?}");
    }
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{v}");
    let watcher = checks.iter().find(|c| c["name"] == "watcher").unwrap();
    assert!(
        watcher["detail"].as_str().unwrap().contains("native"),
        "{watcher}"
    );
    let root = checks.iter().find(|c| c["name"] == "root").unwrap();
    assert_eq!(root["status"], "ok");
    assert!(root["detail"].as_str().unwrap().contains("0700"), "{root}");

    let r = run_ok(&t, &["doctor", "--agent", "no-such-agent-xyz --flag"], 1);
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("no-such-agent-xyz"))
        .unwrap_or_else(|| panic!("agent not named:\n{}", r.stdout));
    assert!(line.starts_with("fail"), "{line}");
    assert!(
        r.stdout.contains("fix: install no-such-agent-xyz"),
        "{}",
        r.stdout
    );

    // A result that does not parse fails the json check.
    let bad = t.client.worker(S0).results_dir().join("broken.json");
    fs::write(&bad, "{\"taskId\": ").unwrap();
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o600)).unwrap();
    let v = json_of(&t, &["doctor", "--agent", "cat", "--json"], 1);
    let json_check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "json")
        .unwrap()
        .clone();
    assert_eq!(json_check["status"], "fail");
    assert!(
        json_check["detail"]
            .as_str()
            .unwrap()
            .contains("broken.json"),
        "{json_check}"
    );

    // A root that does not exist fails with the command that creates one.
    let r = conductor(&t)
        .args(["doctor", "--agent", "cat", "--root"])
        .arg(t.dir.path().join("nowhere"))
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("does not exist") && out.contains("conductor init"),
        "{out}"
    );
}

/// The checks that judge the root itself (not the machine: inotify, tmux, agent).
fn root_checks(v: &Value) -> Vec<(String, String, String)> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            ["root", "permissions", "config", "json", "locks", "slots"]
                .contains(&c["name"].as_str().unwrap())
        })
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
                c["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Write a task the way an original client does: a plain write, mode 0644.
///
/// The mode is given at creation: a chmod afterwards races the worker, which may have
/// taken the file already.
fn write_task_like_an_original_client(t: &TestRoot, slot: Slot, body: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let inbox = t.client.worker(slot).task();
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&inbox)
        .unwrap();
    file.write_all(body.as_bytes()).unwrap();
}

#[test]
fn doctor_is_clean_after_normal_use_including_original_clients_files() {
    let t = TestRoot::new();
    run_ok(&t, &["init", "1"], 0);
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    send(&t, S0, "plain", "hello");
    t.client
        .wait_for_result(S0, &TaskId::from("plain"), BOUND)
        .unwrap();
    write_task_like_an_original_client(&t, S0, r#"{"id": "orig", "prompt": "hi"}"#);
    t.client
        .wait_for_result(S0, &TaskId::from("orig"), BOUND)
        .unwrap();
    // A task that does not parse is moved to rejected/ as it was written.
    write_task_like_an_original_client(&t, S0, "{not json");
    let rejected = t.client.worker(S0).rejected_dir();
    wait_until(BOUND, "the bad task rejected", || {
        fs::read_dir(&rejected).is_ok_and(|mut d| d.next().is_some())
            && !t.client.worker(S0).task().exists()
    });

    let clean = |v: &Value| {
        let checks = root_checks(v);
        assert_eq!(checks.len(), 6, "{v}");
        for (name, status, detail) in checks {
            assert_eq!(status, "ok", "{name}: {detail}");
        }
    };
    clean(&json_of(&t, &["doctor", "--agent", "cat", "--json"], 0));
    w.signal(Signal::SIGTERM);
    w.wait_exit(BOUND);
    clean(&json_of(&t, &["doctor", "--agent", "cat", "--json"], 0));

    // What a user must fix is still reported: the root opened up exposes that file.
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for dir in [t.client.worker(S0).dir.clone(), rejected.clone()] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::set_permissions(t.path().join("workers"), fs::Permissions::from_mode(0o755)).unwrap();
    let v = json_of(&t, &["doctor", "--agent", "cat", "--json"], 0);
    let perms = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "permissions")
        .unwrap()
        .clone();
    assert_eq!(perms["status"], "warn", "{perms}");
    assert!(
        perms["detail"].as_str().unwrap().contains("rejected"),
        "{perms}"
    );
}

// ----------------------------------------------------------------------------- init

#[test]
fn init_and_create_worker_set_up_private_slots() {
    let t = TestRoot::new();
    let fresh = t.dir.path().join("fresh-root");
    let r = run_ok(&t, &["init", "3", "--root", fresh.to_str().unwrap()], 0);
    assert!(
        r.stdout
            .contains(&format!("created root {}", fresh.display())),
        "{}",
        r.stdout
    );
    let client = conductor::Client::new(conductor::Root::new(&fresh));
    for n in 0..3 {
        let w = client.worker(Slot(n));
        assert!(
            r.stdout.contains(&format!("created worker slot {n}")),
            "{}",
            r.stdout
        );
        assert_eq!(
            fs::metadata(&w.dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(w.results_dir().is_dir() && w.tasks_dir().is_dir() && w.rejected_dir().is_dir());
        assert_eq!(
            client.read_status(Slot(n)).unwrap().unwrap().status,
            WorkerState::Idle
        );
    }
    assert!(!client.worker(Slot(3)).dir.exists());
    assert!(conductor::Root::new(&fresh).queue_pending().is_dir());
    assert_eq!(client.list_workers().unwrap().len(), 3);

    // Idempotent, and says so.
    let again = run_ok(&t, &["init", "3", "--root", fresh.to_str().unwrap()], 0);
    assert!(
        again.stdout.contains("kept existing worker slot 2"),
        "{}",
        again.stdout
    );

    let r = conductor(&t)
        .env("CONDUCTOR_HOME", &fresh)
        .args(["create-worker", "5"])
        .output()
        .unwrap();
    assert!(r.status.success());
    assert!(String::from_utf8_lossy(&r.stdout).contains("created worker slot 5"));
    assert!(client.worker(Slot(5)).status().exists());

    run_ok(&t, &["create-worker", "05"], 2);
    // `--dir` is a project directory everywhere: init names the root with --root, and
    // the old spelling is refused with the flag to use, creating nothing.
    let elsewhere = t.dir.path().join("not-a-root");
    let r = run_ok(&t, &["init", "1", "--dir", elsewhere.to_str().unwrap()], 2);
    assert!(r.stderr.contains("--root"), "{}", r.stderr);
    assert!(!elsewhere.exists());
}

// ----------------------------------------------------------------------------- completions

#[test]
fn completions_are_generated_for_each_shell() {
    let t = TestRoot::new();
    let bash = run_ok(&t, &["completions", "bash"], 0).stdout;
    assert!(bash.contains("conductor"), "{bash}");
    assert!(
        bash.contains("status") && bash.contains("locks"),
        "subcommands listed"
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = run_ok(&t, &["completions", shell], 0).stdout;
        assert!(out.contains("conductor"), "{shell}: {out}");
    }
    run_ok(&t, &["completions", "tcsh"], 2);
}

#[test]
fn send_delivers_refuses_a_busy_inbox_and_waits_for_the_output() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    // No worker yet: the first task waits in the inbox, the second is refused.
    let first = run_ok(&t, &["send", "0", "first", "--id", "t1"], 0);
    assert_eq!(first.stdout.trim(), "t1");
    let busy = run_ok(&t, &["send", "0", "second"], 3);
    assert!(
        busy.stderr.contains("inbox busy") && busy.stderr.contains("t1"),
        "{}",
        busy.stderr
    );
    // The waiting task is the client's to withdraw (nothing picked it up yet).
    fs::remove_file(t.client.worker(S0).task()).unwrap();
    let _w = WorkerProc::start(&t, S0, "tr a-z A-Z", &[], &[]);
    let waited = run_ok(&t, &["send", "0", "hello there", "--wait"], 0);
    assert_eq!(waited.stdout, "HELLO THERE\n");
    let as_json = json_of(
        &t,
        &["send", "0", "json please", "--id", "7", "--wait", "--json"],
        0,
    );
    assert_eq!(as_json["taskId"], 7, "digits are sent as a number");
    assert_eq!(as_json["output"], "JSON PLEASE");
    // A context that is not JSON is a usage error, and nothing is delivered.
    run_ok(&t, &["send", "0", "x", "--context", "{nope"], 2);
}

#[test]
fn result_prints_the_newest_or_a_named_result_and_fails_for_a_failed_task() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let none = run_ok(&t, &["result", "0"], 1);
    assert!(none.stderr.contains("no result yet"), "{}", none.stderr);
    let _w = WorkerProc::start(
        &t,
        S0,
        "sh -c 'read p; case $p in bad*) echo broke >&2; exit 5;; *) echo \"ok $p\";; esac'",
        &[],
        &[],
    );
    for (id, prompt) in [("good", "fine"), ("bad", "bad input")] {
        t.client
            .write_task(S0, &Task::new(prompt).with_id(id))
            .unwrap();
        t.client
            .wait_for_result(S0, &TaskId::from(id), BOUND)
            .unwrap();
    }
    // Newest first: the failed one, exit 1 with its reason. (result.json follows
    // results/<id>.json by a moment.)
    wait_until(BOUND, "result.json to name the newest task", || {
        t.client
            .read_result(S0)
            .ok()
            .flatten()
            .is_some_and(|r| r.task_id == TaskId::from("bad"))
    });
    let newest = run_ok(&t, &["result", "0"], 1);
    assert!(
        newest.stderr.contains("exit status 5: broke"),
        "{}",
        newest.stderr
    );
    let named = run_ok(&t, &["result", "0", "good"], 0);
    assert_eq!(named.stdout, "ok fine\n");
    let doc = json_of(&t, &["result", "0", "good", "--json"], 0);
    assert_eq!(doc["success"], true);
    assert_eq!(doc["taskId"], "good");
    let missing = run_ok(&t, &["result", "0", "never"], 1);
    assert!(
        missing.stderr.contains("no result for task never"),
        "{}",
        missing.stderr
    );
}

#[test]
fn run_refuses_an_agent_that_cannot_run_before_starting_any_worker() {
    let t = TestRoot::new();
    let root = t.path().to_str().unwrap().to_string();
    let r = run_ok(
        &t,
        &[
            "run",
            "--agent",
            "no-such-agent-xyz -p",
            "--root",
            &root,
            "hello",
        ],
        2,
    );
    assert!(
        r.stderr
            .contains("the agent command `no-such-agent-xyz` is not found on PATH="),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("pass --agent"), "{}", r.stderr);
    // No worker ever served the root: no slot directory, no status.
    assert!(t.client.read_status(S0).unwrap().is_none());
    assert!(crate::harness::processes_of(t.path()).is_empty());

    // A preset's own program, looked for on the PATH the workers would get.
    let out = conductor(&t)
        .env("PATH", "/nowhere")
        .args(["run", "--preset", "gemini", "--root", &root, "hello"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the agent command `gemini` is not found on PATH=/nowhere"),
        "{stderr}"
    );
}

/// Issue 25, item 8: small mistakes a new user hit, each answered clearly.
#[test]
fn small_mistakes_get_clear_answers() {
    let t = TestRoot::new();
    t.client.create_worker(S0).unwrap();
    let root = t.path().display().to_string();
    // --root before the subcommand, as after it.
    let r = run_ok(&t, &["--root", &root, "tasks"], 0);
    assert!(r.stdout.contains("no tasks"), "{}", r.stdout);
    run_ok(&t, &[&format!("--root={root}"), "status"], 0);
    // A duration error without parser jargon.
    let r = run_ok(&t, &["wait", "x", "--timeout", "5 minutes please"], 2);
    assert!(r.stderr.contains("90s, 5m"), "{}", r.stderr);
    assert!(!r.stderr.contains("unknown time unit"), "{}", r.stderr);
    // A misspelt state: the nearest is suggested.
    let r = run_ok(&t, &["tasks", "--state", "runing"], 2);
    assert!(
        r.stderr.contains("did you mean \"running\""),
        "{}",
        r.stderr
    );
    // No such slot: an error, not "no tasks match".
    let r = run_ok(&t, &["tasks", "--slot", "9"], 2);
    assert!(r.stderr.contains("no worker slot 9"), "{}", r.stderr);
    // An empty prompt is refused.
    let r = run_ok(&t, &["submit", ""], 2);
    assert!(r.stderr.contains("empty"), "{}", r.stderr);
    run_ok(&t, &["submit", "  \n"], 2);
    // --dir is stored resolved.
    let sub = t.dir.path().join("proj/sub");
    fs::create_dir_all(&sub).unwrap();
    fs::create_dir_all(t.dir.path().join("proj/other")).unwrap();
    let dotted = sub.join("../other");
    let r = run_ok(
        &t,
        &[
            "submit",
            "x",
            "--id",
            "dotted",
            "--dir",
            dotted.to_str().unwrap(),
        ],
        0,
    );
    assert_eq!(r.stdout.trim(), "dotted");
    let pending = fs::read_dir(t.path().join("queue/pending"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with("~dotted.json"))
        .unwrap();
    let task: Value = serde_json::from_slice(&fs::read(pending.path()).unwrap()).unwrap();
    let stored = task["dir"].as_str().unwrap().to_string();
    assert!(!stored.contains(".."), "{stored}");
    assert!(stored.ends_with("proj/other"), "{stored}");
    // An oversized prompt names the setting that limits it.
    let big = t.dir.path().join("big.txt");
    fs::write(&big, "x".repeat(5 << 20)).unwrap();
    let r = run_ok(&t, &["submit", "-f", big.to_str().unwrap()], 2);
    assert!(r.stderr.contains("maxTaskBytes"), "{}", r.stderr);
    // init's help says what it makes.
    let r = run_ok(&t, &["init", "--help"], 0);
    assert!(r.stdout.contains("0..N-1"), "{}", r.stdout);
    // A failed slot is `failed` in status, as in tasks.
    let mut st = Status::new(WorkerState::Error);
    st.task_id = Some(TaskId::from("bad"));
    t.client.write_status(S0, &st).unwrap();
    let r = run_ok(&t, &["status"], 0);
    assert!(r.stdout.contains("failed"), "{}", r.stdout);
    assert!(!r.stdout.contains(" error "), "{}", r.stdout);
}
