//! Many slots from one process: serving, refusing each other's slots, crash recovery,
//! and reads of shared directories waking nobody.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conductor::queue::Queue;
use conductor::{Outcome, Slot, Task, TaskId, TaskResult, WorkerState};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::harness::{agent, assert_nothing_left, bin, wait_until, TestRoot, WorkerProc};
use crate::lease_renewer::IDLE_THREADS;

const BOUND: Duration = Duration::from_secs(60);

/// A `conductor-worker SLOTS DIR` process; dropping it stops it (SIGTERM, then SIGKILL
/// after a bound).
pub(crate) struct Many {
    child: Option<Child>,
    pid: u32,
    stderr: PathBuf,
}

impl Many {
    fn spawn(t: &TestRoot, slots: &str, agent_cmd: &str, env: &[(&str, &str)]) -> Many {
        Many::spawn_with(t, slots, agent_cmd, &[], env, &[])
    }

    /// `strays`: descriptors the worker inherits (without close-on-exec) on `/dev/null`.
    fn spawn_with(
        t: &TestRoot,
        slots: &str,
        agent_cmd: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        strays: &[i32],
    ) -> Many {
        let stderr = t
            .dir
            .path()
            .join(format!("many-{slots}-{}.stderr", nonce()));
        let mut cmd = Command::new(bin("conductor-worker"));
        cmd.arg(slots)
            .arg(t.dir.path())
            .args(["--agent", agent_cmd])
            .args(extra)
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env("RUST_LOG", "conductor=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let null = fs::File::open("/dev/null").unwrap();
        if !strays.is_empty() {
            use std::os::fd::AsRawFd;
            use std::os::unix::process::CommandExt;
            let (from, strays) = (null.as_raw_fd(), strays.to_vec());
            // SAFETY: only dup2 and fcntl, async-signal-safe, between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    for &fd in &strays {
                        // dup2 onto itself would keep close-on-exec: clear it instead.
                        let done = if fd == from {
                            nix::libc::fcntl(fd, nix::libc::F_SETFD, 0)
                        } else {
                            nix::libc::dup2(from, fd)
                        };
                        if done < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("spawn conductor-worker");
        drop(null);
        Many {
            pid: child.id(),
            child: Some(child),
            stderr,
        }
    }

    /// Start and wait until every slot in `slots` is served by it.
    pub(crate) fn start(
        t: &TestRoot,
        slots: &[Slot],
        agent_cmd: &str,
        env: &[(&str, &str)],
    ) -> Many {
        Many::start_with(t, slots, agent_cmd, &[], env, &[])
    }

    fn start_with(
        t: &TestRoot,
        slots: &[Slot],
        agent_cmd: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        strays: &[i32],
    ) -> Many {
        let list = format!("{}-{}", slots[0], slots[slots.len() - 1]);
        let mut m = Many::spawn_with(t, &list, agent_cmd, extra, env, strays);
        wait_until(BOUND, "every slot served", || {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("worker exited at start ({st}): {}", m.stderr());
            }
            slots
                .iter()
                .all(|&s| conductor::pool::serving(t.client.root(), s, m.pid))
        });
        m
    }

    pub(crate) fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub(crate) fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("still owned");
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "worker did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid as i32), sig).unwrap();
    }

    pub(crate) fn threads(&self) -> usize {
        fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

impl Drop for Many {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            crate::harness::stop_child(c);
        }
    }
}

fn nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn slots(range: std::ops::Range<u32>) -> Vec<Slot> {
    range.map(Slot).collect()
}

fn result_of(t: &TestRoot, slot: Slot, id: &str) -> TaskResult {
    t.client
        .wait_for_result(slot, &TaskId::from(id), BOUND)
        .unwrap_or_else(|e| panic!("no result for {id}: {e}"))
}

fn sh(script: &str) -> String {
    agent(script).display().to_string()
}

