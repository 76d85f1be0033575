//! Two hosts on one shared root (the sshfs / GlusterFS + namespaces harness of the
//! multi-host tests): pickup and throughput across the two mounts, on sshfs with its
//! caches on and off and on GlusterFS.
//!
//! `cargo bench --bench multihost` (as root; `-- --samples N` for the pickup sample size,
//! `-- --fs sshfs-default|sshfs-off|gluster|gluster-inval|nfs` for one filesystem only;
//! NFS runs only where the kernel has an NFS client). Pickup: a task is
//! submitted (queue) or sent (inbox) on host B, one at a time, and picked up by a worker
//! on host A: from `conductor` returning on B to the agent's first line on A (both hosts
//! are namespaces of one machine: one clock). Before each submit the bench waits 0, 0.3,
//! 1 or 2.5 s in turn, so that A's poller is caught fast (just after the previous task,
//! within the same second) as well as slowed down by idleness. Throughput: 2 workers per
//! host drain 120 tasks submitted up front from both hosts.

#[path = "../tests/integration/harness.rs"]
mod harness;
#[path = "../tests/integration/multihost_env.rs"]
mod multihost_env;
#[path = "../tests/integration/multihost_gluster.rs"]
mod multihost_gluster;
#[path = "../tests/integration/multihost_mounts.rs"]
#[allow(dead_code)]
mod multihost_mounts;
#[path = "../tests/integration/multihost_nfs.rs"]
mod multihost_nfs;
#[path = "../tests/integration/prereq.rs"]
#[allow(unused_macros, unused_imports)]
mod prereq;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use multihost_env::{Cache, Cluster, Fs, Host, HostProc};

const BOUND: Duration = Duration::from_secs(120);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn worker(c: &Cluster, host: &Host, slot: u32) -> HostProc {
    let log = c.scratch.join(format!("worker-{}-{slot}.log", host.name));
    let runs = host.mount.join("runs");
    let w = host.worker(
        slot,
        &harness::agent("multihost.sh"),
        &log,
        &[("AGENT_LOG_DIR", runs.to_str().unwrap())],
    );
    let status = c.root.join(format!("workers/{slot}/status.json"));
    harness::wait_until(BOUND, "a worker to serve", || {
        std::fs::read_to_string(&status).is_ok_and(|s| s.contains(&host.name))
    });
    w
}

/// The agent's start instant of task `id`, once its record exists.
fn started(runs: &Path, id: &str) -> Option<u128> {
    let e = std::fs::read_dir(runs).ok()?.flatten().find(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{id}."))
    })?;
    let text = std::fs::read_to_string(e.path()).ok()?;
    text.split(' ').nth(3)?.parse().ok()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn pickup(c: &Cluster, samples: usize, inbox: bool) -> String {
    let (b, runs) = (&c.hosts[1], c.backing.join("runs"));
    let mut ms = Vec::new();
    let gaps = [0, 300, 1000, 2500];
    for i in 0..samples {
        // Pacing, not synchronisation: how long host A has been idle.
        std::thread::sleep(Duration::from_millis(gaps[i % gaps.len()]));
        let id = format!("p{}{i}", if inbox { "i" } else { "q" });
        let args: Vec<&str> = if inbox {
            vec!["send", "0", "--id", &id, "k 0"]
        } else {
            vec!["submit", "--id", &id, "k 0"]
        };
        // Through a cached mount host B may still see the previous task in the inbox
        // (sshfs's directory cache): `send` refuses until the cache lets go.
        let deadline = Instant::now() + BOUND;
        loop {
            let (code, _, err) = b.conductor(&args);
            if code == Some(0) {
                break;
            }
            assert!(
                code == Some(3) && Instant::now() < deadline,
                "{args:?}: {err}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let sent = now_ns();
        let result = c.root.join(format!("workers/0/results/{id}.json"));
        harness::wait_until(BOUND, "a pickup", || result.exists());
        let start = started(&runs, &id).expect("the agent's record");
        ms.push(start.saturating_sub(sent) as f64 / 1e6);
    }
    ms.sort_by(f64::total_cmp);
    format!(
        "p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        percentile(&ms, 0.99),
        percentile(&ms, 1.0)
    )
}

fn throughput(fs: Fs) -> String {
    let c = Cluster::start_on(fs, &["hostA", "hostB"], "{}\n");
    std::fs::create_dir(c.backing.join("runs")).unwrap();
    let (a, b) = (&c.hosts[0], &c.hosts[1]);
    let _w = [
        worker(&c, a, 0),
        worker(&c, a, 1),
        worker(&c, b, 2),
        worker(&c, b, 3),
    ];
    let per_host = 60;
    let conductor = harness::bin("conductor");
    let script = |prefix: &str| {
        (0..per_host)
            .map(|i| {
                format!(
                    "{} submit -q --id {prefix}{i} 'k 0' >/dev/null",
                    conductor.display()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| a.sh(&script("a")));
        s.spawn(|| b.sh(&script("b")));
    });
    let results = c.root.join("queue/results");
    harness::wait_until(Duration::from_secs(600), "every result", || {
        std::fs::read_dir(&results).map(|d| d.count()).unwrap_or(0) >= 2 * per_host
    });
    let secs = t0.elapsed().as_secs_f64();
    format!(
        "{} tasks in {secs:.1} s: {:.1} tasks/s",
        2 * per_host,
        (2 * per_host) as f64 / secs
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let samples = arg("--samples").and_then(|n| n.parse().ok()).unwrap_or(20);
    let only = arg("--fs");
    for (fs, key, name) in [
        (
            Fs::Sshfs(Cache::Default),
            "sshfs-default",
            "sshfs default cache",
        ),
        (Fs::Sshfs(Cache::Off), "sshfs-off", "sshfs cache off"),
        (Fs::Gluster, "gluster", "GlusterFS defaults"),
        (
            Fs::GlusterInvalidating,
            "gluster-inval",
            "GlusterFS cache invalidation on",
        ),
        (Fs::Nfs, "nfs", "NFS (kernel client, nfs-ganesha)"),
    ] {
        if only.as_deref().is_some_and(|o| o != key) {
            continue;
        }
        if let Err(why) = multihost_env::available_on(fs) {
            println!("{name}: skipped: {why}");
            continue;
        }
        let c = Cluster::start_on(fs, &["hostA", "hostB"], "{}\n");
        std::fs::create_dir(c.backing.join("runs")).unwrap();
        let _a0 = worker(&c, &c.hosts[0], 0);
        println!(
            "{name}: pickup across hosts, queue ({samples} tasks): {}",
            pickup(&c, samples, false)
        );
        println!(
            "{name}: pickup across hosts, inbox ({samples} tasks): {}",
            pickup(&c, samples, true)
        );
        drop(_a0);
        drop(c);
        println!(
            "{name}: throughput, 2 hosts x 2 workers: {}",
            throughput(fs)
        );
    }
}
