//! The orchestrator's API (`Client`) against a private root.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use conductor::fsio::{self, Durability};
use conductor::watch::WatchMode;
use conductor::{
    Client, Error, Outcome, Root, Slot, Status, Task, TaskId, TaskResult, WorkerState,
};
use serde_json::json;

use crate::harness::{
    child_arg, child_command, child_role, child_say, inotify_watches, spin_until_exists,
    wait_until, ChildProc, TestRoot,
};

/// Generous bound for anything that should take milliseconds on an idle machine.
const BOUND: Duration = Duration::from_secs(30);

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn assert_mode(path: &Path, want: u32) {
    let got = mode_of(path);
    assert_eq!(
        got,
        want,
        "{} has mode {got:o}, expected {want:o}",
        path.display()
    );
}

/// A result as a worker would publish it (results/<id>.json, then result.json).
fn publish_result(client: &Client, slot: Slot, result: &TaskResult) {
    let w = client.worker(slot);
    fsio::ensure_dir(&w.results_dir()).unwrap();
    fsio::write_json(&w.result_for(&result.task_id), result, Durability::Durable).unwrap();
    fsio::write_json(&w.result(), result, Durability::Durable).unwrap();
}

fn success_result(id: TaskId, output: &str) -> TaskResult {
    let mut r = TaskResult::failed(id, Outcome::Success, "");
    r.success = true;
    r.error = None;
    r.output = output.to_string();
    r.exit_code = Some(0);
    r
}

#[test]
fn init_queue_creates_private_directories() {
    let t = TestRoot::new();
    let root = t.client.root();
    for dir in [
        root.path().to_path_buf(),
        root.workers_dir(),
        root.queue_dir(),
        root.queue_tmp(),
        root.queue_pending(),
        root.keys_dir(),
        root.slots_dir(),
        root.gates_dir(),
    ] {
        assert!(dir.is_dir(), "{} was not created", dir.display());
        assert_mode(&dir, 0o700);
    }
    // Idempotent.
    t.client.init_queue().expect("second init_queue");
    assert!(root.queue_pending().is_dir());
}

#[test]
fn create_worker_is_idempotent_and_private() {
    let t = TestRoot::new();
    let slot = Slot(3);
    let w = t.client.create_worker(slot).expect("create worker 3");
    assert_eq!(w.dir, t.path().join("workers").join("3"));
    for dir in [&w.dir, &w.results_dir(), &w.rejected_dir()] {
        assert!(dir.is_dir(), "{} missing", dir.display());
        assert_mode(dir, 0o700);
    }
    assert_mode(&w.status(), 0o600);
    let status = t
        .client
        .read_status(slot)
        .unwrap()
        .expect("a new worker has a status");
    assert_eq!(status.status, WorkerState::Idle);

    // A status the worker has since written survives a second create_worker.
    let mut working = Status::new(WorkerState::Working);
    working.task_id = Some(TaskId::from("busy-1"));
    t.client.write_status(slot, &working).unwrap();
    let w2 = t.client.create_worker(slot).expect("create_worker again");
    assert_eq!(w2, w);
    let after = t.client.read_status(slot).unwrap().unwrap();
    assert_eq!(
        after.status,
        WorkerState::Working,
        "create_worker must not reset the status"
    );
    assert_eq!(after.task_id, Some(TaskId::from("busy-1")));
    assert_mode(&w.status(), 0o600);

    // Files delivered later are private too.
    t.client.write_task(slot, &Task::new("p")).unwrap();
    assert_mode(&w.task(), 0o600);
}

#[test]
fn list_workers_skips_junk_and_sorts_numerically() {
    let t = TestRoot::new();
    assert_eq!(t.client.list_workers().unwrap(), Vec::<Slot>::new());
    for n in [10, 2, 0, 1] {
        t.client.create_worker(Slot(n)).unwrap();
    }
    let workers = t.client.root().workers_dir();
    for junk in ["abc", "01", "-1", ".tmp", "3x", " 4", "+5"] {
        fs::create_dir(workers.join(junk)).unwrap();
    }
    fs::write(workers.join("7"), b"a file, not a slot").unwrap();
    assert_eq!(
        t.client.list_workers().unwrap(),
        vec![Slot(0), Slot(1), Slot(2), Slot(10)],
        "2 sorts before 10, junk is skipped"
    );

    let missing = Client::new(Root::new(t.dir.path().join("never-created")));
    assert_eq!(missing.list_workers().unwrap(), Vec::<Slot>::new());
}

