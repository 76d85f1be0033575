//! Faults from the crash storm and the bad-input run: a full disk, a chaos of SIGKILLs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use conductor::{Client, Root, Slot, Task, TaskId};

use crate::harness::{wait_until, TestRoot, WorkerProc};
use crate::prereq::require;

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);

/// A root on a small tmpfs mounted for the test (needs root; the reason where it can't
/// be mounted, see `require!`). Unmounted on drop.
pub(crate) struct SmallDisk {
    mnt: PathBuf,
}

impl SmallDisk {
    pub(crate) fn mount(t_dir: &Path, size: &str) -> Result<SmallDisk, String> {
        crate::prereq::root("mounting a small tmpfs")?;
        let mnt = t_dir.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&mnt)
            .output();
        match out {
            Ok(o) if o.status.success() => Ok(SmallDisk { mnt }),
            Ok(o) => Err(format!(
                "cannot mount a tmpfs here: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("cannot run mount: {e}")),
        }
    }

    fn free(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(&self.mnt).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    }

    /// Fill the disk until only about `leave` bytes are free.
    pub(crate) fn fill_leaving(&self, leave: u64) -> PathBuf {
        let filler = self.mnt.join("filler");
        let size = self.free().saturating_sub(leave);
        fs::write(&filler, vec![b'x'; size as usize]).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .status();
    }
}

/// A test root on the small disk.
pub(crate) fn root_on(disk: &SmallDisk, dir: tempfile::TempDir) -> TestRoot {
    let client = Client::new(Root::new(disk.mnt.join("root")));
    client.init_queue().expect("init root on the small disk");
    TestRoot { dir, client }
}

/// `big` prints 5 MiB of `a`; anything else is echoed back.
const SIZED_AGENT: &str = r#"sh -c 'p=$(cat); if [ "$p" = big ]; then head -c 5242880 /dev/zero | tr "\0" a; else printf %s "$p"; fi'"#;

/// Waits until the file its prompt names exists, then prints its 100 KiB of `a`: a task
/// that holds no space until the disk has been filled by something else.
const HOLD_AGENT: &str = r#"sh -c 'p=$(cat); while [ ! -e "$p" ]; do sleep 0.02; done; head -c 102400 /dev/zero | tr "\0" a'"#;

/// Run a held task on `t` until it runs, fill the disk to the last byte, and let the
/// task end: its result finds no space (and its small log none to give back).
fn finish_on_a_full_disk(t: &TestRoot, disk: &SmallDisk, id: &str) -> PathBuf {
    let hold = t.dir.path().join(format!("{id}.go"));
    t.client
        .write_task(S0, &Task::new(hold.display().to_string()).with_id(id))
        .unwrap();
    wait_until(BOUND, "the held task to run", || {
        t.client
            .read_status(S0)
            .ok()
            .flatten()
            .is_some_and(|st| st.status == conductor::WorkerState::Working)
    });
    let filler = disk.fill_leaving(0);
    fs::write(&hold, b"").unwrap();
    filler
}

pub(crate) fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("conductor-test-")
        .tempdir()
        .unwrap()
}

#[test]
fn a_full_disk_keeps_the_finished_result_until_space_returns() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "2m"));
    let t = root_on(&disk, dir);
    let w = WorkerProc::start(&t, S0, HOLD_AGENT, &[], &[]);
    let filler = finish_on_a_full_disk(&t, &disk, "d6");
    wait_until(
        BOUND,
        "the worker to hold the result for want of space",
        || w.stderr().contains("retried until space is freed"),
    );
    let status = t.client.read_status(S0).ok().flatten();
    fs::remove_file(&filler).unwrap();

    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("d6"), BOUND)
        .unwrap_or_else(|e| panic!("no result for d6 ({e}); worker log:\n{}", w.stderr()));
    assert!(r.success, "the agent's exit 0 survives: {r:?}");
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.starts_with("aaaa") && r.output.ends_with("aaaa"));
    // The worker lived through it and serves the next task.
    let go = t.dir.path().join("after.go");
    fs::write(&go, b"").unwrap();
    t.client
        .write_task(S0, &Task::new(go.display().to_string()).with_id("after"))
        .unwrap();
    let next = t
        .client
        .wait_for_result(S0, &TaskId::from("after"), BOUND)
        .unwrap();
    assert!(next.success, "{next:?}");
    if let Some(st) = status {
        // Best effort while full: when the status could be written it says why.
        if let Some(p) = st.problem {
            assert!(p.contains("disk full"), "{p}");
        }
    }
}

