//! Who may write a root: foreign owners, group/other-writable modes and links inside the
//! root are refused, with the directory named and the fix spelled out.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use conductor::agent::AgentCommand;
use conductor::queue::Queue;
use conductor::worker::{Worker, WorkerOptions};
use conductor::{Root, Slot, Task};

use crate::harness::{bin, wait_until, TestRoot};
use crate::prereq::{self, require};

fn options(t: &TestRoot) -> WorkerOptions {
    let mut opts = WorkerOptions::new(
        t.client.root().clone(),
        Slot(0),
        t.dir.path().into(),
        AgentCommand::parse("cat").unwrap(),
    );
    opts.rescan = Duration::from_millis(50);
    opts
}

fn start_refused(t: &TestRoot) -> String {
    match Worker::start(options(t)) {
        Ok(_) => panic!("a worker started on an untrusted root"),
        Err(e) => e.to_string(),
    }
}

/// `conductor ARGS --root ROOT`: its exit code and stderr.
fn conductor(root: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin("conductor"))
        .args(args)
        .arg("--root")
        .arg(root)
        .env_remove("CONDUCTOR_WORKER")
        .output()
        .expect("run conductor");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every writing entry point that writes into `dir` refuses, naming it and saying
/// `fix`; nothing reaches the inbox or the queue. A worker start checks the whole root
/// (its sweeper acts on every slot's files). A client checks only what it writes into,
/// so a bad directory of one slot stops sends to that slot, while the queue and the
/// other slots still take tasks (checking every slot made each send O(slots)).
fn assert_all_refuse(t: &TestRoot, dir: &Path, fix: &str) {
    let named = dir.display().to_string();
    let check = |what: &str, msg: &str| {
        assert!(
            msg.contains(&named) && msg.contains(fix),
            "{what} should name {named} and say `{fix}`, said: {msg}"
        );
    };
    check("worker start", &start_refused(t));
    let root = t.client.root();
    let bad_slot = slot_of(root, dir);
    let target = bad_slot.unwrap_or(Slot(0));
    let (code, err) = conductor(t.path(), &["send", &target.to_string(), "hello"]);
    assert_ne!(code, Some(0), "send accepted an untrusted root");
    check("conductor send", &err);
    assert!(!root.worker(target).task().exists(), "a task was delivered");
    let Some(bad) = bad_slot else {
        let (code, err) = conductor(t.path(), &["submit", "hello"]);
        assert_ne!(code, Some(0), "submit accepted an untrusted root");
        check("conductor submit", &err);
        let submitted = Queue::new(root.clone()).submit(&Task::new("hi"));
        check(
            "Queue::submit",
            &submitted.expect_err("submit refused").to_string(),
        );
        let pending = fs::read_dir(root.queue_pending()).map_or(0, |d| d.count());
        assert_eq!(pending, 0, "a task was queued");
        return;
    };
    // Only the bad slot is refused: another slot and the queue still take tasks.
    let other = Slot(bad.0 + 1);
    t.client
        .create_worker(other)
        .expect("another slot is created");
    let (code, err) = conductor(t.path(), &["send", &other.to_string(), "hello"]);
    assert_eq!(code, Some(0), "a send to slot {other} was refused: {err}");
    fs::remove_file(root.worker(other).task()).unwrap();
    if let Err(e) = Queue::new(root.clone()).submit(&Task::new("hi")) {
        panic!("the queue refused a task because of {named}: {e}");
    }
    for e in fs::read_dir(root.queue_pending()).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
}