#[test]
fn slot_names_must_be_canonical_decimal() {
    for bad in ["a", "-1", "01", " 1", "", "1 ", "+1", "1.0", "٣"] {
        let err = bad
            .parse::<Slot>()
            .expect_err(&format!("{bad:?} must be rejected"));
        assert!(matches!(err, Error::InvalidSlot { .. }), "{bad:?}: {err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("{bad:?}")),
            "message quotes the input: {msg}"
        );
        assert!(
            msg.contains("decimal number"),
            "message says what a slot is: {msg}"
        );
    }
    for (good, n) in [("0", 0), ("7", 7), ("12", 12), ("1023", 1023)] {
        assert_eq!(good.parse::<Slot>().unwrap(), Slot(n));
        assert_eq!(Slot(n).to_string(), good);
    }
}

#[test]
fn write_task_then_read_task_round_trips() {
    let t = TestRoot::new();
    let slot = Slot(0);
    t.client.create_worker(slot).unwrap();
    assert_eq!(t.client.read_task(slot).unwrap(), None, "empty inbox");

    let mut task = Task::new("write a haiku about files\n✓")
        .with_id(1705234567890u64)
        .with_context(json!({"user": "ada", "n": [1, 2, 3]}))
        .with_timeout_secs(30);
    task.priority = Some(3);
    task.key = Some("ada".into());
    let id = t.client.write_task(slot, &task).expect("deliver");
    assert_eq!(id, TaskId::Number(1705234567890));

    let back = t
        .client
        .read_task(slot)
        .unwrap()
        .expect("task.json is there");
    assert_eq!(back, task);

    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(t.client.worker(slot).task()).unwrap()).unwrap();
    assert_eq!(
        raw["id"],
        json!(1705234567890u64),
        "numeric id stays a number on disk"
    );
    assert_eq!(raw["schema"], json!(1));
}

#[test]
fn write_task_assigns_an_id_when_absent() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    t.client.create_worker(Slot(1)).unwrap();
    let a = t
        .client
        .write_task(Slot(0), &Task::new("a"))
        .expect("deliver to 0");
    let b = t
        .client
        .write_task(Slot(1), &Task::new("b"))
        .expect("deliver to 1");
    a.validate().expect("generated id is valid");
    assert_ne!(a, b, "generated ids are distinct");
    let back = t.client.read_task(Slot(0)).unwrap().unwrap();
    assert_eq!(back.id, Some(a), "the returned id is the one on disk");
    assert_eq!(t.client.read_task(Slot(1)).unwrap().unwrap().id, Some(b));
}

#[test]
fn write_task_refuses_invalid_tasks() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let err = t
        .client
        .write_task(Slot(0), &Task::new("p").with_id("../escape"))
        .expect_err("invalid id");
    assert!(matches!(err, Error::InvalidTask { .. }), "{err:?}");
    assert!(err.to_string().contains("../escape"), "{err}");
    assert!(
        !t.client.worker(Slot(0)).task().exists(),
        "nothing delivered"
    );
}

