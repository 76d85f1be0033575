//! The merge queue's check: a task's branch merged onto `HEAD` in a scratch worktree (removed afterwards), the user's check command run there; the repository's own checkout is never touched.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::worktree::{self, Repo};

/// How much of a failed check's output a report keeps (its end), in bytes.
pub const TAIL_BYTES: usize = 4000;
/// The longest a check may run before it is stopped and counted failed.
pub const CHECK_BOUND: Duration = Duration::from_secs(3600);

/// How a check went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub passed: bool,
    /// Its exit code (`None` when killed by a signal or stopped at [`CHECK_BOUND`]).
    pub exit: Option<i32>,
    /// The end of its output (stdout and stderr together).
    pub tail: String,
}

/// Merge `branch` onto `head` in a scratch worktree of `repo`, run `cmd` there
/// (`sh -c`), and remove the scratch worktree, whatever happened.
pub fn run(repo: &Repo, head: &str, branch: &str, cmd: &str) -> Result<Verdict> {
    let scratch = scratch_path(repo);
    let p = scratch.to_string_lossy().to_string();
    worktree::git(
        &repo.top,
        &["worktree", "add", "--quiet", "--detach", &p, head],
    )?;
    let verdict = merge_and_check(&scratch, branch, cmd);
    worktree::remove_forced(&repo.top, &scratch, None);
    let _ = std::fs::remove_dir_all(&scratch);
    verdict
}

/// A fresh path for a scratch worktree, beside the task worktrees (never inside the
/// repository's own working tree).
fn scratch_path(repo: &Repo) -> PathBuf {
    let folder = worktree::place::folder(&repo.top, &repo.common_dir, None);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    folder.join(format!(".merge-check-{}-{stamp}", std::process::id()))
}

fn merge_and_check(scratch: &Path, branch: &str, cmd: &str) -> Result<Verdict> {
    let args = [
        "merge",
        "--no-ff",
        "--no-verify",
        "--quiet",
        "--no-edit",
        branch,
    ];
    let out = worktree::git_as_committer(scratch, &args)?;
    if !out.status.success() {
        return Err(Error::command("git", &args, &out));
    }
    run_check(scratch, cmd)
}

/// Run `cmd` with `sh -c` in `dir`, its output to a file (no pipe to fill), bounded by
/// [`CHECK_BOUND`].
fn run_check(dir: &Path, cmd: &str) -> Result<Verdict> {
    let log = dir.join(".conductor-merge-check.log");
    let run = CheckRun {
        dir,
        cmd,
        env: &[],
        log: &log,
        bound: CHECK_BOUND,
        on_start: &|_| {},
    };
    run_bounded(&run, || true)
}

/// One run of a check command: where, with what environment, its output file (outside
/// any tree a commit takes in) and its time bound.
pub struct CheckRun<'a> {
    pub dir: &'a Path,
    pub cmd: &'a str,
    pub env: &'a [(String, String)],
    pub log: &'a Path,
    pub bound: Duration,
    /// Told the check's pid (its process group's id) once it runs: where a caller
    /// records it so that recovery can stop it.
    pub on_start: &'a dyn Fn(u32),
}

/// Debug variable: milliseconds to wait between a check's spawn and the recording of its
/// pid — the window a worker killed there once left the check running
/// (`tests/integration/until.rs`).
pub const ENV_DEBUG_RECORD_CHECK_AFTER_MS: &str = "CONDUCTOR_DEBUG_RECORD_CHECK_AFTER_MS";

/// Run a check (`sh -c`, its own process group, stdin empty, output to `run.log`, which
/// is removed afterwards). `go_on` is asked every 50 ms (to renew locks, see a cancel):
/// `false`, or the bound passed, stops the whole group and the check counts failed.
pub fn run_bounded(run: &CheckRun, mut go_on: impl FnMut() -> bool) -> Result<Verdict> {
    let (dir, log) = (run.dir, run.log);
    let file = std::fs::File::create(log).map_err(|e| Error::io("create", log, e))?;
    let err = file.try_clone().map_err(|e| Error::io("open", log, e))?;
    // The check starts only once its pid is recorded: it first reads a go on stdin,
    // then becomes the check itself (same pid, same group), its stdin empty. A worker
    // killed in between closes the pipe, and the check ends unstarted (it was seen to
    // run, and be left behind, when the worker died before recording it).
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"IFS= read -r go && [ "$go" = go ] || exit 125; exec sh -c "$1" </dev/null"#)
        .arg("sh")
        .arg(run.cmd)
        .current_dir(dir)
        .envs(run.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(file)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("run the check in", dir, e))?;
    if let Some(ms) = std::env::var(ENV_DEBUG_RECORD_CHECK_AFTER_MS)
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    (run.on_start)(child.id());
    if let Some(mut go) = child.stdin.take() {
        // A check that is gone already (killed) fails as its exit says.
        let _ = go.write_all(b"go\n");
    }
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child
            .try_wait()
            .map_err(|e| Error::io("wait for", dir, e))?
        {
            break Some(s);
        }
        if started.elapsed() > run.bound || !go_on() {
            // The whole group: a check's children must not outlive it.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut text = Vec::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let _ = f.read_to_end(&mut text);
    }
    let _ = std::fs::remove_file(log);
    Ok(Verdict {
        passed: status.is_some_and(|s| s.success()),
        exit: status.and_then(|s| s.code()),
        tail: tail(&String::from_utf8_lossy(&text), TAIL_BYTES),
    })
}

/// The last `max` bytes of `text`, starting at a character boundary.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut from = text.len() - max;
    while !text.is_char_boundary(from) {
        from += 1;
    }
    text[from..].to_string()
}
