//! What a test needs from the machine (tmux, git, root, a tmpfs mount, ...). A test whose
//! prerequisite is missing is skipped, and says so, on a developer's machine; under CI
//! (`CI=true` or `CI=1`) it fails instead, so a green CI run means every test ran.

#![allow(dead_code)]

use std::process::{Command, Stdio};

/// Whether this is a CI run: `CI` is `true` or `1` (GitHub and GitLab set `CI=true`,
/// and so does `.ci/run`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The running test's name (libtest names each test's thread after its test).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// The running test cannot run for `reason`: outside CI, print `skipped <test>: <reason>`
/// (the caller then returns); under CI, fail with the reason.
#[track_caller]
pub fn skip_or_fail(reason: &str) {
    let test = test_name();
    if in_ci() {
        panic!(
            "{test} cannot run: {reason} (under CI a missing prerequisite fails the test \
             instead of skipping it; .ci/run installs them)"
        );
    }
    // Straight to stderr: libtest captures eprintln! of a passing test, and a skip
    // must be seen.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("skipped {test}: {reason}\n").as_bytes(),
    );
}

/// The running test cannot run for `reason`, and skips even under CI because
/// `allowed` says it may (an issue that asks for exactly this skip, named there): print
/// `skipped <test>: <reason> (allowed under CI: <allowed>)`. For a machine's kernel, not
/// for a tool CI can install.
pub fn skip_allowed_in_ci(reason: &str, allowed: &str) {
    let test = test_name();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("skipped {test}: {reason} (allowed under CI: {allowed})\n").as_bytes(),
    );
}

/// Whether the part of a test named `part` can run: `check` (see [`require!`]) passed;
/// else [`skip_or_fail`] and the test goes on without that part.
#[track_caller]
pub fn runs_part(part: &str, check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(why) => {
            skip_or_fail(&format!("{part}: {why}"));
            false
        }
    }
}

/// `require!(check)`: the `Ok` value of `check`, a `Result<T, String>` whose error says
/// what this machine lacks; on an error, [`skip_or_fail`] and return from the test.
macro_rules! require {
    ($check:expr) => {
        match $check {
            Ok(v) => v,
            Err(why) => {
                $crate::prereq::skip_or_fail(&why);
                return;
            }
        }
    };
}
pub(crate) use require;

/// `program ARGS` runs and succeeds here; else why not, with how to install it.
fn runs(program: &str, args: &[&str], install: &str) -> Result<(), String> {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`{program} {}` failed ({}); {install}",
            args.join(" "),
            o.status
        )),
        Err(e) => Err(format!("cannot run {program} ({e}); {install}")),
    }
}

/// tmux runs here (the launcher, dashboard and pane tests drive a real one).
pub fn tmux() -> Result<(), String> {
    runs("tmux", &["-V"], "install tmux (apt-get install tmux)")
}

/// git runs here (the worktree tests make a repository).
pub fn git() -> Result<(), String> {
    runs("git", &["--version"], "install git (apt-get install git)")
}

/// strace runs here (the group-commit test counts a run's fsync-like calls with it).
pub fn strace() -> Result<(), String> {
    runs("strace", &["-V"], "install strace (apt-get install strace)")
}

/// The official Python MCP SDK imports here (the MCP tests drive a session through it).
pub fn python_mcp() -> Result<(), String> {
    runs(
        "python3",
        &["-c", "import mcp.client.stdio"],
        "install the Python MCP SDK (pip install mcp==2.3.0)",
    )
}

/// This process is root, which `what` needs.
pub fn root(what: &str) -> Result<(), String> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(format!("{what} needs root"))
    }
}