#[test]
fn a_many_slot_worker_serves_fifty_slots() {
    let t = TestRoot::new();
    let all = slots(0..50);
    let mut m = Many::start(&t, &all, "cat", &[]);
    // Main, watcher, signal handler and the one gate-lease renewer: a
    // constant, however many slots (no thread per idle slot).
    let idle_threads = m.threads();
    assert!(
        idle_threads <= IDLE_THREADS,
        "{idle_threads} threads while idle"
    );
    for &s in &all {
        let task = Task::new(format!("hello {s}")).with_id(format!("t{s}").as_str());
        t.client.write_task(s, &task).unwrap();
    }
    for &s in &all {
        let r = result_of(&t, s, &format!("t{s}"));
        assert_eq!(r.outcome, Some(Outcome::Success), "slot {s}: {r:?}");
        assert_eq!(r.output, format!("hello {s}"));
        assert_eq!(r.worker, Some(s.0));
    }
    // A second round: every slot came back idle and serves again.
    for &s in &all {
        let task = Task::new(format!("again {s}")).with_id(format!("u{s}").as_str());
        t.client.write_task(s, &task).unwrap();
    }
    for &s in &all {
        assert_eq!(
            result_of(&t, s, &format!("u{s}")).output,
            format!("again {s}")
        );
    }
    m.signal(Signal::SIGTERM);
    assert!(m.wait_exit().success(), "{}", m.stderr());
    assert_nothing_left(t.path());
}

#[test]
fn slots_of_many_slot_and_single_slot_workers_refuse_each_other() {
    let t = TestRoot::new();
    let m = Many::start(&t, &slots(0..5), "cat", &[]);
    let mut lone = WorkerProc::spawn(&t, Slot(3), "cat", &[], &[]);
    let st = lone.wait_exit(BOUND);
    assert_eq!(st.code(), Some(3), "{}", lone.stderr());
    let said = lone.stderr();
    assert!(
        said.contains("refusing to start worker 3") && said.contains(&format!("pid {}", m.pid)),
        "{said}"
    );

    // The other way: a single-slot worker holds 7; a many-slot start over it is refused
    // as a whole and lets go of the slots it took on the way.
    let single = WorkerProc::start(&t, Slot(7), "cat", &[], &[]);
    let mut over = Many::spawn(&t, "5-9", "cat", &[]);
    let st = over.wait_exit();
    assert_eq!(st.code(), Some(3), "{}", over.stderr());
    let said = over.stderr();
    assert!(
        said.contains("worker 7") && said.contains(&format!("pid {}", single.pid)),
        "{said}"
    );
    let five = WorkerProc::start(&t, Slot(5), "cat", &[], &[]);
    t.client
        .write_task(Slot(5), &Task::new("five").with_id("five"))
        .unwrap();
    assert_eq!(result_of(&t, Slot(5), "five").output, "five");
    drop((m, single, five));
    assert_nothing_left(t.path());
}

