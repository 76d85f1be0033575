//! The pipeline benchmark: pickup latency, round trip, throughput, idle cost.
//!
//! `cargo bench --bench pipeline` (add `-- --tasks N` to change the sample size,
//! `--latency-only` for pickup and round trips alone, `CONDUCTOR_BENCH_WORKER=PATH` to
//! measure another build's `conductor-worker`). Runs real `conductor-worker` processes
//! on a private temp root. The agent is this same binary in agent mode: it prints the
//! wall-clock instant it started, then copies stdin to stdout like `cat`. Pickup is set
//! beside its floor: a minimal inotify worker (one rename to claim, std's spawn, one
//! rename to publish) running the same agent.
//!
//! `--c-agent`: the agent is instead `benches/clock_agent.c`, built static with `cc`
//! (issue 39.5: a small static agent, so that the agent's own start — a loader and a
//! runtime — is not what the pickup measures).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use conductor::{Client, Root, Slot, Status, Task, TaskId, WorkerState};

const AGENT_MODE: &str = "CONDUCTOR_BENCH_AGENT";
/// Run as the floor worker, serving the directory this variable names.
const FLOOR_MODE: &str = "CONDUCTOR_BENCH_FLOOR";
const BOUND: Duration = Duration::from_secs(60);

/// The agent program both workers run, when it is not this binary (`--c-agent`).
const AGENT_PROGRAM: &str = "CONDUCTOR_BENCH_AGENT_PROGRAM";

/// The agent program: the `--c-agent` build, or this binary in agent mode.
fn agent_program() -> PathBuf {
    std::env::var_os(AGENT_PROGRAM)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().unwrap())
}

