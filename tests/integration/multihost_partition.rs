//! A partition: host B's filesystem client frozen while its agent goes on working on
//! local files. Host A takes B's task over after the lease and runs the key's next task;
//! B must have stopped its own agent by then (self-fencing, docs/ARCHITECTURE.md
//! "Fencing"). The scenario is [`a_partition`], a function of the cluster and of how
//! to freeze B's filesystem client, so that it runs on any shared filesystem.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::harness::{agent, wait_until};
use crate::multihost::{
    assert_all_running, json, outcome, queue_result, result_copies, status, submit_all,
    wait_seen_by, BOUND,
};
use crate::multihost_env::{self, Cache, Cluster, Host, HostProc};
use crate::prereq::require;

/// The lease of the scenario (`leaseSecs` in its root's config.json).
pub(crate) const PARTITION_LEASE: Duration = Duration::from_secs(6);
/// The root config [`a_partition`] expects: a lease of [`PARTITION_LEASE`].
pub(crate) const PARTITION_CONFIG: &str = "{\"leaseSecs\": 6}\n";

/// One run of `tests/agents/partition.sh`, from its record (kept on local disk).
#[derive(Debug, Clone)]
pub(crate) struct LocalRun {
    pub(crate) task: String,
    pub(crate) host: String,
    pub(crate) start: u128,
    /// The last time it wrote anything: it was working until then at least.
    pub(crate) last: u128,
    pub(crate) ended: bool,
    pub(crate) termed: bool,
}

/// Every run recorded in `dir`.
pub(crate) fn local_runs(dir: &Path) -> Vec<LocalRun> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir)
        .expect("read the local run records")
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let mut run: Option<LocalRun> = None;
        // A last line without its newline is being written (the shell's `echo` may
        // write "alive " and the number in two writes) or was cut short by a kill.
        let whole = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        for line in whole.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let ns = |i: usize| -> u128 {
                f.get(i)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("bad line {line:?} in {}", e.path().display()))
            };
            match (f[0], run.as_mut()) {
                ("start", None) if f.len() == 5 => {
                    run = Some(LocalRun {
                        task: f[1].into(),
                        host: f[4].into(),
                        start: ns(3),
                        last: ns(3),
                        ended: false,
                        termed: false,
                    })
                }
                // An empty time: the `date` inside was killed with the agent's group
                // (SIGKILL after the grace) while the shell went on to write the line.
                ("alive", Some(r)) if f.len() == 2 => {
                    r.last = r.last.max(f[1].parse().unwrap_or(0));
                }
                ("term", Some(r)) if f.len() == 2 => {
                    r.last = r.last.max(f[1].parse().unwrap_or(0));
                    r.termed = true;
                }
                ("end", Some(r)) if f.len() == 4 => {
                    r.last = r.last.max(ns(3));
                    r.ended = true;
                }
                _ => panic!("bad line {line:?} in {}", e.path().display()),
            }
        }
        found.extend(run);
    }
    found
}

/// A worker on `host` serving `slot` with the partition agent, which records its runs
/// in `local` (outside the shared root).
fn local_worker(c: &Cluster, host: &Host, slot: u32, local: &Path) -> HostProc {
    let log = c.scratch.join(format!("worker-{}-{slot}.log", host.name));
    let mut w = host.worker(
        slot,
        &agent("partition.sh"),
        &log,
        &[("AGENT_LOCAL_DIR", local.to_str().expect("utf-8 path"))],
    );
    wait_until(
        BOUND,
        &format!("worker {slot} on {} to serve", host.name),
        || {
            if let Some(st) = w.exited() {
                panic!(
                    "worker {slot} on {} exited at start ({st}):\n{}",
                    host.name,
                    w.stderr()
                );
            }
            status(c, slot).is_some_and(|s| s["host"] == host.name.as_str())
        },
    );
    w
}

/// Thaws B's filesystem client however the scenario ends (a failed assertion too), so
/// that the cluster can be taken down.
struct Thaw<'a>(&'a dyn Fn(Signal));

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        (self.0)(Signal::SIGCONT);
    }
}

/// What [`a_partition`] measured.
#[derive(Debug)]
pub(crate) struct PartitionReport {
    /// How long B's agent of the key's first task still worked after A's agent of its
    /// next task started (zero when B's had stopped first).
    pub(crate) overlap: Duration,
    /// How long before A's start B's agent stopped working (zero when they overlapped).
    pub(crate) gap: Duration,
    /// From the freeze to B's agent's last sign of work.
    pub(crate) b_worked_after_freeze: Duration,
    /// From the freeze to A's agent's start.
    pub(crate) a_started_after_freeze: Duration,
}