#[test]
fn pickup_pauses_while_the_disk_is_full() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "2m"));
    let t = root_on(&disk, dir);
    let w = WorkerProc::start(&t, S0, SIZED_AGENT, &[], &[]);
    let filler = disk.fill_leaving(96 * 1024);
    t.client
        .write_task(S0, &Task::new("small").with_id("p1"))
        .unwrap();
    wait_until(BOUND, "the worker to pause pickup and say why", || {
        w.stderr().contains("pickup paused")
            && t.client
                .read_status(S0)
                .ok()
                .flatten()
                .is_some_and(|s| s.problem.is_some())
    });
    let paths = t.client.worker(S0);
    assert!(paths.task().exists(), "the task waits in the inbox");
    assert!(!paths.running().exists(), "nothing was accepted");
    let st = t.client.read_status(S0).unwrap().unwrap();
    assert!(
        st.problem
            .as_deref()
            .is_some_and(|p| p.contains("disk full")),
        "status says why: {st:?}"
    );
    let shown = std::process::Command::new(crate::harness::bin("conductor"))
        .arg("status")
        .env("CONDUCTOR_HOME", t.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("disk full"),
        "conductor status says why:\n{shown}"
    );

    fs::remove_file(&filler).unwrap();
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("p1"), BOUND)
        .unwrap();
    assert_eq!(r.output, "small");
    wait_until(BOUND, "the problem to clear from status", || {
        t.client
            .read_status(S0)
            .ok()
            .flatten()
            .is_some_and(|s| s.problem.is_none())
    });
}

/// Put `bytes` in slot 0's inbox at once (as a client's rename would), with `mode`.
fn plant_task(t: &TestRoot, bytes: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let paths = t.client.worker(S0);
    let tmp = paths.dir.join(".planted.tmp");
    fs::write(&tmp, bytes).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&tmp, paths.task()).unwrap();
}

fn rejected_result(t: &TestRoot, w: &WorkerProc, id: &str) -> conductor::TaskResult {
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from(id), BOUND)
        .unwrap_or_else(|e| {
            panic!(
                "no result for the refused task {id}: {e}; worker log:\n{}",
                w.stderr()
            )
        });
    assert!(!r.success);
    assert_eq!(r.outcome, Some(conductor::Outcome::Rejected), "{r:?}");
    r
}