#[test]
fn sigkill_of_a_many_slot_worker_mid_tasks_ends_each_task_interrupted_once() {
    let t = TestRoot::new();
    let log = t.dir.path().join("runs.log");
    let env = [("AGENT_LOG", log.to_str().unwrap())];
    let all = slots(0..10);
    let mut m = Many::start(&t, &all, &sh("slow.sh"), &env);
    let busy = &all[..6];
    for &s in busy {
        t.client
            .write_task(s, &Task::new("x").with_id(format!("k{s}").as_str()))
            .unwrap();
    }
    let mut agents = Vec::new();
    for &s in busy {
        let want = TaskId::from(format!("k{s}").as_str());
        let mut pid = None;
        wait_until(BOUND, "task working", || {
            let st = t.client.read_status(s).ok().flatten();
            pid = st
                .filter(|st| st.status == WorkerState::Working && st.task_id == Some(want.clone()))
                .and_then(|st| st.agent_pid);
            pid.is_some()
        });
        agents.push(pid.unwrap());
    }
    wait_until(BOUND, "every agent logged its start", || {
        fs::read_to_string(&log).is_ok_and(|l| l.matches("start k").count() == busy.len())
    });
    m.signal(Signal::SIGKILL);
    m.wait_exit();
    wait_until(BOUND, "agents died with their worker", || {
        agents.iter().all(|&p| !conductor::host::pid_alive(p))
    });
    let m2 = Many::start(&t, &all, &sh("slow.sh"), &env);
    for &s in busy {
        let r = result_of(&t, s, &format!("k{s}"));
        assert_eq!(r.outcome, Some(Outcome::Interrupted), "slot {s}: {r:?}");
        assert_eq!(
            r.error,
            Some(format!("interrupted: worker pid {} died", m.pid))
        );
        assert!(!t.client.worker(s).running().exists());
    }
    let runs = fs::read_to_string(&log).unwrap();
    for &s in busy {
        assert_eq!(runs.matches(&format!("start k{s} ")).count(), 1, "{runs}");
    }
    drop(m2);
    assert_nothing_left(t.path());
}

#[test]
fn shutdown_of_a_many_slot_worker_stops_every_running_agent() {
    let t = TestRoot::new();
    let all = slots(0..4);
    let mut m = Many::start(&t, &all, &sh("slow.sh"), &[]);
    for &s in &all {
        t.client
            .write_task(s, &Task::new("x").with_id(format!("s{s}").as_str()))
            .unwrap();
    }
    for &s in &all {
        let want = Some(TaskId::from(format!("s{s}").as_str()));
        wait_until(
            BOUND,
            "task working",
            || matches!(t.client.read_status(s), Ok(Some(st)) if st.status == WorkerState::Working && st.task_id == want),
        );
    }
    m.signal(Signal::SIGTERM);
    assert!(m.wait_exit().success(), "{}", m.stderr());
    for &s in &all {
        let r = result_of(&t, s, &format!("s{s}"));
        assert_eq!(r.outcome, Some(Outcome::Interrupted), "slot {s}: {r:?}");
    }
    assert_nothing_left(t.path());
}

/// How many watch events the process writing `file` has received, and the path of
/// the last one.
pub(crate) fn events_in(file: &Path) -> Option<(u64, String)> {
    let text = fs::read_to_string(file).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((v["events"].as_u64()?, v["last"].as_str()?.to_string()))
}

/// Make one change in `keys/` (a directory every worker watches) and wait until the
/// worker has counted it as its last event: the count then includes every event
/// queued before it (events are read in order).
pub(crate) fn sentinel(t: &TestRoot, file: &Path, name: &str) -> u64 {
    let path = t.path().join("keys").join(name);
    fs::create_dir(&path).unwrap();
    let mut n = 0;
    wait_until(BOUND, "the sentinel event counted", || {
        match events_in(file) {
            Some((count, last)) if Path::new(&last) == path => {
                n = count;
                true
            }
            _ => false,
        }
    });
    n
}

fn read_shared_dirs(t: &TestRoot, times: usize) {
    for _ in 0..times {
        for d in ["queue/pending", "keys", "slots"] {
            let n = fs::read_dir(t.path().join(d)).unwrap().count();
            std::hint::black_box(n);
        }
    }
}

#[test]
fn reads_of_shared_directories_do_not_wake_a_worker() {
    for many in [false, true] {
        let t = TestRoot::new();
        let file = t.dir.path().join("events.json");
        let env = [("CONDUCTOR_DEBUG_WATCH_EVENTS", file.to_str().unwrap())];
        let (_single, _many);
        if many {
            _many = Some(Many::start(&t, &slots(0..3), "cat", &env));
        } else {
            _single = Some(WorkerProc::start(&t, Slot(0), "cat", &[], &env));
        }
        let before = sentinel(&t, &file, "first");
        read_shared_dirs(&t, 300);
        let after = sentinel(&t, &file, "second");
        assert_eq!(
            after,
            before + 1,
            "300 listings of the shared directories woke the watcher (many-slot: {many})"
        );
    }
}

