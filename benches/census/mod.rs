//! The system calls of `conductor run` a task, the agent's own left out (issue 39.4):
//! `strace -f -ff` of a run of N tasks writes one file per process; every call of a
//! process counts until it execs something that is not a conductor binary (the agent;
//! the `execve` itself counts). Shared by `benches/versus.rs --syscalls` and the test
//! `tests/integration/lean_path.rs` (included by `#[path]`); `census_of_batch` counts a
//! `submit --batch` process the same way (`--syscalls-batch`, `batch_calls.rs`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// What a run called, ours only.
#[derive(Debug, Default, Clone)]
pub struct Census {
    pub calls: u64,
    pub openat: u64,
    pub failed_openat: u64,
    /// Calls by name.
    pub by_name: BTreeMap<String, u64>,
    /// Opened paths (task ids and run directories folded), with `ok`/`FAILED`.
    pub opened: BTreeMap<String, u64>,
}

impl Census {
    /// Count the calls in one process's trace (the lines of `strace -o P -ff`'s `P.PID`).
    pub fn add_process(&mut self, trace: &str) {
        for line in trace.lines() {
            let Some(name) = call_name(line) else {
                continue;
            };
            if name == "fcntl" && line.contains(", F_GETFD)") {
                // std's debug build asks before each `close` whether the descriptor is
                // open (a debug assertion): not a call of ours, absent from a release.
                continue;
            }
            self.calls += 1;
            *self.by_name.entry(name.to_string()).or_default() += 1;
            let failed = result_of(line).is_some_and(|r| r.starts_with("-1 "));
            if name == "openat" || name == "open" || name == "openat2" {
                self.openat += 1;
                self.failed_openat += u64::from(failed);
                let path = fold(line.split('"').nth(1).unwrap_or("?"));
                let key = format!("{} {path}", if failed { "FAILED" } else { "ok" });
                *self.opened.entry(key).or_default() += 1;
            }
            if name == "execve" && !failed && !is_ours(line) {
                // The agent from here on.
                break;
            }
        }
    }

    /// Every `PREFIX.PID` file strace wrote.
    pub fn of_traces(prefix: &Path) -> std::io::Result<Census> {
        let dir = prefix.parent().unwrap_or(Path::new("."));
        let stem = format!(
            "{}.",
            prefix.file_name().unwrap_or_default().to_string_lossy()
        );
        let mut census = Census::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(&stem) {
                census.add_process(&std::fs::read_to_string(entry.path())?);
            }
        }
        Ok(census)
    }

    /// Sum `other` into `self`.
    pub fn add(&mut self, other: &Census) {
        self.calls += other.calls;
        self.openat += other.openat;
        self.failed_openat += other.failed_openat;
        for (k, n) in &other.by_name {
            *self.by_name.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &other.opened {
            *self.opened.entry(k.clone()).or_default() += n;
        }
    }

    /// Per task: (`self` − `fewer`) / `tasks`, so what a run costs once cancels out.
    pub fn per_task(&self, fewer: &Census, tasks: u64) -> PerTask {
        let per = |a: u64, b: u64| (a as f64 - b as f64) / tasks as f64;
        let diff = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
            let mut v: Vec<(String, f64)> = a
                .iter()
                .map(|(k, n)| (k.clone(), per(*n, b.get(k).copied().unwrap_or(0))))
                .filter(|(_, d)| d.abs() >= 0.05)
                .collect();
            v.sort_by(|x, y| y.1.total_cmp(&x.1));
            v
        };
        PerTask {
            calls: per(self.calls, fewer.calls),
            openat: per(self.openat, fewer.openat),
            failed_openat: per(self.failed_openat, fewer.failed_openat),
            by_name: diff(&self.by_name, &fewer.by_name),
            opened: diff(&self.opened, &fewer.opened),
        }
    }
}

/// A task's share of a run's calls.
#[derive(Debug, Clone)]
pub struct PerTask {
    pub calls: f64,
    pub openat: f64,
    pub failed_openat: f64,
    pub by_name: Vec<(String, f64)>,
    pub opened: Vec<(String, f64)>,
}

