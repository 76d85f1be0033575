//! Shared test harness: private roots, bounded waits, child-process roles.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conductor::{Client, Root};

/// A private conductor root in a temp dir; never the user's `~/.claude-code`.
pub struct TestRoot {
    pub dir: tempfile::TempDir,
    pub client: Client,
}

impl TestRoot {
    pub fn new() -> TestRoot {
        TestRoot::in_temp_dir(std::env::temp_dir())
    }

    /// A root `root` in a fresh temp directory under `under`, its queue made.
    fn in_temp_dir(under: impl AsRef<Path>) -> TestRoot {
        let dir = tempfile::Builder::new()
            .prefix("conductor-test-")
            .tempdir_in(under)
            .expect("create temp root");
        let client = Client::new(Root::new(dir.path().join("root")));
        client.init_queue().expect("init root");
        TestRoot { dir, client }
    }

    /// A root whose filesystem outlives the machine, so that its workers commit: the
    /// temp directory, or the build's own (on the disk) where the temp directory is a
    /// tmpfs — a root held in memory is served without fsyncs.
    pub fn on_disk() -> TestRoot {
        if !conductor::fs_kind::of(&std::env::temp_dir())
            .ok()
            .flatten()
            .is_some_and(|k| k.held_in_memory())
        {
            return TestRoot::new();
        }
        TestRoot::in_temp_dir(env!("CARGO_TARGET_TMPDIR"))
    }

    pub fn path(&self) -> &Path {
        self.client.root().path()
    }
}

/// Poll `cond` until it holds or `timeout` passes (then panic naming `what`).
/// For conditions with no file event to wait on (process exit, counts).
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Path of one of this package's binaries.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "conductor" => PathBuf::from(env!("CARGO_BIN_EXE_conductor")),
        "conductor-worker" => PathBuf::from(env!("CARGO_BIN_EXE_conductor-worker")),
        "conductor-launch" => PathBuf::from(env!("CARGO_BIN_EXE_conductor-launch")),
        other => panic!("unknown binary {other}"),
    }
}

/// Path of a fake agent script under `tests/agents/`.
pub fn agent(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agents")
        .join(name)
}

/// Environment variable that turns a run of this test binary into a child role.
pub const CHILD_ROLE: &str = "CONDUCTOR_TEST_CHILD_ROLE";

/// Run the test named `test_name` of this binary as a child process with
/// `CONDUCTOR_TEST_CHILD_ROLE=role` (the test body checks [`child_role`] and acts).
pub fn child_command(test_name: &str, role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role);
    cmd
}

/// The role this process was started for, if it is a child (see [`child_command`]).
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ROLE).ok()
}

/// Environment variable carrying the argument of a child role (a path, an id …).
pub const CHILD_ARG: &str = "CONDUCTOR_TEST_CHILD_ARG";

/// The argument the parent passed to this child role (see [`CHILD_ARG`]).
pub fn child_arg() -> String {
    std::env::var(CHILD_ARG).unwrap_or_else(|_| panic!("child role started without {CHILD_ARG}"))
}

/// Prefix of the lines a child role reports on its stdout, so they stand out from the
/// test harness's own output ("running 1 test" …).
pub const CHILD_SAYS: &str = "@@child@@ ";

/// In a child role: report `word` to the parent on stdout (one line, flushed).
pub fn child_say(word: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{CHILD_SAYS}{word}").expect("write to stdout");
    out.flush().expect("flush stdout");
}

/// In a child role: block until the parent closes our stdin (or kills us).
pub fn child_block_on_stdin() {
    use std::io::Read;
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
}

/// A child process we started: stdin and stdout piped, stdout read line by line on a
/// thread. It is killed (SIGKILL) and reaped when dropped, so no test leaves one behind.
pub struct ChildProc {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl ChildProc {
    /// Start `cmd` with piped stdin/stdout (stderr inherited for diagnostics).
    pub fn spawn(mut cmd: Command) -> ChildProc {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProc {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Wait (bounded) for the next word the child reports with [`child_say`].
    pub fn next_word(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(word) = line.strip_prefix(CHILD_SAYS) {
                        return word.trim().to_string();
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
                    "child {} said nothing within {timeout:?}; its stdout so far: {:?}",
                    self.id(),
                    self.seen
                ),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "child {} closed its stdout without saying anything ({:?}); its stdout: {:?}",
                    self.id(),
                    self.child.try_wait(),
                    self.seen
                ),
            }
        }
    }

