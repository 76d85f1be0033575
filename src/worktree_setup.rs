//! Readying a new task worktree (config.json `worktreeSetup`, `portRange`): files copied
//! or linked in from the main checkout, a setup command run there, a port of its own.
//!
//! The copied and linked paths are the main checkout's own (a `.env`, a `node_modules`
//! link): they are never committed on the task's branch ([`stage_all`] leaves them out
//! of what it stages), whatever `.gitignore` says.

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::dirlock::{Acquire, DirLock, LockOptions};
use crate::error::{Error, Result};
use crate::layout::Root;
use crate::protocol::WorktreeRecord;

/// Longest `worktreeSetup.timeoutSecs` (a day).
pub const MAX_SETUP_TIMEOUT_SECS: u64 = 24 * 3600;
/// How long a setup command may run unless `timeoutSecs` says otherwise.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(600);
/// How much of a failed setup command's output its task's error quotes.
const ERROR_TAIL: usize = 2000;

/// `worktreeSetup` in config.json.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorktreeSetup {
    /// Paths relative to the repository's top, copied from the main checkout into the
    /// same place in each new worktree (files or whole directories).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy: Vec<PathBuf>,
    /// Paths relative to the repository's top, linked (symlinks to the main checkout's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link: Vec<PathBuf>,
    /// A shell command (`sh -c`) run in the new worktree before the agent starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How long the command may run (default 600 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl WorktreeSetup {
    /// Check every path and the command; the message names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (field, paths) in [("copy", &self.copy), ("link", &self.link)] {
            for p in paths {
                let inside = p.components().all(|c| matches!(c, Component::Normal(_)));
                if p.as_os_str().is_empty() || !inside {
                    return Err(format!(
                        "worktreeSetup.{field}: {} must be a path inside the repository, \
                         relative to its top (no `..`, not absolute)",
                        p.display()
                    ));
                }
            }
        }
        if let Some(c) = &self.command {
            if c.trim().is_empty() || c.contains('\0') {
                return Err(
                    "worktreeSetup.command must be a shell command (leave it out for none)"
                        .to_string(),
                );
            }
        }
        match self.timeout_secs {
            Some(t) if t == 0 || t > MAX_SETUP_TIMEOUT_SECS => Err(format!(
                "worktreeSetup.timeoutSecs {t} is out of range: it must be 1 to \
                 {MAX_SETUP_TIMEOUT_SECS} (leave it out for the default 600)"
            )),
            _ => Ok(()),
        }
    }

    /// The paths conductor puts in a worktree (never committed by it).
    pub fn placed(&self) -> Vec<PathBuf> {
        self.copy.iter().chain(&self.link).cloned().collect()
    }

    fn timeout(&self) -> Duration {
        self.timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_SETUP_TIMEOUT)
    }
}

/// Check `portRange` (`[first, last]`).
pub fn validate_port_range(range: Option<[u16; 2]>) -> std::result::Result<(), String> {
    match range {
        Some([first, last]) if first == 0 || first > last => Err(format!(
            "portRange [{first}, {last}] is not a range of ports: give [first, last] with \
             1 <= first <= last <= 65535"
        )),
        _ => Ok(()),
    }
}

/// A port of its own for a running worktree task: the first of `range` whose lock
/// (`ports/<port>.lock`) is free, held (for the task, as its key lock is) until dropped.
/// A dead holder's lock is taken over as any stale lock is, and freed by recovery.
pub fn take_port(
    root: &Root,
    [first, last]: [u16; 2],
    opts: &LockOptions,
) -> Result<Option<(u16, DirLock)>> {
    crate::fsio::ensure_dir(&root.ports_dir())?;
    for port in first..=last {
        if let Acquire::Acquired(l) = DirLock::try_acquire(&root.port_lock(port), opts)? {
            return Ok(Some((port, l)));
        }
    }
    Ok(None)
}

/// Stage everything in the worktree (`git add --all`) but the paths setup put there,
/// which are put back as `HEAD` has them (not there: untracked). Not by exclude
/// pathspecs: git refuses a pathspec that names an ignored path.
pub fn stage_all(rec: &WorktreeRecord) -> Result<()> {
    crate::worktree::git(&rec.path, &["add", "--all"])?;
    if rec.setup_paths.is_empty() {
        return Ok(());
    }
    let placed: Vec<String> = rec
        .setup_paths
        .iter()
        .map(|p| format!(":(top,literal){}", p.display()))
        .collect();
    let mut args = vec!["reset", "--quiet", "--"];
    args.extend(placed.iter().map(String::as_str));
    crate::worktree::git(&rec.path, &args).map(drop)
}

/// Copy and link `setup`'s paths from the main checkout into the worktree; each line
/// of what was done (or skipped, and why) goes to `log`. A path missing in the main
/// checkout is skipped; one the worktree already has (a tracked file) is left alone.
/// Returns the paths placed.
pub fn place_files(
    setup: &WorktreeSetup,
    rec: &WorktreeRecord,
    log: &mut fs::File,
) -> Result<Vec<PathBuf>> {
    let mut placed = Vec::new();
    let say = |log: &mut fs::File, line: String| {
        let _ = writeln!(log, "{line}");
    };
    for (linked, rel) in setup
        .copy
        .iter()
        .map(|p| (false, p))
        .chain(setup.link.iter().map(|p| (true, p)))
    {
        let (from, to) = (rec.repo.join(rel), rec.path.join(rel));
        if from.symlink_metadata().is_err() {
            say(
                log,
                format!(
                    "setup: {} is not in the main checkout; skipped",
                    rel.display()
                ),
            );
            continue;
        }
        if to.symlink_metadata().is_ok() {
            say(
                log,
                format!(
                    "setup: {} is in the worktree already; left as it is",
                    rel.display()
                ),
            );
            // Placed by an earlier attempt in this same worktree: still not to commit.
            let rel_text = rel.to_string_lossy();
            let tracked = crate::worktree::git(&rec.path, &["ls-files", "--", &rel_text])?;
            if tracked.trim().is_empty() {
                placed.push(rel.clone());
            }
            continue;
        }
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        if linked {
            std::os::unix::fs::symlink(&from, &to).map_err(|e| Error::io("link", &to, e))?;
            say(
                log,
                format!("setup: linked {} -> {}", rel.display(), from.display()),
            );
        } else {
            copy_tree(&from, &to)?;
            say(log, format!("setup: copied {}", rel.display()));
        }
        placed.push(rel.clone());
    }
    Ok(placed)
}