#[test]
fn write_task_on_busy_inbox_names_the_waiting_task_and_leaves_it_alone() {
    let t = TestRoot::new();
    let slot = Slot(4);
    t.client.create_worker(slot).unwrap();
    let path = t.client.worker(slot).task();

    t.client
        .write_task(slot, &Task::new("first").with_id(1705234567890u64))
        .expect("first delivery");
    let before = fs::read(&path).unwrap();

    let err = t
        .client
        .write_task(slot, &Task::new("second").with_id("second-task"))
        .expect_err("inbox is busy");
    match &err {
        Error::InboxBusy { path: p, waiting } => {
            assert_eq!(p, &path);
            assert_eq!(waiting, "1705234567890");
        }
        other => panic!("expected InboxBusy, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("1705234567890"),
        "message names the waiting task: {msg}"
    );
    assert!(
        msg.contains(&path.display().to_string()),
        "message names the inbox: {msg}"
    );
    assert!(msg.contains("busy"), "{msg}");
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the waiting task.json must be unchanged"
    );

    // Also against a task an original client wrote by hand.
    fs::remove_file(&path).unwrap();
    let original = br#"{"id": "js-77", "prompt": "hi", "timestamp": "2024-01-14T12:34:56.789Z"}"#;
    fs::write(&path, original).unwrap();
    let err = t
        .client
        .write_task(slot, &Task::new("x"))
        .expect_err("busy");
    assert!(err.to_string().contains("js-77"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), original);

    // No temp files are left behind by the refused deliveries.
    let leftovers: Vec<_> = fs::read_dir(&t.client.worker(slot).dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

/// A big prompt (1 MiB) that is different for every id, so a torn or mixed read shows.
fn race_prompt(id: &str) -> String {
    format!("{id}|").repeat(1024 * 1024 / (id.len() + 1))
}

/// Sets the flag when dropped, so reader threads stop even when an assertion fails.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RaceArg {
    root: PathBuf,
    start: PathBuf,
    id: String,
}

#[test]
fn write_task_race_has_exactly_one_winner() {
    let slot = Slot(0);
    if child_role().as_deref() == Some("write-task") {
        let arg: RaceArg = serde_json::from_str(&child_arg()).unwrap();
        let client = Client::new(Root::new(arg.root));
        let task = Task::new(race_prompt(&arg.id)).with_id(arg.id.as_str());
        child_say("ready");
        spin_until_exists(&arg.start, BOUND * 2);
        match client.write_task(slot, &task) {
            Ok(id) => child_say(&format!("won {id}")),
            Err(Error::InboxBusy { waiting, .. }) => child_say(&format!("busy {waiting}")),
            Err(e) => child_say(&format!("error {e}")),
        }
        return;
    }
    if child_role().is_some() {
        return;
    }

    let t = TestRoot::new();
    t.client.create_worker(slot).unwrap();
    let start = t.dir.path().join("start");

    let mut children: Vec<(String, ChildProc)> = (0..3)
        .map(|i| {
            let id = format!("child-{i}");
            let arg = RaceArg {
                root: t.path().to_path_buf(),
                start: start.clone(),
                id: id.clone(),
            };
            let mut cmd = child_command(
                "client::write_task_race_has_exactly_one_winner",
                "write-task",
            );
            cmd.env(
                crate::harness::CHILD_ARG,
                serde_json::to_string(&arg).unwrap(),
            );
            (id, ChildProc::spawn(cmd))
        })
        .collect();
    for (_, c) in &mut children {
        c.expect_word("ready", BOUND);
    }

    // A reader that keeps reading the inbox for the whole race.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_readers_on_panic = StopOnDrop(stop.clone());
    let seen_tasks = Arc::new(Mutex::new(0usize));
    let reader = {
        let client = t.client.clone();
        let stop = stop.clone();
        let seen_tasks = seen_tasks.clone();
        thread::spawn(move || {
            let mut reads: Vec<Result<Option<(String, bool)>, String>> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let r = match client.read_task(slot) {
                    Ok(None) => Ok(None),
                    Ok(Some(task)) => {
                        let id = task.id.map(|i| i.to_string()).unwrap_or_default();
                        let complete = task.prompt == race_prompt(&id);
                        *seen_tasks.lock().unwrap() += 1;
                        Ok(Some((id, complete)))
                    }
                    Err(e) => Err(e.to_string()),
                };
                reads.push(r);
            }
            reads
        })
    };

    // A second reader on the raw bytes (cheap, so it reads far more often): whenever
    // task.json exists it must be byte for byte one contender's whole task file.
    let raw_reader = {
        let path = t.client.worker(slot).task();
        let stop = stop.clone();
        let ids = (0..8)
            .map(|i| format!("thread-{i}"))
            .chain(children.iter().map(|(id, _)| id.clone()));
        let whole: Vec<Vec<u8>> = ids
            .map(|id| fsio::to_json_bytes(&Task::new(race_prompt(&id)).with_id(id.as_str())))
            .collect();
        thread::spawn(move || {
            let (mut absent, mut whole_reads, mut torn) = (0usize, 0usize, 0usize);
            while !stop.load(Ordering::SeqCst) {
                match fs::read(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => absent += 1,
                    Err(e) => panic!("reading {}: {e}", path.display()),
                    Ok(bytes) if whole.contains(&bytes) => whole_reads += 1,
                    Ok(_) => torn += 1,
                }
            }
            (absent, whole_reads, torn)
        })
    };

    let barrier = Arc::new(Barrier::new(9));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let client = t.client.clone();
            let barrier = barrier.clone();
            let start = start.clone();
            thread::spawn(move || {
                let id = format!("thread-{i}");
                let task = Task::new(race_prompt(&id)).with_id(id.as_str());
                barrier.wait();
                spin_until_exists(&start, BOUND * 2);
                (id, client.write_task(slot, &task))
            })
        })
        .collect();

    // Everybody is at the line: threads past the barrier, children said "ready".
    barrier.wait();
    fs::write(&start, b"go").unwrap();

    // Every contender reports: "won" or "busy <the winner's id>".
    let mut winners = Vec::new();
    let mut busy_named = Vec::new();
    for h in threads {
        let (id, res) = h.join().expect("writer thread");
        match res {
            Ok(got) => {
                assert_eq!(got.to_string(), id);
                winners.push(id);
            }
            Err(Error::InboxBusy { waiting, .. }) => busy_named.push(waiting),
            Err(e) => panic!("writer {id} failed with something other than InboxBusy: {e}"),
        }
    }
    for (id, c) in &mut children {
        let word = c.next_word(BOUND * 2);
        if let Some(got) = word.strip_prefix("won ") {
            assert_eq!(got, id);
            winners.push(id.clone());
        } else if let Some(waiting) = word.strip_prefix("busy ") {
            busy_named.push(waiting.to_string());
        } else {
            panic!("child writer {id} failed: {word}");
        }
        assert!(
            c.wait_exit(BOUND).success(),
            "child writer {id} exited badly"
        );
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one delivery may succeed, got {winners:?}"
    );
    let winner = winners.pop().unwrap();
    assert_eq!(busy_named.len(), 10);
    for waiting in &busy_named {
        assert_eq!(
            waiting, &winner,
            "InboxBusy must name the waiting (winning) task"
        );
    }

    // Let the reader see the delivered task a few times, then stop it.
    wait_until(BOUND, "the reader to see the delivered task", || {
        *seen_tasks.lock().unwrap() >= 20
    });
    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().expect("reader thread");
    let (absent, whole_reads, torn) = raw_reader.join().expect("raw reader thread");
    assert_eq!(
        torn, 0,
        "task.json was seen torn or mixed {torn} times ({absent} absent, {whole_reads} whole)"
    );
    assert!(
        whole_reads > 0,
        "the raw reader never saw the delivered task"
    );
    for r in &reads {
        match r {
            Ok(None) => {}
            Ok(Some((id, complete))) => {
                assert_eq!(id, &winner, "the reader saw a task that did not win");
                assert!(complete, "the reader saw a torn or mixed task.json");
            }
            Err(e) => panic!("the reader saw a broken task.json: {e}"),
        }
    }

    let on_disk = t.client.read_task(slot).unwrap().expect("winner's task");
    assert_eq!(on_disk.id, Some(TaskId::Text(winner.clone())));
    assert_eq!(on_disk.prompt, race_prompt(&winner));
}