/// The slot whose directory `dir` is or is inside, if any.
fn slot_of(root: &Root, dir: &Path) -> Option<Slot> {
    let rest = dir.strip_prefix(root.workers_dir()).ok()?;
    rest.components().next()?.as_os_str().to_str()?.parse().ok()
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn world_writable_root_is_refused() {
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    chmod(t.path(), 0o777);
    assert_all_refuse(&t, t.path(), &format!("chmod 700 {}", t.path().display()));
    chmod(t.path(), 0o700);
    Worker::start(options(&t)).expect("fixed as told, the root is accepted");
}

#[test]
fn group_writable_subdirectory_is_refused() {
    let t = TestRoot::new();
    let root = t.client.root().clone();
    t.client.create_worker(Slot(0)).unwrap();
    for dir in [
        root.workers_dir(),
        root.worker(Slot(0)).dir,
        root.worker(Slot(0)).results_dir(),
        root.queue_pending(),
        root.keys_dir(),
        root.slots_dir(),
        root.gates_dir(),
    ] {
        chmod(&dir, 0o770);
        assert_all_refuse(&t, &dir, &format!("chmod 700 {}", dir.display()));
        chmod(&dir, 0o700);
    }
}

#[test]
fn a_missing_root_is_created_private() {
    let dir = tempfile::tempdir().unwrap();
    let root = Root::new(dir.path().join("a/b/root"));
    conductor::Client::new(root.clone()).init_queue().unwrap();
    for d in [
        root.path().to_path_buf(),
        root.workers_dir(),
        root.queue_pending(),
    ] {
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", d.display());
    }
}

#[test]
fn root_owned_by_another_user_is_refused() {
    require!(prereq::root("chowning a root to another user"));
    let nobody = require!(nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .ok_or("this machine has no user `nobody`"));
    let own = |p: &Path| nix::unistd::chown(p, Some(nobody.uid), None).unwrap();
    let t = TestRoot::new();
    t.client.create_worker(Slot(0)).unwrap();
    own(t.path());
    assert_all_refuse(&t, t.path(), &format!("chown root {}", t.path().display()));
    assert!(start_refused(&t).contains("owned by nobody"));
    nix::unistd::chown(t.path(), Some(nix::unistd::Uid::from_raw(0)), None).unwrap();

    // Another user's slot directory: they could plant running.json and status.json.
    let slot7 = t.client.root().worker(Slot(7)).dir;
    fs::create_dir_all(&slot7).unwrap();
    own(&slot7);
    assert_all_refuse(&t, &slot7, &format!("chown root {}", slot7.display()));
}

/// The protocol directories a symlink may replace, with how to find them.
fn link_targets(root: &Root) -> Vec<PathBuf> {
    let w = root.worker(Slot(0));
    vec![
        w.tasks_dir(),
        w.results_dir(),
        w.rejected_dir(),
        root.queue_results(),
        w.dir,
    ]
}

/// Move `dir` aside and put a link to a fresh outside directory in its place.
fn replace_with_link(dir: &Path, outside: &Path) {
    fs::rename(dir, dir.with_extension("moved")).unwrap();
    fs::create_dir(outside).unwrap();
    symlink(outside, dir).unwrap();
}

fn entries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn linked_protocol_directories_are_refused_at_start_and_by_writers() {
    let extra = |root: &Root| vec![root.ids_dir(), root.worker(Slot(0)).trash_dir()];
    for i in 0..7 {
        let t = TestRoot::new();
        t.client.create_worker(Slot(0)).unwrap();
        fs::create_dir_all(t.client.root().worker(Slot(0)).trash_dir()).unwrap();
        let mut all = link_targets(t.client.root());
        all.extend(extra(t.client.root()));
        let dir = all[i].clone();
        let outside = t.dir.path().join("outside");
        replace_with_link(&dir, &outside);
        assert_all_refuse(&t, &dir, &format!("rm {}", dir.display()));
        assert!(start_refused(&t).contains("symbolic link"));
        assert_eq!(
            entries(&outside),
            Vec::<String>::new(),
            "written through {}",
            dir.display()
        );
    }
}

/// A task dropped in by hand (bypassing the client's checks), so the worker's own
/// per-task check is what stands between it and the link.
fn drop_task(t: &TestRoot, dir: &Path, bad: bool) {
    let root = t.client.root();
    let text = if bad {
        "{not json".to_string()
    } else {
        r#"{"schema":1,"id":"t1","prompt":"hi"}"#.to_string()
    };
    if *dir == root.queue_results() {
        let tmp = t.dir.path().join("queued.json");
        fs::write(
            &tmp,
            r#"{"schema":1,"id":"q1","prompt":"hi","origin":"queue"}"#,
        )
        .unwrap();
        fs::rename(&tmp, root.queue_pending().join("5-q1.json")).unwrap();
    } else {
        let tmp = t.dir.path().join("task.tmp");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, root.worker(Slot(0)).task()).unwrap();
    }
}

