//! The scale benchmark: 100 to 1,000 slots, as one many-slot worker and as one
//! process per slot — start-up, idle cost, memory, one task to every slot, and the
//! wake-ups caused by listing `queue/pending`. The timed rounds deliver as the original
//! clients do (temp file, rename); one more round goes through `Client::write_task`, for
//! what a send through the library costs at that size.
//!
//! `cargo bench --bench scale` (options after `--`: `--sizes 100,500,1000`,
//! `--single-max 500`, `--idle-secs 10`, `--rounds 3`, `--base DIR`). The agent is
//! `cat`. Single-slot runs above `--single-max` slots are skipped (on 2 cores a
//! thousand worker processes measure the machine, not the worker).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use conductor::watch::WatchMode;
use conductor::{Client, Root, Slot, Task, TaskId, WorkerState};

const BOUND: Duration = Duration::from_secs(300);

struct Procs {
    children: Vec<Child>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

fn worker(client: &Client, slots: &str, project: &Path, events: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_conductor-worker"))
        .arg(slots)
        .arg(project)
        .args(["--agent", "cat", "-q"])
        .env("CONDUCTOR_HOME", client.root().path())
        .env("CONDUCTOR_DEBUG_WATCH_EVENTS", events)
        .env_remove("CONDUCTOR_WORKER")
        .stdout(Stdio::null())
        .spawn()
        .expect("start conductor-worker")
}

/// Start the workers and wait until every slot says `idle` with its worker's pid.
fn start(client: &Client, n: u32, many: bool, project: &Path, events: &Path) -> (Procs, f64) {
    let t0 = Instant::now();
    let children: Vec<Child> = if many {
        vec![worker(client, &format!("0-{}", n - 1), project, events)]
    } else {
        (0..n)
            .map(|i| {
                worker(
                    client,
                    &i.to_string(),
                    project,
                    &events.with_extension(i.to_string()),
                )
            })
            .collect()
    };
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let procs = Procs { children };
    let mut waiting: Vec<u32> = (0..n).collect();
    let deadline = Instant::now() + BOUND;
    while !waiting.is_empty() {
        waiting.retain(|&i| {
            let want = pids[if many { 0 } else { i as usize }];
            !matches!(client.read_status(Slot(i)), Ok(Some(st))
                if st.status == WorkerState::Idle && st.worker_pid == Some(want))
        });
        assert!(
            Instant::now() < deadline,
            "{} slots never came up",
            waiting.len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (procs, t0.elapsed().as_secs_f64())
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(end) = stat.rfind(')') else { return 0 };
    let f: Vec<&str> = stat[end + 2..].split_whitespace().collect();
    f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The most memory `pid` has held resident since it started (the kernel's high-water
/// mark): after a burst, the burst's peak.
fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The fan-out's floor: `n` `cat`s of a small file started at once by `xargs -P n`
/// (the names on its stdin), what forking and exec'ing the agents alone costs.
fn xargs_floor(dir: &Path, n: u32) -> f64 {
    use std::io::Write;
    let file = dir.join("floor-prompt.txt");
    std::fs::write(&file, "x\n").unwrap();
    let names = format!("{}\n", file.display()).repeat(n as usize);
    let t = Instant::now();
    let mut xargs = Command::new("xargs")
        .args(["-P", &n.to_string(), "-n1", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn xargs");
    xargs
        .stdin
        .take()
        .unwrap()
        .write_all(names.as_bytes())
        .unwrap();
    assert!(xargs.wait().unwrap().success());
    t.elapsed().as_secs_f64()
}

/// CPU of all `pids` over `secs`, in % of one core.
fn cpu_over(pids: &[u32], secs: f64) -> f64 {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let before: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
    std::thread::sleep(Duration::from_secs_f64(secs)); // measuring an interval
    let after: u64 = pids.iter().map(|&p| cpu_ticks(p)).sum();
    (after - before) as f64 / hz / secs * 100.0
}

/// Watch events all workers have counted so far (their debug files).
fn events(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter_map(|v| v["events"].as_u64())
        .sum()
}

/// One counter file's count and last path, if written yet.
fn counter(file: &Path) -> Option<(u64, String)> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    Some((
        v["events"].as_u64()?,
        v["last"].as_str().unwrap_or("").to_string(),
    ))
}

/// Make a directory in `keys/` (one event for every worker) and wait until every
/// counter has counted it: its count grew and its last event names the new directory
/// (a native watcher) or `keys/` itself (a poller, which sees only that it changed).
/// The counters, written at most every 50 ms, are then up to date. Returns their sum.
fn settled_events(client: &Client, files: &[PathBuf], name: &str) -> u64 {
    let keys = client.root().keys_dir();
    let sentinel = keys.join(name);
    let before: Vec<u64> = files
        .iter()
        .map(|f| counter(f).map_or(0, |(n, _)| n))
        .collect();
    std::fs::create_dir(&sentinel).unwrap();
    let named = [sentinel.display().to_string(), keys.display().to_string()];
    let deadline = Instant::now() + BOUND;
    loop {
        let all = files
            .iter()
            .zip(&before)
            .all(|(f, &was)| counter(f).is_some_and(|(n, last)| n > was && named.contains(&last)));
        if all {
            return quiet_events(files);
        }
        assert!(
            Instant::now() < deadline,
            "not every counter saw {}",
            sentinel.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The counters' sum once it has not changed for longer than the slowest poll
/// interval (1 s): a poller may see one change of `keys/` as two, a poll apart.
fn quiet_events(files: &[PathBuf]) -> u64 {
    const QUIET: Duration = Duration::from_millis(1500);
    let deadline = Instant::now() + BOUND;
    let (mut sum, mut since) = (events(files), Instant::now());
    while since.elapsed() < QUIET {
        assert!(
            Instant::now() < deadline,
            "the event counters never settled"
        );
        std::thread::sleep(Duration::from_millis(50));
        let now = events(files);
        if now != sum {
            (sum, since) = (now, Instant::now());
        }
    }
    sum
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// How a round delivers its tasks.
#[derive(Clone, Copy, PartialEq)]
enum Delivery {
    /// As the original clients do: write a temp file, rename it into the inbox.
    Raw,
    /// Through the library (`Client::write_task`): checks, id registry, durable.
    Client,
}

/// One task to every slot; seconds until every result is in, each task's
/// write → result-file latency in ms, and how long each delivery took in ms.
///
/// Results are awaited as an orchestrator would: woken by the library's watcher on
/// every slot's `results/`, with a full look every 200 ms as a safety net. (Polling a
/// thousand files every millisecond took most of a core from the worker measured.)
fn one_task_each(
    client: &Client,
    n: u32,
    round: usize,
    how: Delivery,
) -> (f64, Vec<f64>, Vec<f64>) {
    let dirs: Vec<PathBuf> = (0..n)
        .map(|i| client.root().worker(Slot(i)).results_dir())
        .collect();
    let (tx, changed) = crossbeam_channel::unbounded::<Option<PathBuf>>();
    let on_change: conductor::watch::OnChange =
        Arc::new(move |p: Option<&Path>| drop(tx.send(p.map(Path::to_path_buf))));
    let _watcher =
        conductor::watch::DirWatcher::watch_changes(&dirs, &[], &[], WatchMode::Auto, on_change)
            .expect("watch results/");
    let t0 = Instant::now();
    let mut written = HashMap::with_capacity(n as usize);
    let mut sends = Vec::with_capacity(n as usize);
    for i in 0..n {
        let id = TaskId::Text(format!("r{round}-{i}"));
        let task = Task::new("x").with_id(id.clone());
        let sent = Instant::now();
        match how {
            Delivery::Raw => {
                let dir = client.root().worker(Slot(i)).dir;
                let tmp = dir.join(format!(".task.{round}.tmp"));
                std::fs::write(&tmp, serde_json::to_vec(&task).unwrap()).unwrap();
                std::fs::rename(&tmp, dir.join("task.json")).unwrap();
            }
            Delivery::Client => {
                client.write_task(Slot(i), &task).expect("send");
            }
        }
        sends.push(sent.elapsed().as_secs_f64() * 1e3);
        let result = client.root().worker(Slot(i)).result_for(&id);
        written.insert(result, Instant::now());
    }
    let mut latencies = Vec::with_capacity(n as usize);
    let deadline = Instant::now() + BOUND;
    let mut look_all = Instant::now() + SAFETY_LOOK;
    while !written.is_empty() {
        let arrived: Vec<PathBuf> = match changed.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(p)) => vec![p],
            Ok(None) => written.keys().cloned().collect(),
            Err(_) => Vec::new(),
        };
        let mut check = arrived;
        check.extend(changed.try_iter().flatten());
        if Instant::now() >= look_all {
            check.extend(written.keys().cloned());
            look_all = Instant::now() + SAFETY_LOOK;
        }
        for p in check {
            if written.contains_key(&p) && p.exists() {
                let at = written.remove(&p).unwrap();
                latencies.push(at.elapsed().as_secs_f64() * 1e3);
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} results missing",
            written.len()
        );
    }
    (t0.elapsed().as_secs_f64(), latencies, sends)
}

/// How often the result wait looks at every missing result, events or not.
const SAFETY_LOOK: Duration = Duration::from_millis(200);

struct Opts {
    idle_secs: f64,
    rounds: usize,
    base: PathBuf,
}

fn run(n: u32, many: bool, o: &Opts) {
    let dir = tempfile::tempdir_in(&o.base).unwrap();
    let client = Client::new(Root::new(dir.path().join("root")));
    client.init_queue().unwrap();
    let events_file = dir.path().join("events.json");
    let (procs, up) = start(&client, n, many, dir.path(), &events_file);
    let pids: Vec<u32> = procs.children.iter().map(Child::id).collect();
    let files: Vec<PathBuf> = if many {
        vec![events_file.clone()]
    } else {
        (0..n)
            .map(|i| events_file.with_extension(i.to_string()))
            .collect()
    };
    let kind = if many {
        "one process"
    } else {
        "a process per slot"
    };
    std::thread::sleep(Duration::from_secs(1)); // let start-up writes settle before measuring
    let idle = cpu_over(&pids, o.idle_secs);
    let rss: u64 = pids.iter().map(|&p| rss_kib(p)).sum();

    // Wake-ups while something lists queue/pending 100 times a second.
    // What a sentinel itself costs (a poller sees one mkdir as two changes of keys/).
    let first = settled_events(&client, &files, "first");
    let before = settled_events(&client, &files, "second");
    let per_sentinel = before - first;
    let stop = Arc::new(AtomicBool::new(false));
    let lister = {
        let (stop, pending) = (stop.clone(), client.root().queue_pending());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::read_dir(&pending).map(|d| d.count());
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let listed_cpu = cpu_over(&pids, 5.0);
    stop.store(true, Ordering::Relaxed);
    lister.join().unwrap();
    let woke = (settled_events(&client, &files, "third") - before).saturating_sub(per_sentinel);

    let mut totals = Vec::new();
    let mut floors = Vec::new();
    let mut lat = Vec::new();
    for round in 0..o.rounds {
        floors.push(xargs_floor(dir.path(), n));
        let (t, l, _) = one_task_each(&client, n, round, Delivery::Raw);
        totals.push(t);
        lat.extend(l);
    }
    let peak: u64 = pids.iter().map(|&p| peak_rss_kib(p)).sum();
    // Once more through the library, for what a send costs a program at this size.
    let (via_client, _, mut sends) = one_task_each(&client, n, o.rounds, Delivery::Client);
    sends.sort_by(|a, b| a.partial_cmp(b).unwrap());
    totals.sort_by(|a, b| a.partial_cmp(b).unwrap());
    floors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{n:>5} slots, {kind:<18} all idle {up:>6.2} s | idle CPU {idle:>7.2} % | RSS {:>7.1} MiB | \
         listing pending 100/s: {woke} events, CPU {listed_cpu:.2} % | one task each: all results \
         p50 {:.2} s (rounds {:?}) = {:.2}× the xargs -P{n} floor ({:.2} s), peak RSS {:.1} MiB, \
         per task p50 {:.0} ms p99 {:.0} ms | through \
         Client::write_task: all results {via_client:.2} s, a send p50 {:.2} ms p99 {:.2} ms",
        rss as f64 / 1024.0,
        percentile(&totals, 0.5),
        totals.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>(),
        percentile(&totals, 0.5) / percentile(&floors, 0.5),
        percentile(&floors, 0.5),
        peak as f64 / 1024.0,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&sends, 0.5),
        percentile(&sends, 0.99),
    );
    drop(procs);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<u32> = flag("--sizes")
        .unwrap_or_else(|| "100,500,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes takes numbers"))
        .collect();
    let single_max: u32 = flag("--single-max")
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let o = Opts {
        idle_secs: flag("--idle-secs")
            .and_then(|v| v.parse().ok())
            .unwrap_or(10.0),
        rounds: flag("--rounds").and_then(|v| v.parse().ok()).unwrap_or(3),
        base: flag("--base")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    };
    let limits = ["max_user_instances", "max_user_watches"].map(|f| {
        std::fs::read_to_string(format!("/proc/sys/fs/inotify/{f}"))
            .map(|s| format!("{f}={}", s.trim()))
            .unwrap_or_default()
    });
    println!(
        "conductor scale benchmark: {} CPUs, roots under {}, inotify {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        o.base.display(),
        limits.join(" ")
    );
    for &n in &sizes {
        run(n, true, &o);
    }
    for &n in &sizes {
        if n > single_max {
            println!("{n:>5} slots, a process per slot: skipped (above --single-max {single_max})");
            continue;
        }
        run(n, false, &o);
    }
}