#[test]
fn results_can_be_read_and_cleared() {
    let t = TestRoot::new();
    let slot = Slot(2);
    t.client.create_worker(slot).unwrap();
    let id = TaskId::Number(1705234567890);
    assert_eq!(t.client.read_result(slot).unwrap(), None);
    assert_eq!(t.client.read_result_for(slot, &id).unwrap(), None);
    assert!(
        !t.client.clear_result(slot).unwrap(),
        "nothing to clear yet"
    );

    let first = success_result(TaskId::from("t-1"), "one\n");
    publish_result(&t.client, slot, &first);
    let second = TaskResult::failed(id.clone(), Outcome::Timeout, "timed out after 600s");
    publish_result(&t.client, slot, &second);

    assert_eq!(
        t.client.read_result(slot).unwrap(),
        Some(second.clone()),
        "newest result"
    );
    assert_eq!(
        t.client.read_result_for(slot, &id).unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        t.client
            .read_result_for(slot, &TaskId::from("t-1"))
            .unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        t.client
            .read_result_for(slot, &TaskId::from("t-2"))
            .unwrap(),
        None
    );

    assert!(
        t.client.clear_result(slot).unwrap(),
        "result.json was there"
    );
    assert_eq!(t.client.read_result(slot).unwrap(), None);
    assert!(!t.client.clear_result(slot).unwrap(), "already cleared");
    assert_eq!(
        t.client.read_result_for(slot, &id).unwrap(),
        Some(second),
        "clear_result keeps results/<id>.json"
    );

    let err = t
        .client
        .read_result_for(slot, &TaskId::from("../../x"))
        .expect_err("an id that is not a file name");
    assert!(matches!(err, Error::InvalidTask { .. }), "{err:?}");
}