impl std::fmt::Display for PerTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "a task: {:.1} calls, {:.1} openat, {:.2} failing openat",
            self.calls, self.openat, self.failed_openat
        )?;
        let calls: Vec<String> = self
            .by_name
            .iter()
            .map(|(k, n)| format!("{k} {n:.1}"))
            .collect();
        writeln!(f, "  calls: {}", calls.join(", "))?;
        for (path, n) in &self.opened {
            writeln!(f, "  {n:5.2} openat {path}")?;
        }
        Ok(())
    }
}

/// `conductor run --workers 2 --agent AGENT -f LIST` of `tasks` prompts under `strace
/// -f -ff`, in `dir` (its private root under `dir` through `TMPDIR`); the census.
pub fn census_of_run(conductor: &Path, agent: &str, dir: &Path, tasks: usize) -> Census {
    let work = dir.join(format!("census-{tasks}"));
    std::fs::create_dir_all(&work).unwrap();
    let list = work.join("prompts.txt");
    let prompts: String = (0..tasks).map(|i| format!("task {i}\n")).collect();
    std::fs::write(&list, prompts).unwrap();
    let prefix = work.join("trace");
    let out = Command::new("strace")
        .args(["-f", "-ff", "-o"])
        .arg(&prefix)
        .arg(conductor)
        .args(["run", "--workers", "2", "--agent", agent, "--json", "-f"])
        .arg(&list)
        .env("TMPDIR", &work)
        .env("CONDUCTOR_HOME", work.join("home"))
        .env_remove("CONDUCTOR_WORKER")
        .current_dir(&work)
        .output()
        .expect("run strace");
    assert!(
        out.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let census = Census::of_traces(&prefix).expect("read the traces");
    let _ = std::fs::remove_dir_all(&work);
    census
}

/// `conductor submit --batch -f LIST` of `tasks` prompts into `root` (made already)
/// under `strace -ff` (the submitter alone: no other process is traced), in `work`; the
/// census.
pub fn census_of_batch(conductor: &Path, work: &Path, root: &Path, tasks: usize) -> Census {
    std::fs::create_dir_all(work).unwrap();
    let list = work.join(format!("prompts-{tasks}.txt"));
    let prompts: String = (0..tasks).map(|i| format!("task {i}\n")).collect();
    std::fs::write(&list, prompts).unwrap();
    let prefix = work.join(format!("trace-{tasks}"));
    let out = Command::new("strace")
        .args(["-ff", "-o"])
        .arg(&prefix)
        .arg(conductor)
        .args(["submit", "--batch", "-f"])
        .arg(&list)
        .arg("--root")
        .arg(root)
        .env_remove("CONDUCTOR_WORKER")
        .output()
        .expect("run strace");
    assert!(
        out.status.success(),
        "the batch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Census::of_traces(&prefix).expect("read the traces")
}

/// The call's name, for a line that is a call (not a signal, an exit, a resumption).
fn call_name(line: &str) -> Option<&str> {
    let name = &line[..line.find('(')?];
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

/// What follows the last ` = ` of a call's line.
fn result_of(line: &str) -> Option<&str> {
    line.rfind(") = ").map(|i| &line[i + 4..])
}

/// Whether an `execve` line starts a conductor binary (its program's file name).
fn is_ours(line: &str) -> bool {
    let program = line.split('"').nth(1).unwrap_or("");
    let name = program.rsplit('/').next().unwrap_or(program);
    name.starts_with("conductor")
}

/// A path with what varies from run to run folded: the run's directory, task ids and
/// pids (any run of digits), so the same file of every task sums.
fn fold(path: &str) -> String {
    let path = match path.find("/conductor-run-") {
        Some(i) => {
            let rest = &path[i + 1..];
            format!("RUN{}", rest.find('/').map_or("", |j| &rest[j..]))
        }
        None => path.to_string(),
    };
    // A task's own file (an id entry, a handle, a result, a record): its id folded.
    let parts: Vec<&str> = path.split('/').collect();
    let path = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let in_ids = i > 0 && ["ids", ".handles", "results", "tasks"].contains(&parts[i - 1]);
            match (in_ids, part.rsplit_once('.')) {
                (true, Some((stem, ext))) if !stem.is_empty() => format!("ID.{ext}"),
                (true, _) => "ID".to_string(),
                (false, _) => part.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    let mut out = String::new();
    let mut digits = false;
    for c in path.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('N');
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}