#[test]
fn a_refused_input_with_a_readable_id_is_answered() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let huge = format!(
        r#"{{"id":"big1","prompt":"{}"}}"#,
        "a".repeat(5 * 1024 * 1024)
    );
    let cases: [(&str, Vec<u8>); 4] = [
        ("big1", huge.into_bytes()),
        (
            "bom1",
            b"\xEF\xBB\xBF{\"id\":\"bom1\",\"prompt\":\"x\"}".to_vec(),
        ),
        ("syntax1", br#"{"id":"syntax1","prompt":"x",,}"#.to_vec()),
        // A non-atomic write that stalls for good after its first bytes.
        ("stall1", br#"{"id":"stall1","prompt":"half a pro"#.to_vec()),
    ];
    for (id, bytes) in cases {
        plant_task(&t, &bytes, 0o600);
        let r = rejected_result(&t, &w, id);
        assert!(
            r.error
                .as_deref()
                .is_some_and(|e| e.starts_with("rejected: ")),
            "{r:?}"
        );
        // The status follows the result (the result is durable first).
        wait_until(BOUND, "the status to name the refused task", || {
            t.client.read_status(S0).ok().flatten().is_some_and(|st| {
                st.task_id == Some(TaskId::from(id)) && st.status == conductor::WorkerState::Error
            })
        });
    }
}

#[test]
fn files_kept_from_clients_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    plant_task(&t, br#"{"id":"open1","prompt":"hi"}"#, 0o644);
    t.client
        .wait_for_result(S0, &TaskId::from("open1"), BOUND)
        .unwrap();
    plant_task(&t, br#"{"id":"open2","prompt":7}"#, 0o644);
    rejected_result(&t, &w, "open2");
    let paths = t.client.worker(S0);
    let mut kept = vec![paths.task_record(&TaskId::from("open1"))];
    kept.extend(
        fs::read_dir(paths.rejected_dir())
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    for f in kept {
        let mode = fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", f.display());
    }
}

/// A small xorshift generator: the chaos is reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("chaos seed {seed} (set CHAOS_SEED to replay)");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Lock directories still present under the root (a finished, stopped root has none).
fn locks_left(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("keys"), root.join("slots")];
    for w in fs::read_dir(root.join("workers")).unwrap().flatten() {
        dirs.push(w.path());
    }
    let mut left = Vec::new();
    for d in dirs {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            // A tombstone (`<lock>.tomb.<nonce>`) is a released lock a SIGKILL caught
            // between renaming it aside and removing it: it holds nothing, and the next
            // worker start sweeps it.
            if name.contains(".lock") && !name.contains(".tomb.") && e.path().is_dir() {
                left.push(e.path());
            }
        }
    }
    left
}

#[test]
fn chaos_of_sigkills_loses_nothing_and_runs_nothing_twice() {
    const TASKS: usize = 100;
    const WORKERS: u32 = 3;
    let t = TestRoot::new();
    // Two agents at most: a killed worker's leftovers count until they are gone.
    fs::write(t.path().join("config.json"), r#"{"maxRunning": 2}"#).unwrap();
    let mut rng = Rng::seeded();
    let log = t.dir.path().join("runs.log");
    // Logs `overlap` when a key's task starts beside another's work, `overcap` past
    // maxRunning, from the agents' own view of what runs (tests/agents/leftover.sh).
    let agent = crate::harness::agent("leftover.sh").display().to_string();
    let env = [("AGENT_LOG", log.to_str().unwrap()), ("MAX_RUNNING", "2")];
    let mut workers: Vec<WorkerProc> = (0..WORKERS)
        .map(|i| WorkerProc::start(&t, Slot(i), &agent, &[], &env))
        .collect();
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let nap = ["0", "0.01", "0.03", "0.05"][rng.below(4) as usize];
        let mut task = Task::new(format!("k{} {nap}", i % 3)).with_id(format!("c{i}").as_str());
        task.key = Some(format!("k{}", i % 3));
        ids.push(queue.submit(&task).unwrap());
    }
    let results_dir = t.path().join("queue/results");
    let finished = || fs::read_dir(&results_dir).map(|d| d.count()).unwrap_or(0);
    let mut kills = 0;
    let mut target = 2;
    while target < TASKS {
        wait_until(Duration::from_secs(60), "progress between kills", || {
            finished() >= target
        });
        let victim = rng.below(WORKERS as u64) as usize;
        // Sometimes again at once: mid-recovery, mid-claim, mid-spawn.
        for _ in 0..1 + (rng.below(4) == 0) as usize {
            workers[victim].crash();
            kills += 1;
            workers[victim] = WorkerProc::start(&t, Slot(victim as u32), &agent, &[], &env);
        }
        target = finished() + 1 + rng.below(2) as usize;
    }
    wait_until(Duration::from_secs(60), "every task to end", || {
        finished() == TASKS
    });
    eprintln!("{kills} workers SIGKILLed and restarted");
    drop(workers);
    crate::harness::assert_nothing_left(t.path());

    let runs = fs::read_to_string(&log).unwrap_or_default();
    let mut interrupted = 0;
    for id in &ids {
        let r = queue
            .read_result(id)
            .unwrap()
            .unwrap_or_else(|| panic!("task {id} has no result"));
        let started = runs
            .lines()
            .filter(|l| l.split(' ').nth(1) == Some(&id.to_string()))
            .filter(|l| l.starts_with("start "))
            .count();
        assert!(started <= 1, "task {id} ran {started} times");
        if r.success {
            assert_eq!(r.output.trim(), format!("done {id}"));
            assert_eq!(started, 1, "a success ran once");
        } else {
            assert_eq!(r.outcome, Some(conductor::Outcome::Interrupted), "{r:?}");
            interrupted += 1;
        }
    }
    eprintln!("{interrupted} of {TASKS} tasks ended interrupted");
    let overlaps: Vec<&str> = runs.lines().filter(|l| l.starts_with("overlap ")).collect();
    assert!(
        overlaps.is_empty(),
        "one key ran twice at once: {overlaps:?}"
    );
    let over_cap: Vec<&str> = runs.lines().filter(|l| l.starts_with("overcap ")).collect();
    assert!(
        over_cap.is_empty(),
        "more than maxRunning agents ran: {over_cap:?}"
    );
    assert!(
        locks_left(t.path()).is_empty(),
        "locks left: {:?}",
        locks_left(t.path())
    );
    let pending = fs::read_dir(t.path().join("queue/pending"))
        .unwrap()
        .count();
    assert_eq!(pending, 0, "nothing left pending");
    for i in 0..WORKERS {
        assert!(
            !t.client.worker(Slot(i)).running().exists(),
            "slot {i} holds no task"
        );
    }
}

#[test]
fn a_slow_non_atomic_write_into_the_queue_is_waited_for_not_rejected() {
    use std::io::Write;
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let id = TaskId::from("slowq");
    let task = Task::new("written slowly").with_id("slowq");
    let name = conductor::queue::PendingName::for_task(&task, &id, std::time::SystemTime::now())
        .file_name();
    let path = t.client.root().queue_pending().join(name);
    let bytes = br#"{"id":"slowq","prompt":"written slowly"}"#;
    let mut f = fs::File::create(&path).unwrap();
    f.write_all(&bytes[..12]).unwrap();
    // The slow writer under test: the rest arrives a moment later.
    std::thread::sleep(Duration::from_millis(150));
    f.write_all(&bytes[12..]).unwrap();
    drop(f);
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let r = queue
        .wait_for_result(&id, BOUND)
        .unwrap_or_else(|e| panic!("no result ({e}); worker log:\n{}", w.stderr()));
    assert!(r.success, "the whole task ran: {r:?}");
    assert_eq!(r.output, "written slowly");
}

#[test]
fn init_refuses_more_slots_than_a_root_holds_before_making_any() {
    let t = temp_dir();
    let root = t.path().join("big-root");
    let out = std::process::Command::new(crate::harness::bin("conductor"))
        .args(["init", "100000", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad input exits 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at most 1024 slots"), "{err}");
    assert!(!root.exists(), "nothing was made");
}

#[test]
fn retry_picks_an_id_free_on_the_whole_root() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    t.client
        .write_task(S0, &Task::new("first").with_id("rt"))
        .unwrap();
    t.client
        .wait_for_result(S0, &TaskId::from("rt"), BOUND)
        .unwrap();
    // rt-r1 is taken elsewhere on the root: it waits in slot 1's inbox.
    t.client.create_worker(Slot(1)).unwrap();
    t.client
        .write_task(Slot(1), &Task::new("other").with_id("rt-r1"))
        .unwrap();
    let out = std::process::Command::new(crate::harness::bin("conductor"))
        .args(["retry", "0", "rt", "--wait"])
        .env("CONDUCTOR_HOME", t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "retry: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = t
        .client
        .read_result_for(S0, &TaskId::from("rt-r2"))
        .unwrap()
        .expect("the retry ran as rt-r2");
    assert_eq!(r.output, "first");
}

#[test]
fn a_worker_on_a_relative_root_runs_its_tasks() {
    let t = TestRoot::new();
    let project = t.dir.path().join("project");
    fs::create_dir_all(&project).unwrap();
    // The worker is given the root relative to its own directory; agents run elsewhere.
    let worker = crate::harness::Reaped(
        std::process::Command::new(crate::harness::bin("conductor-worker"))
            .current_dir(t.dir.path())
            .args(["0", "project", "--root", "root", "--agent", "cat"])
            .env_remove("CONDUCTOR_HOME")
            .env_remove("CONDUCTOR_WORKER")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    t.client.create_worker(S0).unwrap();
    t.client
        .write_task(S0, &Task::new("relative").with_id("rel1"))
        .unwrap();
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("rel1"), BOUND)
        .unwrap();
    drop(worker);
    assert!(r.success, "{r:?}");
    assert_eq!(r.output, "relative");
}

#[test]
fn a_stop_request_while_a_result_waits_for_space_stops_the_worker() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "2m"));
    let t = root_on(&disk, dir);
    let mut w = WorkerProc::start(&t, S0, HOLD_AGENT, &[], &[]);
    let filler = finish_on_a_full_disk(&t, &disk, "st1");
    wait_until(BOUND, "the result to wait for space", || {
        w.stderr().contains("retried until space is freed")
    });
    w.signal(nix::sys::signal::Signal::SIGTERM);
    let status = w.wait_exit(BOUND);
    assert!(
        status.success(),
        "a stop request ends the worker cleanly: {status}"
    );
    // The task stayed in hand; a worker started once there is space ends it.
    fs::remove_file(&filler).unwrap();
    let _w = WorkerProc::start(&t, S0, HOLD_AGENT, &[], &[]);
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("st1"), BOUND)
        .unwrap();
    assert_eq!(r.outcome, Some(conductor::Outcome::Interrupted), "{r:?}");
}