#[test]
fn original_client_result_is_readable() {
    let t = TestRoot::new();
    let slot = Slot(0);
    let w = t.client.create_worker(slot).unwrap();
    fs::write(
        w.result(),
        br#"{"taskId": 1705234567890, "output": "hi\n", "success": true, "error": null, "timestamp": "2024-01-14T12:34:56.789Z"}"#,
    )
    .unwrap();
    let r = t.client.read_result(slot).unwrap().expect("result");
    assert_eq!(r.task_id, TaskId::Number(1705234567890));
    assert!(r.success);
    assert_eq!(r.output, "hi\n");
}

/// Run `wait` on this thread while another thread writes once the waiter's native
/// watch on `dir` is armed (or at once in poll mode); returns what `wait` returned.
fn wait_while_other_thread_writes<T>(
    dir: PathBuf,
    native: bool,
    write: impl FnOnce() + Send + 'static,
    wait: impl FnOnce() -> conductor::Result<T>,
) -> (conductor::Result<T>, Duration) {
    let writer = thread::spawn(move || {
        if native {
            wait_until(BOUND, "the waiter to watch the directory", || {
                inotify_watches(&dir)
            });
        }
        let writing = Instant::now();
        write();
        writing
    });
    let started = Instant::now();
    let res = wait();
    let returned = Instant::now();
    let writing = writer.join().expect("writer thread");
    assert!(
        returned >= writing,
        "the wait returned before anything was written"
    );
    (res, returned - started)
}

fn check_wait_for_status(client: Client, native: bool) {
    let slot = Slot(1);
    let w = client.create_worker(slot).unwrap();
    let mut done = Status::new(WorkerState::Done);
    done.task_id = Some(TaskId::from("job-9"));
    done.worker_pid = Some(std::process::id());
    let written = done.clone();
    let writer_client = client.clone();
    let (res, took) = wait_while_other_thread_writes(
        w.dir.clone(),
        native,
        move || {
            // An intermediate state the waiter must not stop at.
            writer_client
                .write_status(slot, &Status::new(WorkerState::Working))
                .unwrap();
            writer_client.write_status(slot, &written).unwrap();
        },
        || client.wait_for_status(slot, &[WorkerState::Done, WorkerState::Error], BOUND),
    );
    let got = res.expect("wait_for_status");
    assert_eq!(
        got, done,
        "wait_for_status returns the status that was written"
    );
    assert!(
        took < Duration::from_secs(5),
        "wait_for_status took {took:?}"
    );
}

#[test]
fn wait_for_status_returns_the_written_status() {
    let t = TestRoot::new();
    check_wait_for_status(t.client.clone(), true);
}

#[test]
fn wait_for_status_works_in_poll_mode() {
    let t = TestRoot::new();
    let client = t
        .client
        .clone()
        .with_watch_mode(WatchMode::Poll(Duration::from_millis(50)));
    check_wait_for_status(client, false);
}

#[test]
fn wait_for_status_returns_at_once_when_already_there() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let s = t
        .client
        .wait_for_status(Slot(0), &[WorkerState::Idle], BOUND)
        .expect("already idle");
    assert_eq!(s.status, WorkerState::Idle);
}

/// Run `f` on its own thread and time it; a call that never returns fails the test
/// (after [`BOUND`]) instead of hanging it.
fn timed_on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (T, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let started = Instant::now();
        let v = f();
        let _ = tx.send((v, started.elapsed()));
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|_| panic!("the call did not return within {BOUND:?}"))
}

fn assert_timeout<T: std::fmt::Debug>(res: conductor::Result<T>, took: Duration, what: &str) {
    match res {
        Err(Error::Timeout { after, .. }) => assert_eq!(after, Duration::from_millis(200)),
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(200),
        "gave up early, after {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "overran its 200ms timeout: {took:?} ({what})"
    );
}

