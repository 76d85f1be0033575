//! Running the `git` command users have: its output, its errors, and a committer identity so an unattended commit never fails or hangs.

use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::{Error, Result};

/// Who commits when git knows nobody (no `user.name` / `user.email`).
pub const FALLBACK_NAME: &str = "conductor";
pub const FALLBACK_EMAIL: &str = "conductor@localhost";

/// Run git in `dir`; its stdout, or [`Error::Command`] with its stderr.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = git_output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(command_error(dir, args, &out))
    }
}

pub(crate) fn command_error(dir: &Path, args: &[&str], out: &Output) -> Error {
    let dir = dir.to_string_lossy();
    let mut all = vec!["-C", &dir];
    all.extend(args);
    Error::command("git", &all, out)
}

/// Run git in `dir` and return what happened, success or not.
pub fn git_output(dir: &Path, args: &[&str]) -> Result<Output> {
    git_command(dir, args)
        .stdin(Stdio::null())
        .output()
        .map_err(not_installed)
}

pub(crate) fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("git");
    // Never ask a person anything (an agent's worker has nobody to ask).
    c.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0");
    c
}

pub(crate) fn not_installed(e: io::Error) -> Error {
    let source = if e.kind() == io::ErrorKind::NotFound {
        io::Error::new(
            io::ErrorKind::NotFound,
            "git is not installed or not on PATH; worktrees need it",
        )
    } else {
        e
    };
    Error::io("run", "git", source)
}

/// Run git in `dir` with `input` on its stdin.
pub(crate) fn git_with_input(dir: &Path, args: &[&str], input: &[u8]) -> Result<Output> {
    let mut child = git_command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(not_installed)?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(not_installed)?;
    let _ = feeder.join();
    Ok(out)
}

/// Whether git in `dir` exits 0 (e.g. `show-ref --verify --quiet`).
pub(crate) fn succeeds(dir: &Path, args: &[&str]) -> Result<bool> {
    Ok(git_output(dir, args)?.status.success())
}

/// `-c user.name=… -c user.email=…` for whichever of the two git does not know in
/// `dir` (its config or the environment), so a commit never fails for want of them.
pub(crate) fn identity(dir: &Path) -> Result<Vec<String>> {
    let out = git_output(dir, &["config", "--get-regexp", r"^user\.(name|email)$"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let has = |key: &str, var: &str| {
        text.lines().any(|l| l.starts_with(key)) || std::env::var_os(var).is_some()
    };
    let mut args = Vec::new();
    if !has("user.name ", "GIT_COMMITTER_NAME") {
        args.extend(["-c".to_string(), format!("user.name={FALLBACK_NAME}")]);
    }
    if !has("user.email ", "GIT_COMMITTER_EMAIL") {
        args.extend(["-c".to_string(), format!("user.email={FALLBACK_EMAIL}")]);
    }
    // A signing key that asks for a passphrase would hang an unattended commit.
    args.extend(["-c".to_string(), "commit.gpgsign=false".to_string()]);
    Ok(args)
}

/// git in `dir` with the commit identity (see [`identity`]) before `args`.
pub(crate) fn git_as_committer(dir: &Path, args: &[&str]) -> Result<Output> {
    let id = identity(dir)?;
    let mut all: Vec<&str> = id.iter().map(String::as_str).collect();
    all.extend(args);
    git_output(dir, &all)
}
