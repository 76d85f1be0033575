//! On a journaled ext4 — the disk people have — a task's claim and its result are each
//! committed by an fsync of the file itself, which commits its new name with it, never
//! by a `syncfs` of the whole filesystem (issue 39.1). The ext4 is a loop-mounted image
//! the test makes (as root).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::group_commit::{calls_named, strace_a_run};
use crate::prereq::{self, require};

/// A journaled ext4 (`mkfs.ext4` defaults) on an image file, loop-mounted; unmounted
/// and removed when dropped. Made only as root with `mkfs.ext4` (`Err` saying what is
/// needed: skipped, or failed under CI); a kernel or container without loop devices
/// is the machine's (skipped even under CI).
pub(crate) struct Ext4 {
    pub(crate) mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Ext4 {
    /// [`Ext4::make`], or `None` once the test is skipped (outside CI) or failed (under
    /// CI, which installs e2fsprogs and runs as root: a green CI means this ran).
    pub(crate) fn made_or_skipped() -> Option<Ext4> {
        match Ext4::make() {
            Ok(fs) => Some(fs),
            Err(why) => {
                prereq::skip_or_fail(&format!("no journaled ext4 of our own: {why}"));
                None
            }
        }
    }

    /// `Err`: why it cannot be made here.
    fn make() -> Result<Ext4, String> {
        prereq::root("loop-mounting an ext4 image")?;
        if Command::new("mkfs.ext4").arg("-V").output().is_err() {
            return Err("a journaled ext4 needs mkfs.ext4 (apt-get install e2fsprogs)".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("conductor-ext4-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        file.set_len(256 << 20).map_err(|e| e.to_string())?;
        let sh = |c: &mut Command| match c.output() {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "{c:?} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!("{c:?}: {e}")),
        };
        sh(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        sh(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount))?;
        Ok(Ext4 { mount, _dir: dir })
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        // A descriptor the test's last watcher had not yet closed can keep it busy for
        // a moment: tried again for a while, then detached lazily (never left mounted,
        // or its image would stay behind).
        let umount = |lazy: bool| {
            let mut c = Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.mount)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !umount(false) {
            if std::time::Instant::now() > deadline {
                umount(true);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The `fsync` and `syncfs` calls a run of `n` tasks makes on a fresh durable root in
/// `under`.
fn syncs_of_a_run(under: &Path, n: usize) -> (u64, u64) {
    let dir = under.join(format!("run-{n}"));
    let root = dir.join("root");
    std::fs::create_dir(&dir).unwrap();
    conductor::Client::new(conductor::Root::new(&root))
        .init_queue()
        .unwrap();
    let summary = strace_a_run(&dir, &root, n);
    (
        calls_named(&summary, "fsync"),
        calls_named(&summary, "syncfs"),
    )
}

/// At most two fsyncs a task (the claim's, of `running.json`; the result's, of
/// `results/<id>.json`, owed to the next claim's and paid by it when the next task is
/// in the inbox within `worker/owed.rs`'s `LINGER`: then one) and no `syncfs`: where it
/// cost two `syncfs`, each a writeback of every dirty file on the filesystem before its
/// journal commit. Counted as the difference between runs of 30 and 10 tasks, so the
/// start-up's calls cancel out. (How often the run's next task is there in time
/// depends on the machine's load: 1.05–1.45 a task at load 14 under strace.)
#[test]
fn on_a_journaled_ext4_a_task_commits_its_files_not_the_filesystem() {
    require!(prereq::strace());
    let Some(fs) = Ext4::made_or_skipped() else {
        return;
    };
    let (few, many) = (syncs_of_a_run(&fs.mount, 10), syncs_of_a_run(&fs.mount, 30));
    let fsyncs = many.0.saturating_sub(few.0) as f64 / 20.0;
    let syncfs = many.1.saturating_sub(few.1) as f64 / 20.0;
    let counts = format!("10 tasks: {few:?}, 30 tasks: {many:?} (fsync, syncfs)");
    assert!(
        syncfs < 0.1,
        "{syncfs} syncfs a task on a journaled ext4; none expected ({counts})"
    );
    // One a claim at least; the difference of the two runs dips below one a task when
    // the shorter run paid more of its results alone (its next task late): a margin.
    assert!(
        (0.75..=2.25).contains(&fsyncs),
        "{fsyncs} fsyncs a task: the claim's, and the result's unless the claim's paid it \
         ({counts})"
    );
}

/// The queue's path on a journaled ext4: 12 tasks from one `submit --batch`, then served
/// by a worker under `strace -f -c`; each claim (one rename out of `queue/pending/`) is
/// committed by an fsync of `running.json`, which commits the last task's result and
/// queue result with it (their commits are owed to it, `worker/owed.rs`): one fsync a
/// task where there were three, and no `syncfs`.
#[test]
fn on_a_journaled_ext4_a_queued_task_commits_its_files_not_the_filesystem() {
    use conductor::queue::Queue;
    use conductor::TaskId;
    require!(prereq::strace());
    let Some(fs) = Ext4::made_or_skipped() else {
        return;
    };
    let root = fs.mount.join("root");
    let client = conductor::Client::new(conductor::Root::new(&root));
    client.init_queue().unwrap();
    let list = fs.mount.join("batch.txt");
    std::fs::write(
        &list,
        (0..12).map(|i| format!("task {i}\n")).collect::<String>(),
    )
    .unwrap();
    let out = Command::new(crate::harness::bin("conductor"))
        .args(["submit", "--batch", "-f"])
        .arg(&list)
        .arg("--root")
        .arg(&root)
        .env_remove("CONDUCTOR_WORKER")
        .output()
        .unwrap();
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    let counts = fs.mount.join("strace.txt");
    let mut worker = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs"])
        .arg("-o")
        .arg(&counts)
        .arg(crate::harness::bin("conductor-worker"))
        .arg("0")
        .arg(&fs.mount)
        .args(["--agent", "cat", "--root"])
        .arg(&root)
        .env_remove("CONDUCTOR_WORKER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let queue = Queue::new(client.root().clone());
    let finished = ids.iter().all(|id| {
        queue
            .wait_for_result(
                &TaskId::from(id.as_str()),
                std::time::Duration::from_secs(60),
            )
            .is_ok_and(|r| r.success)
    });
    // The worker (strace's child) stops on SIGTERM; strace then writes its summary.
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", worker.id()))
        .unwrap_or_default();
    for pid in children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    crate::harness::wait_until(
        std::time::Duration::from_secs(60),
        "the worker to stop",
        || worker.try_wait().is_ok_and(|s| s.is_some()),
    );
    let _ = worker.kill();
    assert_eq!(ids.len(), 12, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(finished, "every queued task ends with a success");
    let summary = std::fs::read_to_string(&counts).unwrap();
    let (fsyncs, syncfs) = (
        calls_named(&summary, "fsync"),
        calls_named(&summary, "syncfs"),
    );
    assert_eq!(syncfs, 0, "no syncfs on a journaled ext4:\n{summary}");
    assert!(
        (12..=16).contains(&fsyncs),
        "{fsyncs} fsyncs for 12 queued tasks: their claims expected, each committing the \
         last task's result and queue result too (1 a task, the last result's, a few at \
         start; it was 3 a task):\n{summary}"
    );
}