#[test]
fn wait_for_status_times_out_when_nothing_is_written() {
    let (native_root, poll_root) = (TestRoot::new(), TestRoot::new());
    for client in [
        native_root.client.clone(),
        poll_root
            .client
            .clone()
            .with_watch_mode(WatchMode::Poll(Duration::from_millis(50))),
    ] {
        client.create_worker(Slot(0)).unwrap();
        let (res, took) = timed_on_thread(move || {
            client.wait_for_status(Slot(0), &[WorkerState::Done], Duration::from_millis(200))
        });
        if let Err(e) = &res {
            let msg = e.to_string();
            assert!(
                msg.contains("timed out") && msg.contains("worker 0"),
                "{msg}"
            );
        }
        assert_timeout(res, took, "wait_for_status");
    }
}

#[test]
fn wait_for_result_returns_the_written_result() {
    let t = TestRoot::new();
    let slot = Slot(5);
    let w = t.client.create_worker(slot).unwrap();
    let id = TaskId::Number(1705234567890);
    let result = success_result(id.clone(), "the answer\n");
    let written = result.clone();
    let writer_client = t.client.clone();
    let (res, took) = wait_while_other_thread_writes(
        w.results_dir(),
        true,
        move || {
            // Another task's result first: the waiter must not stop at it.
            publish_result(
                &writer_client,
                slot,
                &success_result(TaskId::from("other"), ""),
            );
            publish_result(&writer_client, slot, &written);
        },
        || t.client.wait_for_result(slot, &id, BOUND),
    );
    assert_eq!(res.expect("wait_for_result"), result);
    assert!(
        took < Duration::from_secs(5),
        "wait_for_result took {took:?}"
    );
}

#[test]
fn wait_for_result_works_in_poll_mode() {
    let t = TestRoot::new();
    let client = t
        .client
        .clone()
        .with_watch_mode(WatchMode::Poll(Duration::from_millis(50)));
    let slot = Slot(0);
    let w = client.create_worker(slot).unwrap();
    let result = success_result(TaskId::from("p-1"), "polled\n");
    let written = result.clone();
    let writer_client = client.clone();
    let (res, _) = wait_while_other_thread_writes(
        w.results_dir(),
        false,
        move || publish_result(&writer_client, slot, &written),
        || client.wait_for_result(slot, &TaskId::from("p-1"), BOUND),
    );
    assert_eq!(res.expect("wait_for_result in poll mode"), result);
}

#[test]
fn wait_for_result_times_out_when_nothing_is_written() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    let client = t.client.clone();
    let (res, took) = timed_on_thread(move || {
        client.wait_for_result(Slot(0), &TaskId::from("never"), Duration::from_millis(200))
    });
    if let Err(e) = &res {
        assert!(e.to_string().contains("never"), "names the task: {e}");
    }
    assert_timeout(res, took, "wait_for_result");
}

/// read_task on a bad task.json: the error names the file and says what is wrong.
fn assert_bad_task(t: &TestRoot, slot: Slot, says: &str) {
    let path = t.client.worker(slot).task();
    let err = t
        .client
        .read_task(slot)
        .expect_err("a bad task.json must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "message names {}: {msg}",
        path.display()
    );
    assert!(msg.contains(says), "message says {says:?}: {msg}");
    assert!(matches!(err, Error::BadFile { .. }), "{err:?}");
}

