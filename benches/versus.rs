//! conductor beside the fork+exec floor and task-spooler: N trivial tasks at parallelism 2,
//! each as a multiple of `xargs -P2` running the same command (issue 23).
//!
//! `cargo bench --bench versus -- [--tasks 200] [--rounds 5] [--base /dev/shm] [--ext4]`
//! (`CONDUCTOR_BENCH_BINS=DIR`: another build's `conductor` binaries, from `DIR`)
//!
//! `--ext4`: the base is a journaled ext4 the bench makes itself (`mkfs.ext4` defaults
//! on a 2 GiB image file under `--base`, loop-mounted; needs root), unmounted and
//! removed at the end — a user's disk, where durability costs journal commits. Where it
//! cannot be made the bench says why and uses `--base` as it is.
//!
//! Every task is `cat` of a small prompt. The rows, run interleaved in each round so the
//! machine's mood hits all alike:
//! - `xargs -P2`: `xargs -P2 -n1 cat FILE…` — what forking and exec'ing the agent costs;
//! - `tsp` (task-spooler, if installed): `tsp -S 2`, one `tsp cat FILE` per task, then a
//!   wait for every job;
//! - `conductor run --workers 2`: the one-shot command, its two workers included;
//! - `conductor run --root R`: the same on a durable root (`fsync` on, as `init` makes
//!   it): what the group commit is for;
//! - `conductor submit` ×N: N `conductor submit` processes into a root two running
//!   workers serve, then a wait for every result (workers started before the clock);
//! - `conductor submit --batch`: the same, the N tasks from one `submit --batch -f` process.
//!
//! - two references for the `submit` row, which starts a process per task one after
//!   another: N `true` processes and N `conductor --version` processes, each run to its
//!   end before the next, as the submit loop runs its submits. No client that starts a
//!   process per task can beat the first; no `conductor` subcommand the second.
//!
//! Medians over the rounds, and each as a ratio of the floor's median.
//!
//! `--syscalls [--tasks 50]`: instead, the system calls of `conductor run` a task (the
//! agent's own left out; `strace -f -ff` of runs of 10 and N tasks, the difference):
//! calls, `openat`, failing `openat`, by name and by file (issue 39.4).
//!
//! `--syscalls-batch [--tasks 200]`: instead, the system calls of one `submit --batch`
//! process a task, into a root two live workers serve (`strace -ff` of the submitter
//! for batches of 10 and N, the difference; issue 39.3).
//!
//! `--syscalls-queue [--tasks 50]`: the same census of the queue's path: two
//! `conductor-worker`s under strace serve a `submit --batch` of 10 and of N tasks on a
//! durable root; the workers' calls a task (issue 39.3).

#[path = "census/mod.rs"]
mod census;
#[path = "census/queue.rs"]
mod census_queue;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use conductor::queue::Queue;
use conductor::{Root, TaskId};