#[test]
fn a_running_worker_never_writes_through_a_link() {
    for i in 0..5 {
        let t = TestRoot::new();
        let dir = link_targets(t.client.root())[i].clone();
        let mut worker = Worker::start(options(&t)).unwrap();
        let (stop, stopped) = crossbeam_channel::bounded::<()>(1);
        let serving = std::thread::spawn(move || worker.run(&stopped));

        let outside = t.dir.path().join("outside");
        replace_with_link(&dir, &outside);
        let rejected = dir == t.client.root().worker(Slot(0)).rejected_dir();
        drop_task(&t, &dir, rejected);
        let planted = entries(&outside);
        wait_until(
            Duration::from_secs(30),
            "the worker to stop or write",
            || serving.is_finished() || entries(&outside) != planted,
        );
        let _ = stop.send(());
        let ended = serving.join().unwrap();
        assert_eq!(
            entries(&outside),
            planted,
            "written through {}",
            dir.display()
        );
        let err = ended.expect_err("the worker refuses the link").to_string();
        assert!(
            err.contains(&dir.display().to_string()) && err.contains("symbolic link"),
            "refusal should name {}: {err}",
            dir.display()
        );
    }
}

#[test]
fn fsio_never_writes_through_a_linked_directory() {
    use conductor::fsio::{self, Durability};
    let dir = tempfile::tempdir().unwrap();
    let (real, outside, link) = (
        dir.path().join("real"),
        dir.path().join("outside"),
        dir.path().join("link"),
    );
    fs::create_dir(&real).unwrap();
    fs::create_dir(&outside).unwrap();
    symlink(&outside, &link).unwrap();
    let src = real.join("src.json");
    fs::write(&src, "{}").unwrap();
    let target = link.join("x.json");
    let attempts: Vec<(&str, conductor::Result<()>)> = vec![
        (
            "write_replace",
            fsio::write_replace(&target, b"{}", Durability::Durable),
        ),
        (
            "write_new",
            fsio::write_new(&target, b"{}", Durability::Atomic),
        ),
        ("write_new_via", fsio::write_new_via(&real, &target, b"{}")),
        ("link_replace", fsio::link_replace(&src, &target)),
        ("overwrite_padded", fsio::overwrite_padded(&target, b"{}")),
        (
            "write_new (staging)",
            fsio::write_new_via(&link, &real.join("y.json"), b"{}"),
        ),
    ];
    for (what, res) in attempts {
        let err = res.expect_err(what).to_string();
        assert!(
            err.contains(&link.display().to_string()) && err.contains("symbolic link"),
            "{what} should refuse the link by name: {err}"
        );
    }
    assert_eq!(entries(&outside), Vec::<String>::new());
    assert_eq!(entries(&real), vec!["src.json".to_string()]);
}

/// Issue 22, item 7: another user's root, looked at by a user who may not enter it, is
/// reported as theirs ("permission denied … owned by root"), not as no root at all.
#[test]
fn another_users_root_is_reported_as_theirs_not_as_missing() {
    use std::os::unix::fs::PermissionsExt;
    require!(prereq::root("running the CLI as another user"));
    let nobody = require!(nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .ok_or("this machine has no user `nobody`"));
    let t = TestRoot::new();
    // The root stays root's (0700); only the way to it and the binary are open to all.
    fs::set_permissions(t.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = t.dir.path().join("conductor");
    fs::copy(crate::harness::bin("conductor"), &bin).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args([
            format!("--reuid={}", nobody.uid),
            format!("--regid={}", nobody.gid),
            "--clear-groups".to_string(),
        ])
        .arg(&bin)
        .arg("status")
        .env("CONDUCTOR_HOME", t.path())
        .env("HOME", t.dir.path())
        .output()
        .expect("setpriv (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("permission denied") && stderr.contains("owned by root"),
        "{stderr}"
    );
    assert!(!stderr.contains("no conductor root"), "{stderr}");
}