#[test]
fn a_task_left_in_hand_is_finished_before_the_next_claim() {
    let t = TestRoot::new();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    // What a claim cut short by a full disk (or a failed recovery) leaves behind.
    let paths = t.client.worker(S0);
    fs::write(paths.running(), br#"{"id": "left", "prompt": "x"}"#).unwrap();
    t.client
        .write_task(S0, &Task::new("next").with_id("next"))
        .unwrap();
    let next = t
        .client
        .wait_for_result(S0, &TaskId::from("next"), BOUND)
        .unwrap();
    assert_eq!(next.output, "next");
    let left = t
        .client
        .wait_for_result(S0, &TaskId::from("left"), BOUND)
        .unwrap();
    assert_eq!(
        left.outcome,
        Some(conductor::Outcome::Interrupted),
        "{left:?}"
    );
}

#[test]
fn a_rejection_cut_short_by_a_crash_is_finished_not_run() {
    let t = TestRoot::new();
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    // Q9 belongs to the queue and has its answer already.
    queue
        .submit(&Task::new("the real one").with_id("Q9"))
        .unwrap();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let real = queue.wait_for_result(&TaskId::from("Q9"), BOUND).unwrap();
    drop(w);
    let paths = t.client.worker(S0);
    // A worker died while rejecting an inbox impostor of Q9, and another one of r1.
    for (id, prompt) in [("Q9", "impostor"), ("r1", "refused")] {
        fs::write(
            paths.rejecting(),
            format!(r#"{{"id": "{id}", "prompt": "{prompt}"}}"#),
        )
        .unwrap();
        let w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        wait_until(BOUND, "the rejection to be finished", || {
            !paths.rejecting().exists()
        });
        drop(w);
    }
    let kept = queue.read_result(&TaskId::from("Q9")).unwrap().unwrap();
    assert_eq!(kept.output, real.output, "the queue's answer is untouched");
    let r1 = t
        .client
        .read_result_for(S0, &TaskId::from("r1"))
        .unwrap()
        .expect("r1 is answered");
    assert_eq!(r1.outcome, Some(conductor::Outcome::Rejected));
    let filed = fs::read_dir(paths.rejected_dir()).unwrap().count();
    assert_eq!(filed, 4, "both files and their reasons are in rejected/");
}

/// Processes whose command line holds `needle` (the test's own agents' work).
fn processes_named(needle: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(needle)
            })
        })
        .collect()
}