/// This build's binary `name`, or another build's from the directory
/// `CONDUCTOR_BENCH_BINS` names (to compare two trees with one harness).
fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("bench path");
    // target/<profile>/deps/versus-… → target/<profile>/<name>
    let dir = match std::env::var_os("CONDUCTOR_BENCH_BINS") {
        Some(other) => PathBuf::from(other),
        None => exe
            .parent()
            .and_then(Path::parent)
            .expect("target dir")
            .to_path_buf(),
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build --release`)",
        path.display()
    );
    path
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_quiet(cmd: &mut Command) {
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(status.success(), "{cmd:?} failed: {status}");
}

/// `n` prompt files in `dir`, and a file listing the prompts one per line.
fn prompts(dir: &Path, n: usize) -> (Vec<PathBuf>, PathBuf) {
    let files: Vec<PathBuf> = (0..n)
        .map(|i| {
            let p = dir.join(format!("p{i}.txt"));
            std::fs::write(&p, format!("task {i}\n")).unwrap();
            p
        })
        .collect();
    let list = dir.join("prompts.txt");
    let lines: String = (0..n).map(|i| format!("task {i}\n")).collect();
    std::fs::write(&list, lines).unwrap();
    (files, list)
}

/// The file names go to `xargs` on its standard input, one per line: given as arguments
/// after `cat` they would be `cat`'s own arguments, one `cat` of every file (the first
/// version of this bench did that and reported a floor of 9 ms for 200 "tasks").
fn floor(files: &[PathBuf]) -> Duration {
    use std::io::Write;
    let names: String = files.iter().map(|f| format!("{}\n", f.display())).collect();
    let t = Instant::now();
    let mut xargs = Command::new("xargs")
        .args(["-P2", "-n1", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xargs");
    xargs
        .stdin
        .take()
        .expect("xargs stdin")
        .write_all(names.as_bytes())
        .expect("feed xargs");
    let status = xargs.wait().expect("xargs");
    assert!(status.success(), "xargs failed: {status}");
    t.elapsed()
}

fn task_spooler(dir: &Path, files: &[PathBuf]) -> Duration {
    let socket = dir.join("tsp.socket");
    let tsp = || {
        let mut c = Command::new("tsp");
        c.env("TS_SOCKET", &socket)
            .env("TS_MAXFINISHED", "100000")
            .env("TMPDIR", dir);
        c
    };
    run_quiet(tsp().args(["-S", "2"]));
    let t = Instant::now();
    let mut ids = Vec::new();
    for f in files {
        let out = tsp().arg("cat").arg(f).output().expect("tsp");
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    for id in &ids {
        run_quiet(tsp().args(["-w", id]));
    }
    let took = t.elapsed();
    let _ = tsp().arg("-K").status();
    took
}

/// As a user runs it: a private root (under `dir`, through `TMPDIR`), deleted after.
fn conductor_run(dir: &Path, list: &Path) -> Duration {
    let t = Instant::now();
    run_quiet(
        Command::new(bin("conductor"))
            .args(["run", "--workers", "2", "--agent", "cat", "--json"])
            .arg("-f")
            .arg(list)
            .env("TMPDIR", dir)
            .current_dir(dir),
    );
    t.elapsed()
}

/// `conductor run` on a durable root `R` made fresh under `dir` (fsyncs on).
fn conductor_run_durable(dir: &Path, list: &Path) -> Duration {
    let root = dir.join("durable-root");
    conductor::Client::new(Root::new(&root))
        .init_queue()
        .unwrap();
    let t = Instant::now();
    run_quiet(
        Command::new(bin("conductor"))
            .args([
                "run",
                "--workers",
                "2",
                "--agent",
                "cat",
                "--json",
                "--root",
            ])
            .arg(&root)
            .arg("-f")
            .arg(list)
            .current_dir(dir),
    );
    t.elapsed()
}

/// A journaled ext4 made for this run: an image file, loop-mounted.
struct Ext4 {
    mount: PathBuf,
    image: PathBuf,
}

impl Ext4 {
    /// Make it under `base`, or say why not.
    fn make(base: &Path) -> Result<Ext4, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("mounting an image needs root".into());
        }
        let image = base.join(format!("versus-ext4-{}.img", std::process::id()));
        let mount = base.join(format!("versus-ext4-{}", std::process::id()));
        let sh = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let f = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        f.set_len(2 << 30).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        let made = sh(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image)).and_then(|()| {
            sh(Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mount))
        });
        if let Err(e) = made {
            let _ = std::fs::remove_file(&image);
            let _ = std::fs::remove_dir(&mount);
            return Err(e);
        }
        Ok(Ext4 { mount, image })
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = std::fs::remove_dir(&self.mount);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// N tasks into a root two workers serve, until every result: N `submit` processes, or
/// one `submit --batch -f LIST` (`batch`).
fn conductor_submit(dir: &Path, n: usize, batch: Option<&Path>) -> Duration {
    let root_dir = dir.join(if batch.is_some() {
        "batch-root"
    } else {
        "submit-root"
    });
    let root = Root::new(&root_dir);
    conductor::Client::new(root.clone()).init_queue().unwrap();
    let workers = start_workers(dir, &root);
    let t = Instant::now();
    let mut ids = Vec::new();
    if let Some(list) = batch {
        let out = Command::new(bin("conductor"))
            .args(["submit", "--batch", "-f"])
            .arg(list)
            .arg("--root")
            .arg(&root_dir)
            .output()
            .expect("submit --batch");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ids.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from),
        );
    }
    for i in (0..n).filter(|_| batch.is_none()) {
        let out = Command::new(bin("conductor"))
            .args(["submit", &format!("task {i}"), "--root"])
            .arg(&root_dir)
            .output()
            .expect("submit");
        assert!(out.status.success());
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    let queue = Queue::new(root);
    for id in &ids {
        queue
            .wait_for_result(&TaskId::from(id.as_str()), Duration::from_secs(60))
            .expect("result");
    }
    let took = t.elapsed();
    stop_workers(workers);
    took
}

/// Two `cat` workers serving `root`, each serving before this returns.
fn start_workers(dir: &Path, root: &Root) -> Vec<std::process::Child> {
    let workers: Vec<_> = (0..2)
        .map(|i| {
            Command::new(bin("conductor-worker"))
                .arg(i.to_string())
                .arg(dir)
                .args(["--agent", "cat", "--root"])
                .arg(root.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("worker")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, w) in workers.iter().enumerate() {
        let slot = conductor::Slot(i as u32);
        while !conductor::pool::serving(root, slot, w.id()) {
            assert!(Instant::now() < deadline, "worker {i} did not start");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    workers
}

fn stop_workers(workers: Vec<std::process::Child>) {
    for mut w in workers {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(w.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = w.wait();
    }
}

/// `--syscalls-batch`: the calls of one `submit --batch` process a task, into a root two
/// live `cat` workers serve (under `base`): `strace` of the submitter alone (not its
/// workers) for batches of 10 and `n`, the difference over `n` − 10 (issue 39.3).
fn syscalls_batch(base: &Path, n: usize) {
    assert!(n > 10, "--tasks must be more than 10 with --syscalls-batch");
    let dir = tempfile::tempdir_in(base).unwrap();
    let census_of = |tasks: usize| {
        let work = dir.path().join(format!("batch-{tasks}"));
        std::fs::create_dir_all(&work).unwrap();
        let root = Root::new(work.join("root"));
        conductor::Client::new(root.clone()).init_queue().unwrap();
        let workers = start_workers(&work, &root);
        let census = census::census_of_batch(&bin("conductor"), &work, root.path(), tasks);
        stop_workers(workers);
        census
    };
    let few = census_of(10);
    let many = census_of(n);
    println!(
        "`conductor submit --batch` into a root 2 workers serve, under {}, strace -ff of \
         the submitter, ({n} − 10 tasks) / {}:",
        base.display(),
        n - 10
    );
    print!("{}", many.per_task(&few, (n - 10) as u64));
}

/// `n` processes of `program`, one after another, each waited for (as the submit loop
/// waits for each `conductor submit`).
fn serial_starts(program: &Path, args: &[&str], n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        let out = Command::new(program).args(args).output().expect("spawn");
        assert!(out.status.success(), "{} failed", program.display());
    }
    t.elapsed()
}

/// `--syscalls`: the census of a task on `run`'s path, under `base`.
fn syscalls(base: &Path, n: usize) {
    assert!(n > 10, "--tasks must be more than 10 with --syscalls");
    let dir = tempfile::tempdir_in(base).unwrap();
    let conductor = bin("conductor");
    let few = census::census_of_run(&conductor, "cat", dir.path(), 10);
    let many = census::census_of_run(&conductor, "cat", dir.path(), n);
    println!(
        "`conductor run --workers 2 --agent cat` under {}, strace -f -ff, ({n} − 10 tasks) / {}:",
        base.display(),
        n - 10
    );
    print!("{}", many.per_task(&few, (n - 10) as u64));
}

/// `--syscalls-queue`: the census of a queued task on the workers' side, under `base`.
fn syscalls_queue(base: &Path, n: usize) {
    assert!(n > 10, "--tasks must be more than 10 with --syscalls-queue");
    let dir = tempfile::tempdir_in(base).unwrap();
    let bins = bin("conductor");
    let bins = bins.parent().expect("bin dir");
    let few = census_queue::census_of_queue(bins, "cat", dir.path(), 10);
    let many = census_queue::census_of_queue(bins, "cat", dir.path(), n);
    println!(
        "`submit --batch` to 2 `conductor-worker --agent cat` on a durable root under {}, \
         the workers under strace -f -ff, ({n} − 10 tasks) / {}:",
        base.display(),
        n - 10
    );
    print!("{}", many.per_task(&few, (n - 10) as u64));
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = flag("--tasks").and_then(|v| v.parse().ok()).unwrap_or(200);
    let rounds: usize = flag("--rounds").and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut base = flag("--base")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let ext4 = if args.iter().any(|a| a == "--ext4") {
        match Ext4::make(&base) {
            Ok(e) => {
                base = e.mount.clone();
                Some(e)
            }
            Err(why) => {
                println!(
                    "no journaled ext4 of our own ({why}): using {}",
                    base.display()
                );
                None
            }
        }
    } else {
        None
    };
    if args.iter().any(|a| a == "--syscalls-batch") {
        let n = flag("--tasks").and_then(|v| v.parse().ok()).unwrap_or(200);
        syscalls_batch(&base, n);
        return;
    }
    if args.iter().any(|a| a == "--syscalls-queue") {
        let n = flag("--tasks").and_then(|v| v.parse().ok()).unwrap_or(50);
        syscalls_queue(&base, n);
        return;
    }
    if args.iter().any(|a| a == "--syscalls") {
        let n = flag("--tasks").and_then(|v| v.parse().ok()).unwrap_or(50);
        syscalls(&base, n);
        return;
    }
    let with_tsp = have("tsp");
    println!(
        "conductor versus the floor: {n} trivial tasks at parallelism 2, {rounds} rounds, under {}{}",
        base.display(),
        if with_tsp { "" } else { " (tsp not installed: no task-spooler row)" }
    );
    let mut rows: Vec<(&str, Vec<Duration>)> = vec![
        ("xargs -P2 (floor)", Vec::new()),
        ("tsp -S 2", Vec::new()),
        ("conductor run --workers 2", Vec::new()),
        ("conductor run --root R (durable)", Vec::new()),
        ("conductor submit ×N + 2 workers", Vec::new()),
        ("conductor submit --batch + 2 workers", Vec::new()),
        ("(N × `true`, one after another)", Vec::new()),
        ("(N × `conductor --version`, in turn)", Vec::new()),
    ];
    // The program, not the shell's builtin of that name.
    let true_bin = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("true"))
        .find(|p| p.is_file())
        .expect("a `true` program on PATH");
    for round in 0..rounds {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let (files, list) = prompts(dir.path(), n);
        // Each round starts with another row, so no row always runs first.
        for k in 0..rows.len() {
            let row = (k + round) % rows.len();
            let took = match row {
                0 => floor(&files),
                1 if with_tsp => task_spooler(dir.path(), &files),
                1 => continue,
                2 => conductor_run(dir.path(), &list),
                3 => conductor_run_durable(dir.path(), &list),
                4 => conductor_submit(dir.path(), n, None),
                5 => conductor_submit(dir.path(), n, Some(&list)),
                6 => serial_starts(&true_bin, &[], n),
                _ => serial_starts(&bin("conductor"), &["--version"], n),
            };
            rows[row].1.push(took);
        }
    }
    let floor_median = median(&mut rows[0].1.clone());
    println!(
        "{:<38} {:>10} {:>8} {:>10}",
        "", "median", "× floor", "slowest"
    );
    for (name, times) in &mut rows {
        if times.is_empty() {
            continue;
        }
        let m = median(times);
        let worst = times.iter().max().copied().unwrap_or_default();
        println!(
            "{name:<38} {:>8.0}ms {:>7.2}× {:>8.0}ms",
            m.as_secs_f64() * 1000.0,
            m.as_secs_f64() / floor_median.as_secs_f64(),
            worst.as_secs_f64() * 1000.0
        );
    }
    drop(ext4);
}
