//! Faults from the crash storm and the bad-input run: a full disk, a chaos of SIGKILLs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use conductor::{Client, Root, Slot, Task, TaskId};

use crate::harness::{wait_until, TestRoot, WorkerProc};

const BOUND: Duration = Duration::from_secs(30);
const S0: Slot = Slot(0);

/// A root on a small tmpfs mounted for the test (needs root; `None`, with the reason
/// printed, where it can't be mounted). Unmounted on drop.
struct SmallDisk {
    mnt: PathBuf,
}

impl SmallDisk {
    fn mount(t_dir: &Path, size: &str) -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: mounting a small tmpfs needs root");
            return None;
        }
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
            Ok(o) if o.status.success() => Some(SmallDisk { mnt }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    fn free(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(&self.mnt).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    }

    /// Fill the disk until only about `leave` bytes are free.
    fn fill_leaving(&self, leave: u64) -> PathBuf {
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
fn root_on(disk: &SmallDisk, dir: tempfile::TempDir) -> TestRoot {
    let client = Client::new(Root::new(disk.mnt.join("root")));
    client.init_queue().expect("init root on the small disk");
    TestRoot { dir, client }
}

/// `big` prints 5 MiB of `a`; anything else is echoed back.
const SIZED_AGENT: &str = r#"sh -c 'p=$(cat); if [ "$p" = big ]; then head -c 5242880 /dev/zero | tr "\0" a; else printf %s "$p"; fi'"#;

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("conductor-test-")
        .tempdir()
        .unwrap()
}

#[test]
fn a_full_disk_keeps_the_finished_result_until_space_returns() {
    let dir = temp_dir();
    let Some(disk) = SmallDisk::mount(dir.path(), "2m") else {
        return;
    };
    let t = root_on(&disk, dir);
    let w = WorkerProc::start(&t, S0, SIZED_AGENT, &[], &[]);
    // Leave room to take the task, not to keep its output.
    let filler = disk.fill_leaving(1024 * 1024);
    t.client
        .write_task(S0, &Task::new("big").with_id("d6"))
        .unwrap();
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
    assert!(r.output_truncated, "a cut output says so");
    assert!(r.output.starts_with("aaaa") && r.output.ends_with("aaaa"));
    // The worker lived through it and serves the next task.
    t.client
        .write_task(S0, &Task::new("small").with_id("after"))
        .unwrap();
    let next = t
        .client
        .wait_for_result(S0, &TaskId::from("after"), BOUND)
        .unwrap();
    assert_eq!(next.output, "small");
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
    let Some(disk) = SmallDisk::mount(dir.path(), "2m") else {
        return;
    };
    let t = root_on(&disk, dir);
    let w = WorkerProc::start(&t, S0, SIZED_AGENT, &[], &[]);
    let filler = disk.fill_leaving(96 * 1024);
    t.client
        .write_task(S0, &Task::new("small").with_id("p1"))
        .unwrap();
    wait_until(BOUND, "the worker to pause pickup", || {
        w.stderr().contains("pickup paused")
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