/// Issue 22, item 1: a worker SIGKILLed mid-task (and not restarted) leaves its agent's
/// child running; the key lock it held must stay taken until that child is gone, or a
/// neighbour runs the key's next task beside it. Likewise its run slot under
/// `maxRunning`.
#[test]
fn a_killed_workers_leftover_keeps_its_key_and_run_slot_until_it_is_gone() {
    let t = TestRoot::new();
    fs::write(t.path().join("config.json"), r#"{"maxRunning": 1}"#).unwrap();
    let log = t.dir.path().join("runs.log");
    let agent = crate::harness::agent("leftover.sh").display().to_string();
    let env = [("AGENT_LOG", log.to_str().unwrap())];
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let submit = |id: &str, prompt: &str, key: &str| {
        let mut task = Task::new(prompt).with_id(id);
        task.key = Some(key.into());
        queue.submit(&task).unwrap()
    };
    let mut first = WorkerProc::start(&t, S0, &agent, &[], &env);
    submit("a1", "k1 60", "k1");
    let runs = || fs::read_to_string(&log).unwrap_or_default();
    let work = format!("leftover-work {} k1 ", log.display());
    wait_until(BOUND, "a1 to start", || runs().contains("start a1 k1"));
    wait_until(BOUND, "a1's work to run", || {
        !processes_named(&work).is_empty()
    });
    first.crash();
    // The fault's premise: the agent's child outlives its worker.
    assert!(
        !processes_named(&work).is_empty(),
        "a1's work died with its worker"
    );

    // Same key (and the one run slot): must not start while a1's work runs.
    let second = WorkerProc::start(&t, Slot(1), &agent, &[], &env);
    let b1 = submit("b1", "k1 0", "k1");
    let result = queue
        .wait_for_result(&b1, Duration::from_secs(60))
        .expect("b1 ends once a1's leftovers are gone");
    assert!(result.success, "{result:?}");
    let runs = runs();
    assert!(
        !runs.contains("overlap"),
        "a task of key k1 started while a1's work still ran:\n{runs}"
    );
    let a1 = queue.read_result(&TaskId::from("a1")).unwrap();
    assert_eq!(
        a1.map(|r| r.outcome),
        Some(Some(conductor::Outcome::Interrupted)),
        "a1 is answered interrupted by recovery"
    );
    assert!(processes_named(&work).is_empty());
    drop(second);
    crate::harness::assert_nothing_left(t.path());
}

/// The names in `dir` set aside as damaged.
fn set_aside_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(".damaged-"))
        .collect()
}