#[test]
fn run_with_many_workers_starts_one_many_slot_process() {
    let t = TestRoot::new();
    let n = conductor::pool::MANY_SLOT_FROM;
    let prompts: Vec<String> = (0..2 * n).map(|i| format!("prompt {i}")).collect();
    let out = Command::new(bin("conductor"))
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .args([
            "run",
            "--workers",
            &n.to_string(),
            "--agent",
            "tr a-z A-Z",
            "--json",
            "--root",
        ])
        .arg(t.path())
        .args(&prompts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2 * n);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["output"], format!("PROMPT {i}"));
    }
    let log = fs::read_to_string(t.path().join("workers/0/worker.log")).unwrap();
    assert!(
        log.contains(&format!("conductor worker for {n} slots (0-{})", n - 1)),
        "{log}"
    );
    assert_nothing_left(t.path());
}

#[test]
fn a_many_slot_worker_pulls_from_the_queue_with_events_and_when_polling() {
    for extra in [&[][..], &["--poll=20ms"][..]] {
        let t = TestRoot::new();
        let m = Many::start_with(&t, &slots(0..8), "cat", extra, &[], &[]);
        let q = Queue::new(t.client.root().clone());
        let ids: Vec<String> = (0..40).map(|i| format!("q{i}")).collect();
        for id in &ids {
            q.submit(&Task::new(format!("queued {id}")).with_id(id.as_str()))
                .unwrap();
        }
        let mut used = std::collections::BTreeSet::new();
        for id in &ids {
            let r = q
                .wait_for_result(&TaskId::from(id.as_str()), BOUND)
                .unwrap_or_else(|e| panic!("{id} ({extra:?}): {e}\n{}", m.stderr()));
            assert_eq!(r.output, format!("queued {id}"));
            used.insert(r.worker);
        }
        assert!(used.len() > 1, "one slot ran everything ({extra:?})");
        // A direct task while polling: the inbox is among what the poller stats.
        t.client
            .write_task(Slot(5), &Task::new("direct").with_id("direct"))
            .unwrap();
        assert_eq!(result_of(&t, Slot(5), "direct").output, "direct");
        drop(m);
        assert_nothing_left(t.path());
    }
}

/// A many-slot worker keeps three low descriptors for its agents' pipes (3–5, or the
/// lowest free ones after what it inherited there): each agent shares the worker's
/// table until it leaves it with only those below them (not a copy of a thousand gate
/// files to close at exec). The agents start with just their stdio (and what the worker
/// itself inherited below the three), and between spawns the three are back on
/// /dev/null (a pipe end left there would keep an agent's output open, and its reader
/// waiting).
#[test]
fn agents_get_only_their_stdio_and_the_reserved_descriptors_come_back() {
    // As started by a shell, and as under `perf` or a service manager (3 and 4 taken).
    for (strays, reserved) in [(&[][..], [3, 4, 5]), (&[3, 4][..], [5, 6, 7])] {
        let t = TestRoot::new();
        let all = slots(0..20);
        let m = Many::start_with(&t, &all, "ls /proc/self/fd", &[], &[], strays);
        assert!(
            m.stderr().contains(&format!(
                "descriptors {reserved:?} reserved for agents' stdio"
            )),
            "the worker inheriting {strays:?} did not reserve {reserved:?}: {}",
            m.stderr()
        );
        for &s in &all {
            let task = Task::new("x").with_id(format!("fd{s}").as_str());
            t.client.write_task(s, &task).unwrap();
        }
        for &s in &all {
            let r = result_of(&t, s, &format!("fd{s}"));
            assert_eq!(r.outcome, Some(Outcome::Success), "slot {s}: {r:?}");
            let fds: Vec<i32> = r
                .output
                .split_whitespace()
                .map(|f| f.parse().unwrap())
                .collect();
            // 0–2, the strays, and the one `ls` opens to read the directory.
            assert_eq!(
                fds.len(),
                4 + strays.len(),
                "slot {s}: the agent saw {fds:?}"
            );
            for fd in [0, 1, 2].iter().chain(strays) {
                assert!(fds.contains(fd), "slot {s}: {fds:?}");
            }
        }
        for fd in reserved {
            let target = fs::read_link(format!("/proc/{}/fd/{fd}", m.pid)).unwrap();
            assert_eq!(
                target,
                Path::new("/dev/null"),
                "descriptor {fd} of the worker after its spawns"
            );
        }
    }
}

