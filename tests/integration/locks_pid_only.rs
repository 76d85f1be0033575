//! Issue 38 item 7: a pid-only lock (no `owner.json`: an original conductor client's or
//! an older version's) naming a live pid that started before the lock. Only conductor
//! programs write such locks, so a process that runs none (init, a `sleep`) is not its
//! holder: the lock is stale and a worker recovers its slot. A process that may be a
//! holder (its command line names a conductor) keeps it, and the refusal names the
//! process, its start against the lock's, and the command that removes the lock.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

use crate::harness::{wait_until, TestRoot, WorkerProc};

/// Long enough for a loaded machine; each wait ends as soon as its condition holds.
const BOUND: Duration = Duration::from_secs(30);

/// A process started (and running `argv0`) before any lock names it; killed on drop.
struct Bystander(Child);

impl Bystander {
    fn start(argv0: &str) -> Bystander {
        let child = Command::new("bash")
            .args(["-c", &format!("exec -a {argv0} sleep 600")])
            .spawn()
            .expect("start sleep");
        let pid = child.id();
        wait_until(BOUND, "the bystander to exec", || {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(argv0.as_bytes()))
        });
        Bystander(child)
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A root whose locks are past their grace a second after they are made, and slot 0's
/// `.lock` holding only `pid`, made now (after `pid` started) and past that grace.
fn pid_only_slot_lock(pid: u32) -> (TestRoot, std::path::PathBuf) {
    let t = TestRoot::new();
    std::fs::write(t.path().join("config.json"), "{\"lockGraceSecs\": 1}\n").unwrap();
    let paths = t.client.create_worker(conductor::Slot(0)).unwrap();
    let lock = paths.lock_dir();
    std::fs::create_dir_all(&lock).unwrap();
    std::fs::write(lock.join("pid"), format!("{pid}\n")).unwrap();
    wait_until(BOUND, "the lock to be past its grace", || {
        older_than(&lock, 2)
    });
    (t, lock)
}

fn older_than(path: &Path, secs: u64) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| {
            SystemTime::now()
                .duration_since(t)
                .unwrap_or_default()
                .as_secs()
                >= secs
        })
}

fn worker_serves(t: &TestRoot) {
    let _w = WorkerProc::start(t, conductor::Slot(0), "cat", &[], &[]);
    let task = conductor::Task::new("go").with_id("p1");
    let id = t.client.write_task(conductor::Slot(0), &task).unwrap();
    let r = t
        .client
        .wait_for_result(conductor::Slot(0), &id, BOUND)
        .unwrap();
    assert_eq!(r.output, "go");
}

#[test]
fn a_pid_only_lock_naming_a_live_process_that_is_no_conductor_is_recovered() {
    let sleeper = Bystander::start("sleep");
    let (t, lock) = pid_only_slot_lock(sleeper.0.id());
    worker_serves(&t);
    assert!(
        std::fs::read_to_string(lock.join("pid"))
            .map_or(true, |p| p.trim() != sleeper.0.id().to_string()),
        "the reused pid's lock was taken over"
    );
}

#[test]
fn a_pid_only_lock_naming_pid_1_is_recovered_unless_init_is_a_conductor() {
    let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    if String::from_utf8_lossy(&init)
        .to_ascii_lowercase()
        .contains("conductor")
    {
        eprintln!("skipped: pid 1 here is a conductor program, which may hold the lock");
        return;
    }
    let (t, _lock) = pid_only_slot_lock(1);
    worker_serves(&t);
}

#[test]
fn a_pid_only_lock_of_a_live_conductor_program_is_kept_and_the_refusal_names_it() {
    let holder = Bystander::start("conductor-worker");
    let (t, lock) = pid_only_slot_lock(holder.0.id());
    let mut w = WorkerProc::spawn(&t, conductor::Slot(0), "cat", &[], &[]);
    let status = w.wait_exit(BOUND);
    assert_eq!(status.code(), Some(3), "{}", w.stderr());
    let said = w.stderr();
    for part in [
        format!(
            "held by live pid {}: `conductor-worker 600`, started ",
            holder.0.id()
        ),
        "before the lock was made (".to_string(),
        format!("rm -r {}", lock.display()),
    ] {
        assert!(said.contains(&part), "{part:?} not in: {said}");
    }
    assert!(
        lock.join("pid").exists(),
        "a possible holder's lock is kept"
    );
}