/// Issue 22, item 2: a 0-byte registry entry (entries are not fsynced), a 0-byte queue
/// result or kept result is logged, set aside and rebuilt where it can be; never fatal to
/// a worker or a listing, never announced as a result; `doctor` names it.
#[test]
fn damaged_index_entries_and_results_are_set_aside_never_fatal() {
    use crate::harness::run_conductor;
    let t = TestRoot::new();
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let t1 = t
        .client
        .write_task(S0, &Task::new("hello").with_id("t1"))
        .unwrap();
    t.client.wait_for_result(S0, &t1, BOUND).unwrap();
    let q1 = queue.submit(&Task::new("queued").with_id("q1")).unwrap();
    queue.wait_for_result(&q1, BOUND).unwrap();
    w.crash();

    // What a power loss can leave of an entry linked in without fsync.
    let entry = t.path().join("ids/t1");
    fs::write(&entry, b"").unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let listed = run_conductor(&t, &["tasks"], 0);
    assert!(listed.stdout.contains("t1"), "{}", listed.stdout);
    let result = run_conductor(&t, &["result", "t1"], 0);
    assert!(result.stdout.contains("hello"), "{}", result.stdout);
    let rebuilt: serde_json::Value = serde_json::from_slice(&fs::read(&entry).unwrap()).unwrap();
    assert_eq!(rebuilt["place"], "workers/0", "rebuilt from where t1 is");
    assert_eq!(set_aside_in(&t.path().join("ids")).len(), 1);

    // A damaged queue result: the task shows as damaged, the listing goes on.
    fs::write(t.path().join("queue/results/q1.json"), b"").unwrap();
    let listed = run_conductor(&t, &["tasks"], 0);
    let q1_line = listed
        .stdout
        .lines()
        .find(|l| l.contains("q1"))
        .unwrap_or_else(|| panic!("q1 is listed:\n{}", listed.stdout));
    assert!(q1_line.contains("damaged"), "{q1_line}");
    assert!(listed.stdout.contains("t1"), "{}", listed.stdout);
    let doctor = run_conductor(&t, &["doctor"], 1);
    assert!(
        doctor.stdout.contains("queue/results/q1.json: is empty"),
        "{}",
        doctor.stdout
    );
}

