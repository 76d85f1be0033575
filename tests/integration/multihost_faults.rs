//! A host that dies, a host that stops past its lease, a half-made lock from another
//! host: what the surviving host does about each (multihost_env.rs makes the hosts).

use nix::sys::signal::Signal;

use crate::harness::wait_until;
use crate::multihost::{
    assert_all_running, outcome, queue_result, result_copies, runs, status, submit_all,
    wait_seen_by, worker, BOUND,
};
use crate::multihost_env::{self, Cache, Cluster, Fs};
use crate::prereq::require;

/// Short enough to keep the scenarios quick, three heartbeats (2 s) long.
const LEASE_CONFIG: &str = "{\"leaseSecs\": 6}\n";

/// Start host B's task `id` (key `k`, held until `hold` exists) on B's worker 1 and wait
/// until it runs; B's pids are pushed past 3000 first so that they are free on host A.
fn running_on_b(c: &Cluster, id: &str, hold: &str) -> crate::multihost_env::HostProc {
    let b = &c.hosts[1];
    b.sh("echo 3000 > /proc/sys/kernel/ns_last_pid");
    let w = worker(c, b, 1);
    let hold_on_b = b.mount.join(hold);
    submit_all(
        b,
        &[(
            id.into(),
            "k".into(),
            format!("k 0 {}", hold_on_b.display()),
        )],
    );
    wait_until(BOUND, &format!("{id} to run on hostB"), || {
        status(c, 1).is_some_and(|s| {
            s["status"] == "working" && s["taskId"] == id && s["agentPid"].is_u64()
        })
    });
    w
}

/// Host B dies with its task running: host A interrupts it once, after the lease.
fn killed_host(fs: Fs) {
    multihost_env::require_fs!(fs);
    let mut c = Cluster::start_on(fs, &["hostA", "hostB"], LEASE_CONFIG);
    std::fs::create_dir(c.backing.join("runs")).expect("runs dir");
    let b1 = running_on_b(&c, "t1", "never");
    let st = status(&c, 1).unwrap();
    let (b_worker, b_agent) = (
        st["workerPid"].as_u64().unwrap(),
        st["agentPid"].as_u64().unwrap(),
    );
    let mut a0 = worker(&c, &c.hosts[0], 0);
    // Processes of host A at host B's worker and agent pids: a recovery that judged or
    // signalled B's pids locally would hit them.
    let bystanders = [
        c.hosts[0].occupy_pid(b_worker as u32),
        c.hosts[0].occupy_pid(b_agent as u32),
    ];
    c.hosts[1].kill();
    drop(b1);
    wait_seen_by(&a0, "hostA to end t1 after hostB's lease", || {
        queue_result(&c, "t1").is_some()
    });
    let r = queue_result(&c, "t1").unwrap();
    assert_eq!(outcome(&r), "interrupted", "{r}");
    // The key is free again: a task on it runs to success on host A.
    submit_all(&c.hosts[0], &[("t2".into(), "k".into(), "k 0".into())]);
    wait_seen_by(&a0, "t2's result", || queue_result(&c, "t2").is_some());
    assert_eq!(outcome(&queue_result(&c, "t2").unwrap()), "success");
    // Ended once: every copy of t1's result is that one interruption, and it never ran again.
    for (path, v) in result_copies(&c, "t1") {
        assert_eq!(
            v,
            r,
            "{} differs from queue/results/t1.json",
            path.display()
        );
    }
    let t1_runs = runs(&c.backing.join("runs"));
    assert_eq!(
        t1_runs.iter().filter(|r| r.id == "t1").count(),
        1,
        "{t1_runs:?}"
    );
    for by in bystanders {
        assert!(by.alive(), "host A's pid {} was killed: {by:?}", by.inner);
    }
    assert_all_running(&mut [("A0", &mut a0)]);
}

#[test]
fn a_killed_hosts_task_is_interrupted_once_by_the_other_after_the_lease() {
    killed_host(Fs::Sshfs(Cache::Off));
}

#[test]
fn a_killed_hosts_task_is_interrupted_once_by_the_other_after_the_lease_on_glusterfs() {
    killed_host(Fs::Gluster);
}

#[test]
fn a_killed_hosts_task_is_interrupted_once_by_the_other_after_the_lease_on_nfs() {
    killed_host(Fs::Nfs);
}