/// `conductor-worker 0-3 DIR --preset command --preset codex`: every slot serves both;
/// each task runs under the preset it names (the first when it names none), queued or
/// sent to a slot, several codex tasks at once on different slots.
#[test]
fn a_many_slot_worker_serves_several_presets_each_task_under_the_one_it_names() {
    let t = TestRoot::new();
    let path = crate::views::path_with_fake_codex(&t);
    let all = slots(0..4);
    let _m = Many::start_with(
        &t,
        &all,
        "cat",
        &["--preset", "command", "--preset", "codex"],
        &[("PATH", &path)],
        &[],
    );
    for &s in &all {
        let status = t.client.read_status(s).unwrap().unwrap();
        assert_eq!(status.presets, ["command", "codex"], "slot {s}");
    }
    // Four codex tasks held at a gate: one on each slot at once.
    let gate = t.dir.path().join("go");
    let queue = Queue::new(t.client.root().clone());
    for i in 0..4 {
        let mut task = Task::new(format!("task {i} gate={}", gate.display()))
            .with_id(format!("cx{i}").as_str());
        task.agent = Some("codex".into());
        queue.submit(&task).unwrap();
    }
    wait_until(BOUND, "four codex tasks running, one a slot", || {
        all.iter().all(|&s| {
            matches!(t.client.read_status(s), Ok(Some(st)) if st.status == WorkerState::Working)
        })
    });
    // Queued behind them: tasks of the first preset, by default or by name.
    queue.submit(&Task::new("plain one").with_id("c0")).unwrap();
    let mut named = Task::new("plain two").with_id("c1");
    named.agent = Some("command".into());
    queue.submit(&named).unwrap();
    fs::write(&gate, "").unwrap();

    let mut ran_on = std::collections::HashSet::new();
    for i in 0..4 {
        let r = t
            .client
            .wait_for_task(&TaskId::from(format!("cx{i}").as_str()), BOUND)
            .unwrap();
        assert!(r.success, "{:?}", r.error);
        assert_eq!(r.agent.as_deref(), Some("codex"));
        assert!(
            r.output.starts_with(&format!("fake codex: task {i} ")),
            "{}",
            r.output
        );
        assert!(r.session_id.as_deref().unwrap().starts_with("th-fake-"));
        assert_eq!((r.input_tokens, r.output_tokens), (Some(12), Some(5)));
        ran_on.insert(r.worker);
    }
    assert_eq!(ran_on.len(), 4, "each on a slot of its own: {ran_on:?}");
    for (id, prompt) in [("c0", "plain one"), ("c1", "plain two")] {
        let r = t.client.wait_for_task(&TaskId::from(id), BOUND).unwrap();
        assert_eq!(
            (r.output.as_str(), r.agent.as_deref()),
            (prompt, Some("command"))
        );
    }
    // Sent to a slot's inbox, a codex task runs there under codex.
    let mut sent = Task::new("direct").with_id("cx-inbox");
    sent.agent = Some("codex".into());
    let id = t.client.write_task(Slot(2), &sent).unwrap();
    let r = t.client.wait_for_result(Slot(2), &id, BOUND).unwrap();
    assert_eq!(r.agent.as_deref(), Some("codex"));
    assert_eq!(r.output, "fake codex: direct");
}