/// Issue 22, item 2: a dead worker's kept result that is empty is not its task's result:
/// recovery sets it aside and answers the task interrupted.
#[test]
fn recovery_does_not_announce_an_empty_kept_result() {
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    fs::write(paths.running(), br#"{"id": "left", "prompt": "x"}"#).unwrap();
    fs::write(paths.result_for(&TaskId::from("left")), b"").unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let left = t
        .client
        .wait_for_result(S0, &TaskId::from("left"), BOUND)
        .unwrap();
    assert_eq!(
        left.outcome,
        Some(conductor::Outcome::Interrupted),
        "{left:?}"
    );
    assert_eq!(set_aside_in(&paths.results_dir()).len(), 1);
}

/// Issue 22, item 5: under a process limit the agent's clone fails with EAGAIN; that
/// passes, so the task waits and starts once it can instead of failing in 0 ms. (Root is
/// not held to `ulimit -u`, so the worker is told to meet EAGAIN on its first spawns.)
#[test]
fn a_task_whose_agent_cannot_start_for_a_moment_waits_and_runs() {
    let t = TestRoot::new();
    let w = WorkerProc::start(&t, S0, "cat", &[], &[("CONDUCTOR_DEBUG_SPAWN_EAGAIN", "4")]);
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let ids: Vec<TaskId> = (0..3)
        .map(|i| queue.submit(&Task::new(format!("task {i}"))).unwrap())
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let r = queue.wait_for_result(id, BOUND).unwrap();
        assert!(r.success, "{r:?}\n{}", w.stderr());
        assert_eq!(r.output, format!("task {i}"));
    }
    assert!(
        w.stderr().contains("waits to start"),
        "the waits are logged:\n{}",
        w.stderr()
    );
}

/// Issue 22, item 4: a task whose own log fills the disk must not hold its exit-0
/// result in memory forever: the worker cuts that log to make room and publishes.
#[test]
fn a_task_whose_log_fills_the_disk_still_publishes_its_result() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "3m"));
    let t = root_on(&disk, dir);
    let w = WorkerProc::start(&t, S0, SIZED_AGENT, &[], &[]);
    // Nothing else takes space: only the task's own 5 MiB of output fills the disk.
    t.client
        .write_task(S0, &Task::new("big").with_id("flood"))
        .unwrap();
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("flood"), BOUND)
        .unwrap_or_else(|e| panic!("no result for flood ({e}); worker log:\n{}", w.stderr()));
    assert!(r.success, "the agent's exit 0 survives: {r:?}");
    let note = r.output_note.clone().unwrap_or_default();
    assert!(
        note.contains("disk was full"),
        "the cut log says so: {note:?}"
    );
    t.client
        .write_task(S0, &Task::new("small").with_id("after"))
        .unwrap();
    let next = t
        .client
        .wait_for_result(S0, &TaskId::from("after"), BOUND)
        .unwrap();
    assert_eq!(next.output, "small");
}