/// Host B stops (SIGSTOP) past its lease with its task running: host A ends the task
/// and runs the key's next one, and B publishes no second result when it resumes. On
/// GlusterFS B's flocks stay held by its (running) FUSE client all along.
fn paused_host(fs: Fs) {
    multihost_env::require_fs!(fs);
    let c = Cluster::start_on(fs, &["hostA", "hostB"], LEASE_CONFIG);
    std::fs::create_dir(c.backing.join("runs")).expect("runs dir");
    let mut b1 = running_on_b(&c, "t1", "go");
    let agent = status(&c, 1).unwrap()["agentPid"].as_u64().unwrap() as u32;
    let mut a0 = worker(&c, &c.hosts[0], 0);
    c.hosts[1].signal_all(Signal::SIGSTOP);
    wait_seen_by(&a0, "hostA to end t1 after hostB's lease", || {
        queue_result(&c, "t1").is_some()
    });
    let ended = queue_result(&c, "t1").unwrap();
    assert_eq!(outcome(&ended), "interrupted", "{ended}");
    submit_all(&c.hosts[0], &[("t2".into(), "k".into(), "k 0".into())]);
    wait_seen_by(&a0, "t2's result", || queue_result(&c, "t2").is_some());
    assert_eq!(outcome(&queue_result(&c, "t2").unwrap()), "success");
    // Let t1's agent finish the moment host B runs again: its worker must not publish it.
    std::fs::write(c.backing.join("go"), "").expect("release t1's agent");
    c.hosts[1].signal_all(Signal::SIGCONT);
    // t1's agent ends at once; a task sent to host B's own slot after it shows when
    // B's worker is past t1 (and still working).
    wait_until(BOUND, "t1's agent on hostB to end", || {
        !c.hosts[1].has_pid(agent) || b1.exited().is_some()
    });
    let (code, _, err) = c.hosts[1].conductor(&["send", "1", "--id", "t3", "k3 0"]);
    assert_eq!(code, Some(0), "send t3 to hostB's slot 1: {err}");
    let t3 = c.root.join("workers/1/results/t3.json");
    wait_until(BOUND, "t3's result from hostB's worker", || {
        t3.exists() || b1.exited().is_some()
    });
    assert_all_running(&mut [("A0", &mut a0), ("B1", &mut b1)]);
    assert_eq!(outcome(&crate::multihost::json(&t3).unwrap()), "success");
    assert_eq!(
        queue_result(&c, "t1").unwrap(),
        ended,
        "t1's result was replaced"
    );
    for (path, v) in result_copies(&c, "t1") {
        assert_ne!(
            outcome(&v),
            "success",
            "{} says success: {v}",
            path.display()
        );
    }
    assert_all_running(&mut [("A0", &mut a0), ("B1", &mut b1)]);
}

#[test]
fn a_host_paused_past_its_lease_publishes_no_second_success() {
    paused_host(Fs::Sshfs(Cache::Off));
}

#[test]
fn a_host_paused_past_its_lease_publishes_no_second_success_on_glusterfs() {
    paused_host(Fs::Gluster);
}

#[test]
fn a_host_paused_past_its_lease_publishes_no_second_success_on_nfs() {
    paused_host(Fs::Nfs);
}

// A partition (a host's filesystem client frozen while its agent runs) is
// multihost_partition.rs's `a_partition`, run there on sshfs and on GlusterFS. Not on
// NFS: the kernel's client is no process to freeze, and the hosts' mounts share one
// network namespace, so one host cannot be cut off alone.

#[test]
fn a_pid_only_lock_from_another_host_is_not_taken_over_while_fresh() {
    require!(multihost_env::available());
    let c = Cluster::start(
        &["hostA", "hostB"],
        Cache::Off,
        "{\"lockGraceSecs\": 600}\n",
    );
    std::fs::create_dir(c.backing.join("runs")).expect("runs dir");
    let (a, b) = (&c.hosts[0], &c.hosts[1]);
    // What a lock looks like between mkdir and owner.json, made by host B's pid 11.
    let lock_on_b = b.root.join("keys/kp.lock");
    b.sh(&format!(
        "mkdir -p {l} && echo 11 > {l}/pid",
        l = lock_on_b.display()
    ));
    let mut a0 = worker(&c, a, 0);
    submit_all(
        a,
        &[
            ("tp".into(), "kp".into(), "kp 0".into()),
            ("tq".into(), "kq".into(), "kq 2".into()),
        ],
    );
    // tp comes first in the queue: by the time tq is done the worker has passed it over.
    wait_until(BOUND, "tq's result", || queue_result(&c, "tq").is_some());
    let lock = c.root.join("keys/kp.lock");
    assert_eq!(
        std::fs::read_to_string(lock.join("pid")).ok().as_deref(),
        Some("11\n"),
        "host B's lock was taken over; hostA's worker log:\n{}",
        a0.stderr()
    );
    assert!(
        queue_result(&c, "tp").is_none(),
        "tp ran under host B's lock"
    );
    assert!(!a0.stderr().contains("taking over"), "{}", a0.stderr());
    // Once host B lets go, the task runs.
    b.sh(&format!("rm -r {}", lock_on_b.display()));
    wait_seen_by(&a0, "tp's result", || queue_result(&c, "tp").is_some());
    assert_eq!(outcome(&queue_result(&c, "tp").unwrap()), "success");
    assert_all_running(&mut [("A0", &mut a0)]);
}