    /// Wait (bounded) until the child reports exactly `word`.
    pub fn expect_word(&mut self, word: &str, timeout: Duration) {
        let got = self.next_word(timeout);
        assert_eq!(
            got,
            word,
            "child {} reported {got:?}, expected {word:?}",
            self.id()
        );
    }

    /// Close the child's stdin (children in [`child_block_on_stdin`] then finish).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Wait (bounded) for the child to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let mut status = None;
        let child = &mut self.child;
        wait_until(timeout, "a child process to exit", || {
            status = child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }

    /// Whether the child has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// SIGKILL the child and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether some inotify instance of this process watches `dir` (Linux: read from
/// `/proc/self/fdinfo`). Lets a test write a file only once a waiter is really armed.
pub fn inotify_watches(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = std::fs::metadata(dir).map(|m| m.ino()) else {
        return false;
    };
    let needle = format!(" ino:{ino:x} ");
    let Ok(fds) = std::fs::read_dir("/proc/self/fdinfo") else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines()
                .any(|l| l.starts_with("inotify ") && l.contains(&needle))
        })
    })
}

/// Spin (yielding the CPU) until `path` exists: the start line of a race between
/// threads and child processes, tighter than [`wait_until`]'s 5 ms naps. Bounded.
pub fn spin_until_exists(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {}",
            path.display()
        );
        std::thread::yield_now();
    }
}