/// Issue 22, item 4: a worker started on a full disk does not exit (a supervisor would
/// loop restarting it): it starts, pauses pickup, says why, and serves once space returns.
#[test]
fn a_worker_started_on_a_full_disk_waits_for_space() {
    let dir = temp_dir();
    let disk = require!(SmallDisk::mount(dir.path(), "2m"));
    let t = root_on(&disk, dir);
    t.client.create_worker(S0).unwrap();
    let filler = disk.fill_leaving(0);
    let mut w = WorkerProc::spawn(&t, S0, SIZED_AGENT, &[], &[]);
    wait_until(BOUND, "the worker to say the disk is full", || {
        w.stderr().contains("disk full")
    });
    let still = w
        .child
        .as_mut()
        .is_some_and(|c| c.try_wait().expect("try_wait").is_none());
    assert!(still, "it kept running:\n{}", w.stderr());
    fs::remove_file(&filler).unwrap();
    t.client
        .write_task(S0, &Task::new("hello").with_id("later"))
        .unwrap();
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("later"), BOUND)
        .unwrap_or_else(|e| panic!("no result ({e}); worker log:\n{}", w.stderr()));
    assert_eq!(r.output, "hello");
}

/// Issue 22, item 7: a `status.json` replaced by a link is replaced by name, never
/// written through: the worker starts, again and again, and the link's target is
/// untouched.
#[test]
fn a_planted_status_link_is_replaced_not_followed() {
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    let outside = t.dir.path().join("outside.json");
    fs::write(&outside, b"{}").unwrap();
    fs::remove_file(paths.status()).unwrap();
    std::os::unix::fs::symlink(&outside, paths.status()).unwrap();
    for round in 0..2 {
        let mut w = WorkerProc::start(&t, S0, "cat", &[], &[]);
        let id = t
            .client
            .write_task(S0, &Task::new("hi").with_id(format!("r{round}").as_str()))
            .unwrap();
        let r = t.client.wait_for_result(S0, &id, BOUND).unwrap();
        assert_eq!(r.output, "hi");
        w.signal(nix::sys::signal::Signal::SIGTERM);
        assert!(w.wait_exit(BOUND).success(), "{}", w.stderr());
    }
    assert_eq!(
        fs::read(&outside).unwrap(),
        b"{}",
        "written through the link"
    );
}

/// Issue 22, item 7: an inbox file that is a hard link of a file outside the root is
/// kept as a private copy; the outside file's mode and bytes are left as they were.
#[test]
fn a_hard_linked_inbox_file_is_copied_not_chmoded() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestRoot::new();
    let paths = t.client.create_worker(S0).unwrap();
    let outside = t.dir.path().join("task.json");
    let body = br#"{"id": "linked", "prompt": "from outside"}"#;
    fs::write(&outside, body).unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o644)).unwrap();
    fs::hard_link(&outside, paths.task()).unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let r = t
        .client
        .wait_for_result(S0, &TaskId::from("linked"), BOUND)
        .unwrap();
    assert_eq!(r.output, "from outside");
    let mode = fs::metadata(&outside).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the outside file's mode was changed");
    assert_eq!(fs::read(&outside).unwrap(), body);
}

/// Issue 22, item 7: a queue entry over `maxTaskBytes` whose id can be read from its head
/// is answered `rejected`, as an inbox answers one; its sender does not wait forever.
#[test]
fn an_oversized_queue_entry_with_a_readable_id_is_answered() {
    let t = TestRoot::new();
    fs::write(t.path().join("config.json"), r#"{"maxTaskBytes": 2048}"#).unwrap();
    let big = serde_json::json!({"id": "big1", "prompt": "x".repeat(5000)});
    fs::write(
        t.path().join("queue/pending/big.json"),
        serde_json::to_vec(&big).unwrap(),
    )
    .unwrap();
    let _w = WorkerProc::start(&t, S0, "cat", &[], &[]);
    let queue = conductor::queue::Queue::new(t.client.root().clone());
    let r = queue
        .wait_for_result(&TaskId::from("big1"), BOUND)
        .expect("the oversized entry is answered");
    assert_eq!(r.outcome, Some(conductor::Outcome::Rejected), "{r:?}");
    let why = r.error.unwrap_or_default();
    assert!(why.contains("over the limit of 2048 bytes"), "{why}");
}