/// The partition scenario on cluster `c` (hosts A and B, a root with
/// [`PARTITION_CONFIG`]); `freeze_b(SIGSTOP)` must freeze every filesystem call of host
/// B (stop its filesystem client), `freeze_b(SIGCONT)` let them go on.
///
/// Host B runs task t1 on key k: its agent works on local files and keeps going. Host A
/// has t2 on the same key queued. B's client is frozen for at least twice the lease and
/// until A has ended t1 and started t2. From the agents' own records: B's agent stopped
/// before A's started; t1 ended once (interrupted, never a success), t2 ran once to
/// success; after the thaw B's worker is still up and runs a task of its own.
pub(crate) fn a_partition(c: &Cluster, freeze_b: &dyn Fn(Signal)) -> PartitionReport {
    let local = c.scratch.join("local-runs");
    std::fs::create_dir_all(&local).expect("local run dir");
    let (a, b) = (&c.hosts[0], &c.hosts[1]);
    let mut b1 = local_worker(c, b, 1, &local);
    submit_all(b, &[("t1".into(), "k".into(), "k 100000".into())]);
    let of = |task: &str| -> Vec<LocalRun> {
        local_runs(&local)
            .into_iter()
            .filter(|r| r.task == task)
            .collect()
    };
    wait_until(BOUND, "t1 to run on hostB", || {
        status(c, 1).is_some_and(|s| s["status"] == "working" && s["taskId"] == "t1")
            && !of("t1").is_empty()
    });
    let mut a0 = local_worker(c, a, 0, &local);
    submit_all(a, &[("t2".into(), "k".into(), "k 0".into())]);
    // B's agent is working (its record moves) before its filesystem goes.
    let before = of("t1")[0].last;
    wait_until(BOUND, "t1's agent on hostB to work", || {
        of("t1").first().is_some_and(|r| r.last > before)
    });
    freeze_b(Signal::SIGSTOP);
    let thaw = Thaw(freeze_b);
    let frozen = Instant::now();
    let frozen_ns = now_ns();
    wait_seen_by(&a0, "hostA to end t1 and start t2, hostB frozen", || {
        queue_result(c, "t1").is_some() && !of("t2").is_empty()
    });
    wait_until(BOUND, "twice the lease", || {
        frozen.elapsed() >= 2 * PARTITION_LEASE
    });
    let ended = queue_result(c, "t1").expect("t1 ended");
    drop(thaw);
    wait_seen_by(&a0, "t2's result", || queue_result(c, "t2").is_some());
    // B's worker is back: a task sent to its own slot runs there.
    let (code, _, err) = b.conductor(&["send", "1", "--id", "t3", "k3 0"]);
    assert_eq!(code, Some(0), "send t3 to hostB's slot 1: {err}");
    let t3 = c.root.join("workers/1/results/t3.json");
    wait_until(BOUND, "t3's result from hostB's worker", || {
        t3.exists() || b1.exited().is_some()
    });
    assert_all_running(&mut [("A0", &mut a0), ("B1", &mut b1)]);
    assert_eq!(outcome(&json(&t3).expect("t3's result")), "success");

    let (t1, t2) = (of("t1"), of("t2"));
    assert_eq!(t1.len(), 1, "t1 ran once: {t1:?}");
    assert_eq!(t2.len(), 1, "t2 ran once: {t2:?}");
    let (t1, t2) = (&t1[0], &t2[0]);
    assert_eq!((t1.host.as_str(), t2.host.as_str()), ("hostB", "hostA"));
    let report = PartitionReport {
        overlap: Duration::from_nanos(t1.last.saturating_sub(t2.start) as u64),
        gap: Duration::from_nanos(t2.start.saturating_sub(t1.last) as u64),
        b_worked_after_freeze: Duration::from_nanos(t1.last.saturating_sub(frozen_ns) as u64),
        a_started_after_freeze: Duration::from_nanos(t2.start.saturating_sub(frozen_ns) as u64),
    };
    eprintln!(
        "partition: overlap {:?}, gap {:?}; after the freeze hostB's agent worked {:?}, \
         hostA's started at {:?}",
        report.overlap, report.gap, report.b_worked_after_freeze, report.a_started_after_freeze
    );
    assert!(!t1.ended, "t1's agent on hostB ran to its end: {t1:?}");
    assert_eq!(
        report.overlap,
        Duration::ZERO,
        "key k ran on both hosts: hostB's agent worked on after hostA's started ({report:?}); \
         hostB's worker log ends:\n{}",
        b1.stderr_tail(30)
    );
    assert_eq!(outcome(&ended), "interrupted", "{ended}");
    assert_eq!(
        queue_result(c, "t1").unwrap(),
        ended,
        "t1's result was replaced"
    );
    for (path, v) in result_copies(c, "t1") {
        assert_ne!(
            outcome(&v),
            "success",
            "{} says success: {v}",
            path.display()
        );
    }
    assert_eq!(outcome(&queue_result(c, "t2").unwrap()), "success");
    assert_all_running(&mut [("A0", &mut a0), ("B1", &mut b1)]);
    report
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// `freeze(SIGSTOP)`/`freeze(SIGCONT)` for the processes `pids` (a host's filesystem
/// client).
pub(crate) fn signal_pids(pids: Vec<u32>) -> impl Fn(Signal) {
    move |sig| {
        for p in &pids {
            let _ = kill(Pid::from_raw(*p as i32), sig);
        }
    }
}

#[test]
fn a_partitioned_host_stops_its_agent_before_the_other_runs_the_key_on_sshfs() {
    require!(multihost_env::available());
    let c = Cluster::start(&["hostA", "hostB"], Cache::Off, PARTITION_CONFIG);
    let freeze = signal_pids(vec![c.fs_client(1)]);
    a_partition(&c, &freeze);
}

#[test]
fn a_partitioned_host_stops_its_agent_before_the_other_runs_the_key_on_glusterfs() {
    multihost_env::require_fs!(multihost_env::Fs::Gluster);
    let c = Cluster::start_on(
        multihost_env::Fs::Gluster,
        &["hostA", "hostB"],
        PARTITION_CONFIG,
    );
    // Host B's glusterfs FUSE client stopped: every call of B into the volume hangs.
    let freeze = signal_pids(vec![c.fs_client(1)]);
    a_partition(&c, &freeze);
}