/// Pids of live processes whose environment points at `root` (workers, agents and
/// tmux panes all carry `CONDUCTOR_HOME=<root>`). Zombies are not running anything.
pub fn processes_of(root: &Path) -> Vec<u32> {
    let needle = format!("CONDUCTOR_HOME={}", root.display());
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Wait (bounded) until no process started for `root` is left; name them if any are.
pub fn assert_nothing_left(root: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = processes_of(root);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let described: Vec<String> = left
                .iter()
                .map(|p| {
                    let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                    format!("{p}: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
                })
                .collect();
            panic!("processes left behind: {described:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `conductor-worker` child process on a test root; its stderr (debug log) goes to a
/// file in the test's temp dir. Dropping it stops it: SIGTERM, then SIGKILL after a bound.
pub struct WorkerProc {
    pub child: Option<std::process::Child>,
    pub pid: u32,
    pub slot: conductor::Slot,
    stderr_path: PathBuf,
}

impl WorkerProc {
    /// Start a worker and wait until it serves its slot ([`conductor::pool::serving`]: it
    /// may already be working, having pulled a task the moment it started).
    pub fn start(
        t: &TestRoot,
        slot: conductor::Slot,
        agent_cmd: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProc {
        let mut w = WorkerProc::spawn(t, slot, agent_cmd, extra, env);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if conductor::pool::serving(t.client.root(), slot, w.pid) {
                return w;
            }
            let child = w.child.as_mut().expect("worker owned");
            if let Some(st) = child.try_wait().expect("try_wait") {
                panic!(
                    "worker {slot} exited at start ({st}); stderr:\n{}",
                    w.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "worker {slot} did not start; stderr:\n{}",
                w.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Start a worker without waiting for it.
    pub fn spawn(
        t: &TestRoot,
        slot: conductor::Slot,
        agent_cmd: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProc {
        use std::sync::atomic::{AtomicU32, Ordering};
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let stderr_path = t.dir.path().join(format!(
            "worker-{slot}-{}.stderr",
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let stderr = std::fs::File::create(&stderr_path).expect("create worker log");
        let mut cmd = Command::new(bin("conductor-worker"));
        cmd.arg(slot.to_string())
            .arg(t.dir.path())
            .args(["--agent", agent_cmd])
            .args(extra)
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env("RUST_LOG", "conductor=debug")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn conductor-worker");
        WorkerProc {
            pid: child.id(),
            child: Some(child),
            slot,
            stderr_path,
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), sig)
            .expect("signal worker");
    }

    /// Wait (bounded) for the worker to exit, and reap it.
    pub fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("worker still owned");
        let deadline = Instant::now() + bound;
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                self.child = None;
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not exit within {bound:?}; stderr:\n{}",
                self.pid,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL: no chance to clean up. Reaped.
    pub fn crash(&mut self) {
        let mut c = self.child.take().expect("worker still owned");
        let _ = c.kill();
        let _ = c.wait();
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_child(c);
        }
    }
}

/// Stop a worker the way a user would (SIGTERM: it stops its agents and exits), and
/// SIGKILL it if it has not exited within 30 s; reaped either way.
pub fn stop_child(mut c: std::process::Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// What a `conductor` command printed, and its exit code.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `conductor ARGS` on the test root (bounded) and assert its exit code, showing
/// what it printed when that differs.
#[track_caller]
pub fn run_conductor(t: &TestRoot, args: &[&str], code: i32) -> Ran {
    run_conductor_env(t, args, &[], code)
}

/// [`run_conductor`] with these variables added to its environment.
pub fn run_conductor_env(t: &TestRoot, args: &[&str], env: &[(String, String)], code: i32) -> Ran {
    let out = assert_cmd::Command::new(bin("conductor"))
        .args(args)
        .env("CONDUCTOR_HOME", t.path())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("RUST_LOG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run conductor");
    let r = Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(
        r.code,
        Some(code),
        "conductor {args:?}\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    r
}

/// A `conductor-worker` on the test root; stopped with SIGTERM on drop (so its agent's
/// whole group goes too), SIGKILL if it does not go.
/// A `conductor` command left running (logs -f, status --watch, wait): its stdout
/// and stderr are collected by threads. Killed and reaped on drop.
/// How long a background `conductor` gets for what a test waits on.
const BG_BOUND: Duration = Duration::from_secs(120);

/// A `conductor` command left running (logs -f, status --watch, wait): its stdout
/// and stderr are collected by threads. Killed and reaped on drop.
pub struct Bg {
    pub child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    /// The collecting threads: done once they read end-of-file.
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect(
    mut from: impl Read + Send + 'static,
) -> (Arc<Mutex<Vec<u8>>>, std::thread::JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (buf, reader)
}

impl Bg {
    /// Start `conductor args…`; with `read_stdout` false the read end of its stdout
    /// pipe is closed at once (nobody listens).
    pub fn spawn(t: &TestRoot, args: &[&str], read_stdout: bool) -> Bg {
        Bg::spawn_with(t, args, read_stdout, &[])
    }

    /// [`Bg::spawn`] reading stdout, with these variables added to its environment.
    pub fn spawn_env(t: &TestRoot, args: &[&str], env: &[(&str, &str)]) -> Bg {
        Bg::spawn_with(t, args, true, env)
    }

    fn spawn_with(t: &TestRoot, args: &[&str], read_stdout: bool, env: &[(&str, &str)]) -> Bg {
        let mut child = Command::new(bin("conductor"))
            .args(args)
            .envs(env.iter().copied())
            .env("CONDUCTOR_HOME", t.path())
            .env_remove("CONDUCTOR_WORKER")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn conductor");
        let stdout = child.stdout.take().unwrap();
        let mut readers = Vec::new();
        let out = if read_stdout {
            let (out, reader) = collect(stdout);
            readers.push(reader);
            out
        } else {
            drop(stdout);
            Arc::new(Mutex::new(Vec::new()))
        };
        let (err, reader) = collect(child.stderr.take().unwrap());
        readers.push(reader);
        Bg {
            child,
            out,
            err,
            readers,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    #[track_caller]
    pub fn wait_stdout(&self, what: &str, cond: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + BG_BOUND;
        loop {
            let out = self.stdout();
            if cond(&out) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; stdout so far:\n{out}\nstderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig)
            .expect("signal conductor");
    }

    #[track_caller]
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut status = None;
        let child = &mut self.child;
        wait_until(BG_BOUND, "conductor to exit", || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        // Its exit does not mean its output has been read: a caller reading stdout next
        // would race the collecting threads (seen: the last JSON document missing).
        let readers = &self.readers;
        wait_until(BG_BOUND, "its output to be read to the end", || {
            readers.iter().all(|r| r.is_finished())
        });
        status.unwrap()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bg {
    /// Wait (bounded) until its stderr contains `needle`.
    #[track_caller]
    pub fn wait_stderr(&self, what: &str, needle: &str) {
        wait_until(BG_BOUND, what, || self.stderr().contains(needle));
    }
}

/// A worker running the keyed agent (tests/agents/keyed.sh), which logs its runs to `log`.
pub fn keyed_worker(t: &TestRoot, slot: conductor::Slot, log: &Path) -> WorkerProc {
    let agent_cmd = agent("keyed.sh").display().to_string();
    WorkerProc::start(
        t,
        slot,
        &agent_cmd,
        &[],
        &[("AGENT_LOG", log.to_str().unwrap())],
    )
}

/// One run of the keyed agent as it logged it: task id, key, start ns, end ns if it
/// ended.
#[derive(Debug, Clone)]
pub struct KeyedRun {
    pub id: String,
    pub key: String,
    pub start: u128,
    pub end: Option<u128>,
}

/// The keyed agent's log, parsed: one entry per start line, in log order, with its end.
pub fn keyed_runs(log: &Path) -> Vec<KeyedRun> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<KeyedRun> = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, id, key, ns] = parts[..] else {
            panic!("bad agent log line {line:?}");
        };
        let ns: u128 = ns.parse().unwrap();
        match what {
            "start" => out.push(KeyedRun {
                id: id.into(),
                key: key.into(),
                start: ns,
                end: None,
            }),
            "end" => {
                let r = out
                    .iter_mut()
                    .rev()
                    .find(|r| r.id == id && r.end.is_none())
                    .unwrap_or_else(|| panic!("end without start: {line:?}"));
                r.end = Some(ns);
            }
            _ => panic!("bad agent log line {line:?}"),
        }
    }
    out
}

/// How many times the keyed agent started task `id`.
pub fn starts_of(log: &Path, id: &str) -> usize {
    keyed_runs(log).iter().filter(|r| r.id == id).count()
}

/// The most agents that ever ran at once, from the logged intervals (each inside the
/// agent's life, so this never overstates it).
pub fn max_concurrent(all: &[KeyedRun]) -> usize {
    let mut events: Vec<(u128, i32)> = Vec::new();
    for r in all {
        events.push((r.start, 1));
        events.push((r.end.expect("every run ended"), -1));
    }
    // At equal times, count ends first: touching intervals do not overlap.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// Every worker's stderr, each under its slot and pid: what a failed assertion quotes.
pub fn worker_stderrs(ws: &[WorkerProc]) -> String {
    ws.iter()
        .map(|w| format!("--- worker {} (pid {}):\n{}", w.slot, w.pid, w.stderr()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A child process killed and reaped when dropped, whatever the test's assertions did.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `git -C dir args…`, which must succeed; its stdout.
#[track_caller]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository at `<test temp>/repo` on branch `main` whose one commit holds `files`
/// (name, contents); committed by a test person. Its canonical path.
pub fn git_repo(t: &TestRoot, files: &[(&str, &str)]) -> PathBuf {
    let dir = t.dir.path().join("repo");
    std::fs::create_dir(&dir).unwrap();
    git(&dir, &["init", "--quiet", "--initial-branch=main"]);
    git(&dir, &["config", "user.name", "Test Person"]);
    git(&dir, &["config", "user.email", "test@example.com"]);
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents).unwrap();
    }
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "--quiet", "-m", "start"]);
    dir.canonicalize().unwrap()
}