/// Build `benches/clock_agent.c` static into `dir`; its path.
fn build_c_agent(dir: &Path) -> PathBuf {
    let out = dir.join("clock_agent");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/clock_agent.c");
    let status = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("cc (for --c-agent)");
    assert!(status.success(), "cc -static {} failed", source.display());
    out
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn agent_main() {
    let started = now_ns();
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{started}").unwrap();
    out.write_all(&input).unwrap();
}

/// The worker binary to measure: this build's, or another build's named by
/// `CONDUCTOR_BENCH_WORKER` (to compare two trees with one harness).
fn worker_program() -> std::ffi::OsString {
    std::env::var_os("CONDUCTOR_BENCH_WORKER")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_conductor-worker").into())
}

struct Workers {
    children: Vec<Child>,
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_workers(client: &Client, n: u32, project: &Path) -> Workers {
    let me = agent_program();
    let mut children = Vec::new();
    for i in 0..n {
        let child = Command::new(worker_program())
            .arg(i.to_string())
            .arg(project)
            .arg("--agent")
            .arg(me.to_str().unwrap())
            .arg("-q")
            .env("CONDUCTOR_HOME", client.root().path())
            .env(AGENT_MODE, "1")
            .env_remove("CONDUCTOR_WORKER")
            .stdout(Stdio::null())
            .spawn()
            .expect("start conductor-worker");
        let pid = child.id();
        children.push(child);
        let deadline = Instant::now() + BOUND;
        loop {
            if let Ok(Some(Status {
                status: WorkerState::Idle,
                worker_pid: Some(p),
                ..
            })) = client.read_status(Slot(i))
            {
                if p == pid {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "worker {i} did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Workers { children }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn summary(name: &str, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{name:<28} n={:<5} p50={:>8.3} ms  p90={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        samples.len(),
        percentile(&samples, 0.50),
        percentile(&samples, 0.90),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
}

/// When each task's result file appeared, as an inotify watcher armed for the whole
/// measure sees it: the worker's own round trip ends there, whatever the waiting side
/// does. Keyed by task id.
struct ResultSeen {
    _watcher: notify::RecommendedWatcher,
    seen: crossbeam_channel::Receiver<(String, Instant)>,
}

impl ResultSeen {
    fn watch(client: &Client, slot: Slot) -> ResultSeen {
        use notify::Watcher;
        let (tx, seen) = crossbeam_channel::unbounded();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            let at = Instant::now();
            let Ok(ev) = ev else { return };
            for path in ev.paths {
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if let Some(id) = name.strip_suffix(".json") {
                    let _ = tx.send((id.to_string(), at));
                }
            }
        })
        .expect("inotify watcher");
        let results = client.root().worker(slot).results_dir();
        std::fs::create_dir_all(&results).unwrap();
        watcher
            .watch(&results, notify::RecursiveMode::NonRecursive)
            .expect("watch results");
        ResultSeen {
            _watcher: watcher,
            seen,
        }
    }

    /// The first moment `id`'s result was seen (the events of earlier tasks skipped).
    fn when(&self, id: &TaskId) -> Instant {
        let want = id.to_string();
        loop {
            let (got, at) = self.seen.recv_timeout(BOUND).expect("result event");
            if got == want {
                return at;
            }
        }
    }
}

/// Sequential tasks on one worker: pickup (task.json linked → agent running), the
/// worker's own round trip (task.json linked → its result file created, seen by a
/// watcher armed beforehand) and the library round trip (write_task → wait_for_result
/// returns): what a library wait adds is the difference of the last two.
fn latency(client: &Client, tasks: usize) {
    let results = ResultSeen::watch(client, Slot(0));
    let mut pickup = Vec::with_capacity(tasks);
    let mut worker_trip = Vec::with_capacity(tasks);
    let mut round_trip = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let id = TaskId::Text(format!("lat-{i}"));
        let task = Task::new("x").with_id(id.clone());
        let t0 = Instant::now();
        client.write_task(Slot(0), &task).unwrap();
        let linked = Instant::now();
        let written_ns = now_ns();
        let r = client.wait_for_result(Slot(0), &id, BOUND).unwrap();
        round_trip.push(t0.elapsed().as_secs_f64() * 1e3);
        assert!(r.success, "{:?}", r.error);
        let present = results.when(&id);
        worker_trip.push(present.saturating_duration_since(linked).as_secs_f64() * 1e3);
        let started: u128 = r.output.lines().next().unwrap().parse().unwrap();
        pickup.push((started as f64 - written_ns as f64) / 1e6);
    }
    summary("pickup (task → agent)", pickup);
    summary("worker trip (task → result)", worker_trip);
    summary("round trip (write → result)", round_trip);
}

/// `conductor send 0 PROMPT --wait` as a user's shell runs it, beside `conductor
/// --version` (a process start of the same binary): the one-shot command should cost
/// the library round trip plus about one process start.
fn send_wait(client: &Client, tasks: usize) {
    let mut send = Vec::with_capacity(tasks);
    let mut start = Vec::with_capacity(tasks);
    let conductor = env!("CARGO_BIN_EXE_conductor");
    for i in 0..tasks {
        let t = Instant::now();
        let out = Command::new(conductor)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .expect("conductor --version");
        assert!(out.success());
        start.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let out = Command::new(conductor)
            .args(["send", "0", &format!("send {i}"), "--wait"])
            .env("CONDUCTOR_HOME", client.root().path())
            .stdout(Stdio::null())
            .status()
            .expect("conductor send --wait");
        assert!(out.success());
        send.push(t.elapsed().as_secs_f64() * 1e3);
    }
    summary("process start (--version)", start);
    summary("send --wait (process)", send);
}

/// One orchestrator thread per worker, each feeding its worker as fast as it finishes.
fn throughput(client: &Client, workers: u32, tasks: usize) -> f64 {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..workers {
            let next = Arc::clone(&next);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tasks {
                    break;
                }
                let id = TaskId::Text(format!("tp{workers}-{i}"));
                client
                    .write_task(Slot(w), &Task::new("x").with_id(id.clone()))
                    .unwrap();
                assert!(client.wait_for_result(Slot(w), &id, BOUND).unwrap().success);
            });
        }
    });
    let rate = tasks as f64 / t0.elapsed().as_secs_f64();
    println!(
        "throughput, {workers} worker(s){:<9} {rate:>8.0} tasks/s  ({tasks} tasks)",
        ""
    );
    rate
}

fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 (indices 11 and 12 after the state field).
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn proc_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn idle_cost(pid: u32, secs: u64) {
    let ticks_per_sec = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap_or(100) as f64;
    let before = proc_cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(secs)); // measuring an interval, not synchronizing
    let used = (proc_cpu_ticks(pid) - before) as f64 / ticks_per_sec;
    println!(
        "idle worker over {secs}s           cpu={:.3}% ({used:.3}s)  rss={} KiB",
        used / secs as f64 * 100.0,
        proc_rss_kib(pid)
    );
}

/// What the root's filesystem charges for the metadata steps the protocol uses, so a
/// missed target can be traced to the disk rather than guessed at.
fn fs_costs(dir: &Path) {
    use std::fs;
    let n = 200;
    let mut create = Vec::new();
    let mut replace = Vec::new();
    let mut replace_kept = Vec::new();
    let mut fsync = Vec::new();
    let target = dir.join("probe.json");
    fs::write(&target, [b'x'; 200]).unwrap();
    for i in 0..n {
        let tmp = dir.join(format!("probe.{i}.tmp"));
        let t = Instant::now();
        fs::write(&tmp, [b'y'; 200]).unwrap();
        create.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        fs::File::open(&tmp).unwrap().sync_all().unwrap();
        fsync.push(t.elapsed().as_secs_f64() * 1e3);
        let keep = dir.join(format!("probe.{i}.keep"));
        let t = Instant::now();
        if i % 2 == 0 {
            fs::rename(&tmp, &target).unwrap();
            replace.push(t.elapsed().as_secs_f64() * 1e3);
        } else {
            fs::hard_link(&target, &keep).unwrap();
            fs::rename(&tmp, &target).unwrap();
            replace_kept.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    summary("fs: create+write 200 B", create);
    summary("fs: fsync 200 B file", fsync);
    summary("fs: rename over (frees old)", replace);
    summary("fs: rename over (old linked)", replace_kept);
}

/// What starting a process costs here: posix_spawn (what std uses without pre_exec)
/// against fork (what a pre_exec hook such as PR_SET_PDEATHSIG forces).
fn spawn_costs() {
    use std::os::unix::process::CommandExt;
    let mut plain = Vec::new();
    let mut forked = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let mut c = Command::new("/bin/true").spawn().unwrap();
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        c.wait().unwrap();
        let mut cmd = Command::new("/bin/true");
        // SAFETY: the hook does nothing.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
        let t = Instant::now();
        let mut c = cmd.spawn().unwrap();
        forked.push(t.elapsed().as_secs_f64() * 1e3);
        c.wait().unwrap();
    }
    summary("spawn /bin/true (posix_spawn)", plain);
    summary("spawn /bin/true (fork+exec)", forked);
}

fn main() {
    if std::env::var_os(AGENT_MODE).is_some() {
        return agent_main();
    }
    if let Some(dir) = std::env::var_os(FLOOR_MODE) {
        return floor_worker_main(Path::new(&dir));
    }
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let tasks: usize = flag("--tasks").and_then(|v| v.parse().ok()).unwrap_or(1000);
    let idle_secs: u64 = flag("--idle-secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // Where the temp roots go (e.g. /dev/shm to take the disk out of the picture).
    let base = flag("--base")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tempdir = || tempfile::tempdir_in(&base).unwrap();
    // Pickup and round trips beside the floor, nothing else (to compare trees).
    let latency_only = args.iter().any(|a| a == "--latency-only");
    let agent_dir = tempdir();
    if args.iter().any(|a| a == "--c-agent") {
        // Read by this process and, inherited, by the floor worker it starts.
        std::env::set_var(AGENT_PROGRAM, build_c_agent(agent_dir.path()));
    }

    let dir = tempdir();
    let client = Client::new(Root::new(dir.path().join("root")));
    client.init_queue().unwrap();
    println!(
        "conductor pipeline benchmark: {tasks} tasks per measure, {} CPUs, roots under {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        base.display()
    );

    if !latency_only {
        fs_costs(dir.path());
        spawn_costs();
    }
    {
        let workers = start_workers(&client, 1, dir.path());
        if idle_secs > 0 {
            idle_cost(workers.children[0].id(), idle_secs);
        }
        latency(&client, tasks);
        floor_latency(&base, tasks);
        if latency_only {
            return;
        }
        send_wait(&client, tasks.min(200));
        throughput(&client, 1, tasks);
    }
    for n in [2, 8] {
        let dir = tempdir();
        let client = Client::new(Root::new(dir.path().join("root")));
        client.init_queue().unwrap();
        let _workers = start_workers(&client, n, dir.path());
        throughput(&client, n, tasks);
    }
    for n in [2, 8] {
        let dir = tempdir();
        let client = Client::new(Root::new(dir.path().join("root")));
        client.init_queue().unwrap();
        let _workers = start_workers(&client, n, dir.path());
        queue_throughput(&client, n, tasks);
    }
    let dir = tempdir();
    claim_latency(&Root::new(dir.path().join("root")), 1000, 200);
}

/// Submit `tasks` to the shared queue (3 keys, mixed priorities) and wait until every
/// result is in: submit → result throughput with `workers` pulling.
fn queue_throughput(client: &Client, workers: u32, tasks: usize) {
    let queue = conductor::queue::Queue::new(client.root().clone());
    let t0 = Instant::now();
    let ids: Vec<TaskId> = (0..tasks)
        .map(|i| {
            let mut t = Task::new("x").with_id(format!("q{workers}-{i}").as_str());
            t.key = Some(format!("key{}", i % 3));
            t.priority = Some((i % 10) as u8);
            queue.submit(&t).unwrap()
        })
        .collect();
    let submitted = t0.elapsed();
    for id in &ids {
        assert!(queue.wait_for_result(id, BOUND).unwrap().success);
    }
    let rate = tasks as f64 / t0.elapsed().as_secs_f64();
    println!(
        "queue, {workers} worker(s){:<14} {rate:>8.0} tasks/s  ({tasks} tasks, 3 keys; submitting took {:.0} ms)",
        "",
        submitted.as_secs_f64() * 1e3
    );
}

/// With `pending` tasks queued (no worker running), time the worker's claim step:
/// scan, order, take the key lock, rename into running.json.
fn claim_latency(root: &Root, pending: usize, claims: usize) {
    let client = Client::new(root.clone());
    client.init_queue().unwrap();
    let w = client.create_worker(Slot(0)).unwrap();
    let queue = conductor::queue::Queue::new(root.clone());
    for i in 0..pending {
        let mut t = Task::new("x").with_id(format!("c{i}").as_str());
        t.key = Some(format!("key{}", i % 10));
        t.priority = Some((i % 10) as u8);
        queue.submit(&t).unwrap();
    }
    let config = conductor::Config::default();
    let mut samples = Vec::new();
    for _ in 0..claims {
        let t = Instant::now();
        let take_lock = || match conductor::dirlock::DirLock::try_acquire_reusable(
            &w.lock_dir(),
            &config.lock_options(),
        )? {
            conductor::dirlock::Acquire::Acquired(l) => Ok(Some(l)),
            conductor::dirlock::Acquire::Held(_) => Ok(None),
        };
        let conductor::queue::Claim::Taken(claim) = conductor::queue::claim_next(
            root,
            &w,
            &config,
            &|_| conductor::queue::Serve::Now,
            take_lock,
        )
        .unwrap() else {
            panic!("a task to claim");
        };

        samples.push(t.elapsed().as_secs_f64() * 1e3);
        drop(claim); // releases the key lock
        std::fs::remove_file(w.running()).unwrap();
    }
    summary(
        &format!("claim, {}-{pending} pending", pending - claims),
        samples,
    );
}

/// Blocking reads of one inotify instance watching one directory: the names of the
/// entries the mask's events were about, in order.
struct DirEvents {
    fd: std::os::fd::OwnedFd,
    pending: std::collections::VecDeque<String>,
}

impl DirEvents {
    fn watch(dir: &Path, mask: u32) -> DirEvents {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain syscalls on a descriptor we own; the path is NUL-terminated.
        unsafe {
            let fd = nix::libc::inotify_init1(nix::libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1");
            let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
            assert!(nix::libc::inotify_add_watch(fd, c.as_ptr(), mask) >= 0);
            DirEvents {
                fd: std::os::fd::OwnedFd::from_raw_fd(fd),
                pending: Default::default(),
            }
        }
    }

    fn next_name(&mut self) -> String {
        use std::os::fd::AsRawFd;
        let header = std::mem::size_of::<nix::libc::inotify_event>();
        while self.pending.is_empty() {
            let mut buf = [0u8; 4096];
            // SAFETY: reading into a buffer we own, of the length we pass.
            let n =
                unsafe { nix::libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            assert!(n > 0, "inotify read");
            let mut at = 0;
            while at + header <= n as usize {
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
                let name = &buf[at + header..at + header + len];
                let name = name.split(|b| *b == 0).next().unwrap_or_default();
                self.pending
                    .push_back(String::from_utf8_lossy(name).into_owned());
                at += header + len;
            }
        }
        self.pending.pop_front().unwrap()
    }
}

/// The floor a worker's pickup is measured against: the least a file-fed worker can
/// do. It waits on inotify for `task.json` to be renamed into its directory, claims it
/// by one rename, runs the same agent with the file as stdin (std's spawn), and
/// publishes the agent's output by a rename. No lock, no status, no records.
fn floor_worker_main(dir: &Path) {
    let mut events = DirEvents::watch(dir, nix::libc::IN_MOVED_TO);
    let me = agent_program();
    std::fs::write(dir.join(".ready.tmp"), "").unwrap();
    std::fs::rename(dir.join(".ready.tmp"), dir.join("ready")).unwrap();
    loop {
        if events.next_name() != "task.json" {
            continue;
        }
        let running = dir.join("running");
        std::fs::rename(dir.join("task.json"), &running).unwrap();
        let out = Command::new(&me)
            .env(AGENT_MODE, "1")
            .env_remove(FLOOR_MODE)
            .stdin(std::fs::File::open(&running).unwrap())
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let tmp = dir.join(".result.tmp");
        std::fs::write(&tmp, &out.stdout).unwrap();
        std::fs::rename(&tmp, dir.join("result")).unwrap();
    }
}

/// Pickup and round trip of the floor worker, measured as `latency` measures
/// conductor's: from the task file's rename to the agent's first instant, and to the
/// result's rename seen by a watcher armed beforehand.
fn floor_latency(base: &Path, tasks: usize) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let mut results = DirEvents::watch(dir.path(), nix::libc::IN_MOVED_TO);
    let worker = Command::new(std::env::current_exe().unwrap())
        .env(FLOOR_MODE, dir.path())
        .env_remove(AGENT_MODE)
        .spawn()
        .expect("start the floor worker");
    let _workers = Workers {
        children: vec![worker],
    };
    while results.next_name() != "ready" {}
    let mut pickup = Vec::with_capacity(tasks);
    let mut trip = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let tmp = dir.path().join(".task.tmp");
        std::fs::write(&tmp, format!("floor {i}")).unwrap();
        std::fs::rename(&tmp, dir.path().join("task.json")).unwrap();
        let linked = Instant::now();
        let written_ns = now_ns();
        while results.next_name() != "result" {}
        trip.push(linked.elapsed().as_secs_f64() * 1e3);
        let out = std::fs::read_to_string(dir.path().join("result")).unwrap();
        let started: u128 = out.lines().next().unwrap().parse().unwrap();
        pickup.push((started as f64 - written_ns as f64) / 1e6);
    }
    summary("floor: pickup", pickup);
    summary("floor: trip (task → result)", trip);
}