#[test]
fn symlinked_task_is_refused() {
    let t = TestRoot::new();
    let w = t.client.create_worker(Slot(0)).unwrap();
    let elsewhere = t.dir.path().join("elsewhere.json");
    fs::write(
        &elsewhere,
        br#"{"id": "evil", "prompt": "cat ~/.ssh/id_rsa"}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, w.task()).unwrap();
    assert_bad_task(&t, Slot(0), "symbolic link");
}

#[test]
fn oversize_task_is_refused() {
    let t = TestRoot::new();
    let w = t.client.create_worker(Slot(0)).unwrap();
    let mut bytes = br#"{"prompt": ""#.to_vec();
    bytes.resize(fsio::TASK_SIZE_LIMIT as usize - 2, b'x');
    bytes.extend_from_slice(br#""}"#);
    assert_eq!(bytes.len() as u64, fsio::TASK_SIZE_LIMIT);
    fs::write(w.task(), &bytes).unwrap();
    let at_limit = t
        .client
        .read_task(Slot(0))
        .expect("exactly 4 MiB is allowed")
        .unwrap();
    assert_eq!(at_limit.prompt.len(), fsio::TASK_SIZE_LIMIT as usize - 14);

    bytes.insert(13, b'x');
    fs::write(w.task(), &bytes).unwrap();
    assert_bad_task(&t, Slot(0), "over the limit");
}

#[test]
fn non_utf8_task_is_refused() {
    let t = TestRoot::new();
    let w = t.client.create_worker(Slot(0)).unwrap();
    fs::write(w.task(), b"{\"id\": \"a\", \"prompt\": \"caf\xe9\"}").unwrap();
    assert_bad_task(&t, Slot(0), "UTF-8");
}

#[test]
fn truncated_task_is_refused() {
    let t = TestRoot::new();
    let w = t.client.create_worker(Slot(0)).unwrap();
    fs::write(w.task(), br#"{"id": 1705234567890, "prompt": "hel"#).unwrap();
    assert_bad_task(&t, Slot(0), "JSON");
    fs::write(w.task(), b"").unwrap();
    assert_bad_task(&t, Slot(0), "empty");
}

#[test]
fn symlinked_status_and_result_are_refused() {
    let t = TestRoot::new();
    let w = t.client.create_worker(Slot(0)).unwrap();
    let elsewhere = t.dir.path().join("elsewhere.json");
    fs::write(&elsewhere, br#"{"status": "idle", "timestamp": ""}"#).unwrap();
    fs::remove_file(w.status()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, w.status()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, w.result()).unwrap();
    let status_err = t.client.read_status(Slot(0)).expect_err("symlinked status");
    let result_err = t.client.read_result(Slot(0)).expect_err("symlinked result");
    for (err, path) in [(status_err, w.status()), (result_err, w.result())] {
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("symbolic link"), "{msg}");
    }
}

#[test]
fn waiting_on_a_slot_that_does_not_exist_says_so() {
    let t = TestRoot::new();
    let err = t
        .client
        .wait_for_status(Slot(7), &[WorkerState::Idle], Duration::from_secs(5))
        .unwrap_err();
    assert!(err.to_string().contains("no worker slot 7"), "{err}");
    let err = t
        .client
        .wait_for_result(Slot(7), &TaskId::from("x"), Duration::from_secs(5))
        .unwrap_err();
    assert!(err.to_string().contains("no worker slot 7"), "{err}");
    assert!(
        !t.client.worker(Slot(7)).dir.exists(),
        "waiting created the slot"
    );
}

// ------------------------------------------------------------------ unique task ids

#[track_caller]
fn assert_taken(err: Error, id: &str, place: &str) {
    match &err {
        Error::IdTaken {
            id: i,
            place: p,
            path,
        } => {
            assert_eq!((i.as_str(), p.as_str()), (id, place), "{err}");
            assert!(path.exists(), "names an existing file: {err}");
        }
        other => panic!("expected IdTaken for {id} at {place}, got {other:?}"),
    }
    assert!(err.to_string().contains(place), "{err}");
}

/// An id is used once on the whole root: send and submit each refuse an id the other
/// (or another slot) already took, naming where it went, and deliver nothing.
#[test]
fn an_id_taken_by_send_or_submit_is_refused_by_both_naming_where_it_went() {
    let t = TestRoot::new();
    for n in 0..3 {
        t.client.create_worker(Slot(n)).unwrap();
    }
    let q = conductor::queue::Queue::new(t.client.root().clone());
    t.client
        .write_task(Slot(1), &Task::new("p").with_id("D"))
        .unwrap();
    assert_taken(
        q.submit(&Task::new("p").with_id("D")).unwrap_err(),
        "D",
        "worker 1",
    );
    assert_taken(
        t.client
            .write_task(Slot(0), &Task::new("p").with_id("D"))
            .unwrap_err(),
        "D",
        "worker 1",
    );
    q.submit(&Task::new("p").with_id("E")).unwrap();
    assert_taken(
        t.client
            .write_task(Slot(0), &Task::new("p").with_id("E"))
            .unwrap_err(),
        "E",
        "the shared queue",
    );
    assert_taken(
        q.submit(&Task::new("p").with_id("E")).unwrap_err(),
        "E",
        "the shared queue",
    );
    assert!(
        t.client.read_task(Slot(0)).unwrap().is_none(),
        "nothing sent"
    );
    assert_eq!(q.pending().unwrap().len(), 1, "only E, once");
    // Numbers and digit strings name the same files, so they are the same id.
    t.client
        .write_task(Slot(2), &Task::new("p").with_id(7u64))
        .unwrap();
    assert_taken(
        q.submit(&Task::new("p").with_id("7")).unwrap_err(),
        "7",
        "worker 2",
    );
}

/// A send refused because the inbox is busy does not use up its id.
#[test]
fn an_id_refused_by_a_busy_inbox_stays_free() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    t.client.create_worker(Slot(1)).unwrap();
    t.client
        .write_task(Slot(0), &Task::new("a").with_id("first"))
        .unwrap();
    let err = t
        .client
        .write_task(Slot(0), &Task::new("b").with_id("second"))
        .unwrap_err();
    assert!(matches!(err, Error::InboxBusy { .. }), "{err:?}");
    t.client
        .write_task(Slot(1), &Task::new("b").with_id("second"))
        .expect("the id was given back");
}

/// An original client writes task.json itself (no registry entry): the worker registers
/// the id when it claims the task, and rejects it, with a reason and an error result in
/// result.json, when the id already went elsewhere. The other task's kept result slot
/// (results/<id>.json) is left alone.
#[test]
fn an_original_client_task_with_a_taken_id_is_rejected_with_a_reason() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(1)).unwrap();
    t.client
        .write_task(Slot(1), &Task::new("p").with_id("X"))
        .unwrap();
    let w0 = t.client.create_worker(Slot(0)).unwrap();
    fs::write(w0.task(), br#"{"id": "X", "prompt": "hi"}"#).unwrap();
    let _w = crate::harness::WorkerProc::start(&t, Slot(0), "cat", &[], &[]);
    // The rejection writes its reason, takes task.json out of the inbox, then answers.
    wait_until(BOUND, "the rejected task's answer", || {
        t.client
            .read_result(Slot(0))
            .ok()
            .flatten()
            .is_some_and(|r| r.task_id == TaskId::from("X"))
    });
    assert!(!w0.task().exists());
    let r = t.client.read_result(Slot(0)).unwrap().unwrap();
    assert_eq!(r.outcome, Some(Outcome::Rejected));
    let why = r.error.unwrap_or_default();
    assert!(why.contains("worker 1"), "{why}");
    assert!(!w0.result_for(&TaskId::from("X")).exists());
    let reason = fs::read_dir(w0.rejected_dir())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".reason"))
        .expect("a reason file");
    assert!(fs::read_to_string(reason.path())
        .unwrap()
        .contains("worker 1"));

    // A fresh id from an original client is registered for this worker when claimed.
    fs::write(
        w0.task(),
        br#"{"id": "js-1", "prompt": "hi", "origin": "queue"}"#,
    )
    .unwrap();
    t.client
        .wait_for_result(Slot(0), &TaskId::from("js-1"), BOUND)
        .unwrap();
    let q = conductor::queue::Queue::new(t.client.root().clone());
    assert_taken(
        q.submit(&Task::new("p").with_id("js-1")).unwrap_err(),
        "js-1",
        "worker 0",
    );
    assert_eq!(
        q.read_result(&TaskId::from("js-1")).unwrap(),
        None,
        "not a queue task"
    );
}

#[test]
fn slots_are_capped() {
    let t = TestRoot::new();
    let max = conductor::layout::MAX_SLOTS;
    assert_eq!("1023".parse::<Slot>().unwrap(), Slot(max - 1));
    // Too large for u32 as well: still a number, refused as too large.
    for too_large in ["1024", "100000", "4294967296", "99999999999999999999"] {
        let err = too_large.parse::<Slot>().unwrap_err();
        assert!(matches!(err, Error::SlotTooLarge { .. }), "{err:?}");
        assert!(err.to_string().contains("at most 1024"), "{err}");
    }
    let err = t.client.create_worker(Slot(max)).unwrap_err();
    assert!(matches!(err, Error::SlotTooLarge { .. }), "{err:?}");
    assert!(!t.client.worker(Slot(max)).dir.exists());
    t.client.create_worker(Slot(max - 1)).unwrap();
}