/// Copy a file, a symlink (as a link) or a directory with everything in it.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let meta = from
        .symlink_metadata()
        .map_err(|e| Error::io("stat", from, e))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(|e| Error::io("read link", from, e))?;
        return std::os::unix::fs::symlink(target, to).map_err(|e| Error::io("link", to, e));
    }
    if !meta.is_dir() {
        return fs::copy(from, to)
            .map(drop)
            .map_err(|e| Error::io("copy to", to, e));
    }
    fs::create_dir(to).map_err(|e| Error::io("create", to, e))?;
    for entry in fs::read_dir(from).map_err(|e| Error::io("read", from, e))? {
        let entry = entry.map_err(|e| Error::io("read", from, e))?;
        copy_tree(&entry.path(), &to.join(entry.file_name()))?;
    }
    Ok(())
}

/// Run `setup`'s command with `sh -c` in `cwd`, its output (both streams) appended to
/// `log`, with `env` set; its whole process group is killed past its timeout.
/// `beat` is called four times a second while it runs (to renew the task's locks, to
/// hear of a cancel): `Some(why)` stops the command at once.
/// Err: why the setup failed, with the tail of its output.
pub fn run_command(
    setup: &WorktreeSetup,
    cwd: &Path,
    env: &[(String, String)],
    log: (&fs::File, &Path),
    mut beat: impl FnMut() -> Option<String>,
) -> std::result::Result<(), String> {
    let Some(command) = &setup.command else {
        return Ok(());
    };
    let (file, log_path) = log;
    let out = file.try_clone().map_err(|e| e.to_string())?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("worktree setup command `{command}` could not start: {e}"))?;
    let deadline = Instant::now() + setup.timeout();
    let mut last_beat = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if Instant::now() >= deadline => {
                break Err(format!(
                    "ran past its timeout of {}s and was killed",
                    setup.timeout().as_secs()
                ))
            }
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for `{command}`: {e}")),
        }
        if last_beat.elapsed() >= Duration::from_millis(250) {
            if let Some(why) = beat() {
                break Err(format!("was stopped: {why}"));
            }
            last_beat = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever it left running in its group goes with it.
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let why = match status {
        Ok(st) if st.success() => return Ok(()),
        Ok(st) => match st.code() {
            Some(c) => format!("exited with code {c}"),
            None => format!("was killed ({st})"),
        },
        Err(why) => why,
    };
    Err(format!(
        "worktree setup failed: `{command}` {why} (its output: {}){}",
        log_path.display(),
        tail(log_path)
    ))
}

/// The end of `path`'s text, on lines of its own after a colon; empty if it has none.
fn tail(path: &Path) -> String {
    let text = fs::read(path).unwrap_or_default();
    let from = text.len().saturating_sub(ERROR_TAIL);
    let text = String::from_utf8_lossy(&text[from..]);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(":\n{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(json: &str) -> WorktreeSetup {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn paths_outside_the_repository_and_bad_timeouts_are_refused_by_field() {
        assert_eq!(setup(r#"{"copy": [".env", "a/b"]}"#).validate(), Ok(()));
        for (json, says) in [
            (r#"{"copy": ["../x"]}"#, "worktreeSetup.copy: ../x"),
            (r#"{"link": ["/abs"]}"#, "worktreeSetup.link: /abs"),
            (r#"{"copy": [""]}"#, "worktreeSetup.copy: "),
            (r#"{"command": " "}"#, "worktreeSetup.command"),
            (r#"{"timeoutSecs": 0}"#, "worktreeSetup.timeoutSecs 0"),
        ] {
            let why = setup(json).validate().expect_err(json);
            assert!(why.starts_with(says), "{json}: {why}");
        }
        assert!(serde_json::from_str::<WorktreeSetup>(r#"{"cmd": "x"}"#).is_err());
        assert!(validate_port_range(Some([5, 4])).is_err());
        assert!(validate_port_range(Some([0, 4])).is_err());
        assert_eq!(validate_port_range(Some([41000, 41000])), Ok(()));
    }

    #[test]
    fn ports_are_handed_out_once_each_and_come_back_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let opts = LockOptions::default();
        let (a, la) = take_port(&root, [41000, 41001], &opts).unwrap().unwrap();
        let (b, _lb) = take_port(&root, [41000, 41001], &opts).unwrap().unwrap();
        assert_eq!((a, b), (41000, 41001));
        assert!(take_port(&root, [41000, 41001], &opts).unwrap().is_none());
        drop(la);
        let (c, _lc) = take_port(&root, [41000, 41001], &opts).unwrap().unwrap();
        assert_eq!(c, 41000);
    }
}
