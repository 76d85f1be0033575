//! Issue 38.1: a many-slot worker under a real process limit (`ulimit -u`) runs every
//! task as processes free up, and fails none for the limit.
//!
//! Root is not held to RLIMIT_NPROC, so the worker runs as an unprivileged user (uid
//! and gid 65534, "nobody") in a root that user owns.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{Gid, Uid};

use crate::harness::{agent, bin, wait_until, Reaped};
use crate::prereq::require;

const NOBODY: u32 = 65534;
const LIMIT: u64 = 40;
const SLOTS: usize = 60;

/// A command run as NOBODY, with the process limit `nproc` when given.
fn as_nobody(program: &Path, home: &Path, nproc: Option<u64>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("CONDUCTOR_HOME", home)
        .env("HOME", home.parent().unwrap())
        .env_remove("CONDUCTOR_WORKER")
        .env_remove("CONDUCTOR_TASK_ID")
        .current_dir(home.parent().unwrap())
        .stdin(Stdio::null());
    // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, setgroups,
    // setgid, setuid), no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(n) = nproc {
                setrlimit(Resource::RLIMIT_NPROC, n, n)?;
            }
            nix::unistd::setgroups(&[])?;
            nix::unistd::setgid(Gid::from_raw(NOBODY))?;
            nix::unistd::setuid(Uid::from_raw(NOBODY))?;
            Ok(())
        });
    }
    cmd
}

fn prerequisites() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(
            "needs root, to run the worker as uid 65534 under a process limit \
                    (root itself is not held to one)"
                .into(),
        );
    }
    if !Path::new("/usr/bin/python3").exists() {
        return Err("needs /usr/bin/python3 (the agent that never forks)".into());
    }
    Ok(())
}

fn chown_all(dir: &Path) {
    std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            chown_all(&p);
        } else {
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
    }
}

/// Every result in the slots' `results/` directories.
fn results(home: &Path) -> Vec<serde_json::Value> {
    let mut found = Vec::new();
    for slot in 0..SLOTS {
        let dir = home.join(format!("workers/{slot}/results"));
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if let Ok(v) = serde_json::from_slice(&std::fs::read(e.path()).unwrap_or_default()) {
                found.push(v);
            }
        }
    }
    found
}

#[test]
fn a_many_slot_worker_past_its_process_limit_runs_every_task_and_fails_none() {
    require!(prerequisites());
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path();
    std::fs::set_permissions(base, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let home = base.join("root");
    let logs = base.join("logs");
    std::fs::create_dir(&logs).unwrap();
    chown_all(base);
    let init = as_nobody(&bin("conductor"), &home, None)
        .args(["init", &SLOTS.to_string()])
        .output()
        .expect("run conductor init");
    assert!(init.status.success(), "init: {init:?}");
    // The burst: a task in every slot's inbox before the worker starts, so that every
    // slot wants a thread, and an agent, at once.
    let send = as_nobody(Path::new("/bin/sh"), &home, None)
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {SLOTS} ]; do {} send -q $i --id t$i \"task $i\" \
             >/dev/null 2>&1 || exit 1; i=$((i+1)); done",
            bin("conductor").display()
        ))
        .output()
        .expect("send");
    assert!(send.status.success(), "send: {send:?}");
    let log = logs.join("worker.log");
    let mut worker = Reaped(
        as_nobody(&bin("conductor-worker"), &home, Some(LIMIT))
            .arg(format!("0-{}", SLOTS - 1))
            .arg(&logs)
            .arg("--agent")
            .arg(agent("no_fork.py"))
            .env("RUST_LOG", "conductor=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the worker"),
    );
    wait_until(Duration::from_secs(90), "every task's result", || {
        assert!(
            worker.0.try_wait().unwrap().is_none(),
            "the worker exited: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        results(&home).len() >= SLOTS
    });
    let failed: Vec<String> = results(&home)
        .iter()
        .filter(|v| v["outcome"] != "success")
        .map(|v| format!("{}: {} {}", v["id"], v["outcome"], v["error"]))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {SLOTS} failed: {failed:#?}",
        failed.len()
    );
    let short = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!(
        "{} EAGAIN warnings in the worker's log",
        short.matches("out of processes").count()
            + short.matches("Resource temporarily unavailable").count()
    );
}
