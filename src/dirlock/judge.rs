//! The stale-lock judgement: a pure function of what a lock directory held and what is
//! known about the process it names.

use std::time::{Duration, SystemTime};

use super::owner::{Liveness, LockOptions, LockOwner};
use crate::protocol::parse_rfc3339;

/// How much later than its lock directory a process must have started before it is
/// judged not to be the holder. Covers the tick (10 ms) and `/proc/uptime` (10 ms)
/// resolution of the computed start and coarse filesystem timestamps, with room for
/// small wall-clock adjustments.
pub const STARTED_AFTER_MARGIN: Duration = Duration::from_secs(2);

/// What `owner.json` held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OwnerRead {
    Missing,
    /// Present but unusable; says why.
    Corrupt(String),
    Valid(LockOwner),
}

/// What a lock directory held when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRead {
    /// The number in `pid`; `None` when the file is missing or holds no number.
    pub pid_file: Option<u32>,
    pub owner: OwnerRead,
    /// The directory's mtime: it changes whenever its holder adds a file.
    pub modified: SystemTime,
    /// Its birth time, where the filesystem records one.
    pub created: Option<SystemTime>,
    /// How long this process has seen it, without a break, with no pid at all (zero
    /// the first time; a lock seen owned or gone starts again).
    pub ownerless_for: Duration,
    /// How long this process has seen the same owner record (its nonce and its last
    /// renewal's time), by its own monotonic clock: what another host's lease is judged
    /// by, since that host's clock may differ from ours (zero the first time).
    pub unchanged_for: Duration,
}

impl LockRead {
    /// The pid the judgement is about: `owner.json`'s, else the `pid` file's.
    pub fn pid(&self) -> Option<u32> {
        match &self.owner {
            OwnerRead::Valid(o) => Some(o.pid),
            _ => self.pid_file,
        }
    }

    /// The directory was made no later than this (its mtime only moves forward from
    /// its creation, except by hand).
    fn made_by(&self) -> SystemTime {
        self.created.map_or(self.modified, |c| c.min(self.modified))
    }
}

/// What is known about the process [`LockRead::pid`] names, on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFacts {
    pub alive: bool,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: Option<u64>,
    /// The same as wall-clock time.
    pub started_at: Option<SystemTime>,
    /// Live processes of this host carrying the marker of the task the lock is held
    /// for (looked for only when its holder is gone).
    pub task_processes: Vec<u32>,
    /// The process's command line (`""`: a kernel thread), read only for a live pid
    /// named by a pid-only lock: whether it is a conductor program decides whether it
    /// can be that lock's holder. `None`: not read, or unreadable.
    pub command: Option<String>,
}

/// Who is judging, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vantage {
    pub host: String,
    /// `host::host_id()`: an owner with another id is judged by its lease alone.
    pub host_id: String,
    pub boot_id: String,
    pub now: SystemTime,
    /// The judge holds a gate that every taker of this lock holds while taking it, so
    /// nobody can be between `mkdir` and writing the owner: no grace is due.
    pub gated: bool,
    /// The lock is on a filesystem other hosts may mount. Its flocks may not reach
    /// them, so a gate held here earns no shortcut; and a client's caches may answer a
    /// stat for a lock that is gone (with the mtime of when it was seen), so an
    /// ownerless lock is dated by how long we ourselves have seen it so.
    pub shared: bool,
}

/// Whether the lock described by `read` is held by somebody alive, and why.
/// `process` is what is known about `read.pid()` on this host (`None`: nothing, e.g.
/// no pid or no need to look). `None` as the result: there is no lock.
/// How far another host's clock may be off ours before a lease dated by it is past
/// doubt: a record older than lease + this is stale at first sight; a younger one only
/// once this process has seen it unchanged for the lease.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(600);

pub fn verdict(
    read: Option<&LockRead>,
    process: Option<&ProcessFacts>,
    at: &Vantage,
    opts: &LockOptions,
) -> Option<Liveness> {
    let read = read?;
    let gone = ProcessFacts {
        alive: false,
        start_time: None,
        started_at: None,
        task_processes: Vec::new(),
        command: None,
    };
    let facts = process.unwrap_or(&gone);
    Some(match (&read.owner, read.pid_file) {
        (OwnerRead::Valid(o), _) => judge_owner(o, read, facts, at, opts),
        // Only a pid: an older version's or the original conductor's lock, or another
        // host's — locks are born with their owner, so never one of ours. Its pid may
        // mean another process here, so it is never proof of death by itself: the lock
        // is alive while younger than the grace, and after it, while a live process
        // here that predates it has that pid (an original conductor on this host).
        (why, Some(pid)) => {
            let note = match why {
                OwnerRead::Corrupt(e) => format!("owner.json unreadable: {e}"),
                _ => "no owner.json".to_string(),
            };
            let age = age(read.modified, at.now);
            if age <= opts.grace && at.gated && !at.shared && !facts.alive {
                // Every taker on this host holds the gate we hold, and no other host
                // reaches this filesystem: a dead pid here is the holder's, gone.
                Liveness::Stale(format!(
                    "pid {pid} is not alive ({note}), and every taker holds the gate we hold"
                ))
            } else if age <= opts.grace {
                Liveness::Alive(format!(
                    "pid {pid} recorded {}s ago, {note}: perhaps another host's or an older \
                     version's, young (grace {}s)",
                    age.as_secs(),
                    opts.grace.as_secs()
                ))
            } else if !facts.alive {
                Liveness::Stale(format!(
                    "pid {pid} is not alive here and the lock is {}s old ({note})",
                    age.as_secs()
                ))
            } else if started_after(facts, read) {
                Liveness::Stale(format!(
                    "pid {pid} started after the lock was made, so it is not its holder ({note})"
                ))
            } else if let Some(what) = reused_by(why, facts, at) {
                // Older than the lock, but no client of the lock protocol: reused.
                Liveness::Stale(format!(
                    "pid {pid} is {what}, so not the holder of a lock only conductor programs \
                     write ({note})"
                ))
            } else {
                Liveness::Alive(format!("held by live pid {pid}{} ({note})", older_than(facts, read)))
            }
        }
        (_, None) => judge_ownerless(read, at, opts),
    })
}

/// What the live process a lock with only a `pid` names runs, when that proves it is
/// not the holder: the lock has no `owner.json` at all (a torn one may be a live
/// holder's being rewritten) and no other host reaches its filesystem (there the pid
/// may be another host's, alive here by chance).
fn reused_by(owner: &OwnerRead, facts: &ProcessFacts, at: &Vantage) -> Option<String> {
    if at.shared || !matches!(owner, OwnerRead::Missing) {
        return None;
    }
    facts
        .command
        .as_deref()
        .and_then(super::pid_only::not_a_holder)
}

/// What a live pid older than a pid-only lock runs and when it started, against the
/// lock's making — what an operator needs to judge it (empty when unknown).
fn older_than(facts: &ProcessFacts, read: &LockRead) -> String {
    let (Some(command), Some(started)) = (facts.command.as_deref(), facts.started_at) else {
        return String::new();
    };
    format!(
        ": `{}`, started {}, before the lock was made ({})",
        super::pid_only::shown(command),
        crate::protocol::rfc3339(started),
        crate::protocol::rfc3339(read.made_by())
    )
}

/// The process started (clearly) after the lock directory was made.
fn started_after(facts: &ProcessFacts, read: &LockRead) -> bool {
    facts
        .started_at
        .is_some_and(|s| s > read.made_by() + STARTED_AFTER_MARGIN)
}

fn age(t: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(t).unwrap_or_default()
}

/// No pid anywhere: somebody between `mkdir` and its first write, or one who died there.
fn judge_ownerless(read: &LockRead, at: &Vantage, opts: &LockOptions) -> Liveness {
    let what = match &read.owner {
        OwnerRead::Corrupt(e) => format!("no pid, owner.json unreadable ({e})"),
        _ => "no owner recorded".to_string(),
    };
    // Across hosts an ownerless read is more often a client cache answering for a lock
    // that has just gone (or been replaced) than a holder that died: only a gate that
    // excludes every host lets us skip the grace.
    if at.gated && !at.shared {
        return Liveness::Stale(format!(
            "{what}, and every taker holds the gate we hold: left by a holder that died"
        ));
    }
    let mut age = age(read.modified, at.now);
    if at.shared {
        age = age.min(read.ownerless_for);
    }
    if age > opts.grace {
        Liveness::Stale(format!(
            "{what} for {}s (grace {}s)",
            age.as_secs(),
            opts.grace.as_secs()
        ))
    } else {
        Liveness::Alive(format!(
            "being acquired: {what} yet ({}ms old)",
            age.as_millis()
        ))
    }
}

fn judge_owner(
    o: &LockOwner,
    read: &LockRead,
    facts: &ProcessFacts,
    at: &Vantage,
    opts: &LockOptions,
) -> Liveness {
    let pid = o.pid;
    // Our host name on another boot: this machine before a reboot. (Two machines
    // sharing one host name cannot be told from that: give hosts distinct names.)
    if o.host == at.host
        && !o.boot_id.is_empty()
        && !at.boot_id.is_empty()
        && o.boot_id != at.boot_id
    {
        return Liveness::Stale(format!("held by pid {pid} before this machine rebooted"));
    }
    let other_host = match &o.host_id {
        Some(id) => *id != at.host_id,
        None => o.host != at.host,
    };
    if other_host {
        return judge_remote_owner(o, read, at, opts);
    }
    let gone = if !facts.alive {
        format!("holder pid {pid} is dead")
    } else {
        match (o.start_time, facts.start_time) {
            (Some(expected), Some(actual)) if expected != actual => format!(
                "pid {pid} now belongs to another process (start time {actual}, lock says {expected})"
            ),
            (None, _) if started_after(facts, read) => {
                format!("pid {pid} started after the lock was made, so it is not its holder")
            }
            _ => return Liveness::Alive(format!("held by live pid {pid}")),
        }
    };
    match (&o.task, facts.task_processes.as_slice()) {
        // The agent's children outlived the holder: the task still runs, so its key or
        // run slot is still taken, until recovery of its slot stops them.
        (Some(task), [first, ..]) => Liveness::Alive(format!(
            "{gone}, but task {task} still runs here (pid {first}{}): freed once recovery of \
             its worker slot stops it",
            match facts.task_processes.len() - 1 {
                0 => String::new(),
                more => format!(" and {more} more"),
            }
        )),
        _ => Liveness::Stale(gone),
    }
}

/// A holder on another host: judged by its heartbeat against the lease, by that host's
/// clock, and by how long this process has seen the record unchanged.
fn judge_remote_owner(
    o: &LockOwner,
    read: &LockRead,
    at: &Vantage,
    opts: &LockOptions,
) -> Liveness {
    let pid = o.pid;
    let last = o
        .heartbeat_at
        .as_deref()
        .and_then(parse_rfc3339)
        .or_else(|| parse_rfc3339(&o.acquired_at));
    let (host, lease) = (&o.host, opts.lease.as_secs());
    let Some(t) = last else {
        return Liveness::Stale(format!(
            "held by pid {pid} on host {host} with no readable timestamp"
        ));
    };
    let dated = age(t, at.now);
    if dated <= opts.lease {
        return Liveness::Alive(format!(
            "alive on host {host} (pid {pid}), heartbeat {}s ago (lease {lease}s)",
            dated.as_secs(),
        ));
    }
    // Its date is that host's clock, not ours: past the lease by it is proof only
    // once this process has seen the record not move for a lease itself, or when it
    // is older than any clock could be off.
    let seen = read.unchanged_for;
    if seen >= opts.lease {
        Liveness::Stale(format!(
            "held by pid {pid} on host {host}, not renewed for {}s (lease {lease}s; seen \
             unchanged here for {}s)",
            dated.as_secs(),
            seen.as_secs()
        ))
    } else if dated > opts.lease + MAX_CLOCK_SKEW {
        Liveness::Stale(format!(
            "held by pid {pid} on host {host}, not renewed for {}s (lease {lease}s)",
            dated.as_secs()
        ))
    } else {
        Liveness::Alive(format!(
            "on host {host} (pid {pid}), heartbeat {}s ago by its clock (lease {lease}s): \
             clocks may differ, so it is taken over only once seen unchanged here for the \
             lease ({}s so far)",
            dated.as_secs(),
            seen.as_secs()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn here(gated: bool) -> Vantage {
        Vantage {
            host: "here".into(),
            host_id: "id-here".into(),
            boot_id: "boot-1".into(),
            now: now(),
            gated,
            shared: false,
        }
    }

    fn owner(host: &str, boot: &str, start_time: Option<u64>) -> LockOwner {
        LockOwner {
            pid: 4711,
            host: host.into(),
            boot_id: boot.into(),
            start_time,
            nonce: "n".into(),
            acquired_at: crate::protocol::rfc3339(now() - Duration::from_secs(5)),
            heartbeat_at: None,
            host_id: None,
            epoch: 1,
            task: None,
        }
    }

    /// A lock directory last changed `age` before now.
    fn lock(owner: OwnerRead, pid_file: Option<u32>, age: Duration) -> LockRead {
        LockRead {
            pid_file,
            owner,
            modified: now() - age,
            created: None,
            ownerless_for: age,
            unchanged_for: Duration::ZERO,
        }
    }

    /// A live process with start time 100 ticks that started `before` the lock's mtime
    /// (negative: after it).
    fn live(read: &LockRead, started_before_lock: i64) -> ProcessFacts {
        let d = Duration::from_secs(started_before_lock.unsigned_abs());
        ProcessFacts {
            alive: true,
            start_time: Some(100),
            started_at: Some(if started_before_lock >= 0 {
                read.modified - d
            } else {
                read.modified + d
            }),
            task_processes: Vec::new(),
            command: None,
        }
    }

    const DEAD: ProcessFacts = ProcessFacts {
        alive: false,
        start_time: None,
        started_at: None,
        task_processes: Vec::new(),
        command: None,
    };

    #[test]
    fn a_dead_holders_lock_stays_taken_while_its_task_still_runs_here() {
        let mut o = owner("here", "boot-1", Some(100));
        o.task = Some("t7".into());
        let read = lock(
            OwnerRead::Valid(o.clone()),
            Some(4711),
            Duration::from_secs(5),
        );
        let leftovers = ProcessFacts {
            task_processes: vec![5001, 5002],
            ..DEAD
        };
        match judged(&read, Some(&leftovers), false) {
            Liveness::Alive(why) => {
                assert!(
                    why.contains("task t7 still runs here (pid 5001 and 1 more)"),
                    "{why}"
                )
            }
            stale => panic!("a lock whose task still runs was judged {stale:?}"),
        }
        // Once they are gone, the dead holder's lock is free.
        stale(&read, Some(&DEAD), false, "nothing of the task is left");
        // A reused pid is no holder either, but the task's processes still count.
        let reused = ProcessFacts {
            start_time: Some(999),
            task_processes: vec![5001],
            ..live(&read, 3600)
        };
        assert!(!judged(&read, Some(&reused), false).is_stale());
    }

    #[track_caller]
    fn judged(read: &LockRead, facts: Option<&ProcessFacts>, gated: bool) -> Liveness {
        verdict(Some(read), facts, &here(gated), &LockOptions::default()).expect("a lock")
    }

    #[track_caller]
    fn stale(read: &LockRead, facts: Option<&ProcessFacts>, gated: bool, why: &str) -> String {
        match judged(read, facts, gated) {
            Liveness::Stale(r) => r,
            alive => panic!("{why}: expected stale, got {alive:?}"),
        }
    }

    #[track_caller]
    fn alive(read: &LockRead, facts: Option<&ProcessFacts>, gated: bool, why: &str) -> String {
        match judged(read, facts, gated) {
            Liveness::Alive(r) => r,
            s => panic!("{why}: expected alive, got {s:?}"),
        }
    }

    #[test]
    fn no_lock_is_free() {
        let at = here(false);
        assert_eq!(verdict(None, None, &at, &LockOptions::default()), None);
        assert_eq!(
            verdict(None, Some(&DEAD), &here(true), &LockOptions::default()),
            None
        );
    }

    #[test]
    fn a_local_owner_is_judged_by_its_process() {
        let read = lock(
            OwnerRead::Valid(owner("here", "boot-1", Some(100))),
            Some(4711),
            HOUR,
        );
        for gated in [false, true] {
            let r = alive(&read, Some(&live(&read, 10)), gated, "live holder");
            assert_eq!(r, "held by live pid 4711");
            let r = stale(&read, Some(&DEAD), gated, "dead holder");
            assert_eq!(r, "holder pid 4711 is dead");
            let reused = ProcessFacts {
                start_time: Some(101),
                ..live(&read, 10)
            };
            let r = stale(&read, Some(&reused), gated, "reused pid");
            assert!(
                r.contains("another process (start time 101, lock says 100)"),
                "{r}"
            );
        }
        // Not known at all (nobody looked): dead.
        stale(&read, None, false, "no facts");
    }

    #[test]
    fn an_owner_without_a_start_time_is_judged_by_when_its_pid_started() {
        let read = lock(
            OwnerRead::Valid(owner("here", "boot-1", None)),
            Some(4711),
            HOUR,
        );
        alive(
            &read,
            Some(&live(&read, 10)),
            false,
            "started before the lock",
        );
        let r = stale(
            &read,
            Some(&live(&read, -600)),
            false,
            "started after the lock",
        );
        assert!(r.contains("started after the lock was made"), "{r}");
    }

    #[test]
    fn an_owner_from_before_a_reboot_is_stale_even_if_its_pid_lives() {
        let read = lock(
            OwnerRead::Valid(owner("here", "boot-0", Some(100))),
            None,
            HOUR,
        );
        let r = stale(&read, Some(&live(&read, 10)), false, "other boot");
        assert!(r.contains("rebooted"), "{r}");
        // An owner that recorded no boot id (or a platform without one) is not judged by it.
        let read = lock(OwnerRead::Valid(owner("here", "", Some(100))), None, HOUR);
        alive(&read, Some(&live(&read, 10)), false, "no boot id");
    }

    #[test]
    fn another_hosts_clock_is_not_ours_to_judge_its_lease_by() {
        let mut o = owner("there", "boot-9", Some(100));
        // Five minutes old by the other host's clock: its clock may be behind ours.
        o.heartbeat_at = Some(crate::protocol::rfc3339(now() - Duration::from_secs(300)));
        let read = lock(OwnerRead::Valid(o.clone()), None, HOUR);
        let r = alive(&read, None, false, "first sight of a skewed record");
        assert!(r.contains("clocks may differ"), "{r}");
        let watched = LockRead {
            unchanged_for: Duration::from_secs(121),
            ..read.clone()
        };
        let r = stale(&watched, None, false, "seen unchanged for the lease");
        assert!(r.contains("seen unchanged here for 121s"), "{r}");
        // Older than any clock could be off: stale at first sight.
        o.heartbeat_at = Some(crate::protocol::rfc3339(now() - HOUR));
        let read = lock(OwnerRead::Valid(o), None, HOUR);
        stale(&read, None, false, "past lease + MAX_CLOCK_SKEW");
    }

    #[test]
    fn another_hosts_owner_is_judged_by_its_lease_alone() {
        let mut o = owner("there", "boot-9", Some(100));
        let read = lock(OwnerRead::Valid(o.clone()), Some(4711), HOUR);
        // Our local pid 4711 being dead (or alive) says nothing about the other host.
        let r = alive(&read, Some(&DEAD), true, "within the lease");
        assert!(
            r.contains("alive on host there (pid 4711), heartbeat 5s ago (lease 120s)"),
            "{r}"
        );

        o.acquired_at = crate::protocol::rfc3339(now() - HOUR);
        let read = lock(OwnerRead::Valid(o.clone()), None, HOUR);
        let r = stale(&read, Some(&live(&read, 10)), false, "past the lease");
        assert!(r.contains("not renewed for 3600s (lease 120s)"), "{r}");

        o.heartbeat_at = Some(crate::protocol::rfc3339(now() - Duration::from_secs(60)));
        let read = lock(OwnerRead::Valid(o.clone()), None, HOUR);
        alive(&read, None, false, "renewed by a heartbeat");

        o.heartbeat_at = Some("yesterday".into());
        o.acquired_at = "a while ago".into();
        let read = lock(OwnerRead::Valid(o), None, HOUR);
        let r = stale(&read, None, false, "no readable timestamp");
        assert!(r.contains("no readable timestamp"), "{r}");
    }

    #[test]
    fn a_pid_only_lock_is_judged_by_its_pid_and_when_it_started() {
        let read = lock(OwnerRead::Missing, Some(4711), HOUR);
        let r = alive(&read, Some(&live(&read, 10)), false, "pid-only, live");
        assert_eq!(r, "held by live pid 4711 (no owner.json)");
        let r = stale(&read, Some(&DEAD), true, "pid-only, dead");
        assert_eq!(
            r,
            "pid 4711 is not alive here and the lock is 3600s old (no owner.json)"
        );
        // Its pid was reused by a process that started after the lock was made.
        for gated in [false, true] {
            let r = stale(&read, Some(&live(&read, -600)), gated, "pid-only, reused");
            assert!(
                r.contains("pid 4711 started after the lock was made"),
                "{r}"
            );
        }
        // Within the margin, the clocks cannot tell: alive.
        alive(&read, Some(&live(&read, -1)), false, "started just after");
        // No wall-clock start known (no procfs): alive.
        let unknown = ProcessFacts {
            started_at: None,
            ..live(&read, 0)
        };
        alive(&read, Some(&unknown), false, "start unknown");
    }

    #[test]
    fn a_live_pid_older_than_a_pid_only_lock_holds_it_only_if_it_runs_a_conductor() {
        // Issue 38 item 7: pid 1 (or any long-lived process) named by a lock made long
        // after it started.
        let read = lock(OwnerRead::Missing, Some(1), HOUR);
        let running = |command: &str| ProcessFacts {
            command: Some(command.into()),
            ..live(&read, 86_400)
        };
        for (command, what) in [
            ("/sbin/init", "`/sbin/init`, neither a conductor program nor a client's runtime"),
            ("sleep 600", "`sleep 600`, neither a conductor program nor a client's runtime"),
            ("", "a kernel thread"),
        ] {
            for gated in [false, true] {
                let r = stale(&read, Some(&running(command)), gated, command);
                assert!(r.starts_with(&format!("pid 1 is {what}")), "{r}");
            }
        }
        // A conductor program may be the holder (an original client's worker, which
        // took the lock long after it started): kept, saying what was found.
        let r = alive(&read, Some(&running("node /opt/conductor/worker.js")), false, "client");
        assert!(r.contains("`node /opt/conductor/worker.js`, started "), "{r}");
        assert!(r.contains("before the lock was made ("), "{r}");
        // Unreadable command line: not proof either way.
        alive(&read, Some(&live(&read, 86_400)), false, "command unknown");
        // Where other hosts reach the lock its pid may be theirs, and a torn owner.json
        // may be a live holder's: kept.
        let shared = Vantage {
            shared: true,
            ..here(false)
        };
        let on_shared = verdict(Some(&read), Some(&running("sleep 600")), &shared, &LockOptions::default());
        assert!(on_shared.is_some_and(|l| !l.is_stale()));
        let torn = lock(OwnerRead::Corrupt("EOF".into()), Some(1), HOUR);
        alive(&torn, Some(&running("sleep 600")), false, "torn owner.json");
    }

    #[test]
    fn a_young_pid_only_lock_is_alive_whatever_its_pid_is_here() {
        // The repro: another host made `kp.lock` with `pid` 11 a moment ago.
        let young = lock(OwnerRead::Missing, Some(11), Duration::from_secs(1));
        let shared_gated = Vantage {
            shared: true,
            ..here(true)
        };
        for facts in [Some(&DEAD), None] {
            let r = alive(&young, facts, false, "pid-only, young, pid dead here");
            assert!(r.contains("young (grace 10s)"), "{r}");
            // Under a gate too, where another host can reach the filesystem.
            let on_shared = verdict(Some(&young), facts, &shared_gated, &LockOptions::default());
            assert!(
                on_shared.as_ref().is_some_and(|l| !l.is_stale()),
                "{on_shared:?}"
            );
            // Under a gate every taker holds, on a filesystem only this host reaches,
            // a dead pid was the holder: not worth the grace (issue 22).
            let r = stale(&young, facts, true, "pid-only, young, gated, local, dead");
            assert!(r.contains("every taker holds the gate"), "{r}");
        }
        let corrupt = lock(
            OwnerRead::Corrupt("EOF".into()),
            Some(11),
            Duration::from_secs(1),
        );
        alive(&corrupt, Some(&DEAD), false, "torn owner, young");
    }

    /// The judge matrix across hosts: the host id decides, not the host name.
    #[test]
    fn the_host_id_decides_who_is_judged_by_pid() {
        let opts = LockOptions::default();
        let fresh = crate::protocol::rfc3339(now() - Duration::from_secs(2));
        let old = crate::protocol::rfc3339(now() - HOUR);
        // (owner host name, owner host id, heartbeat, facts) -> stale?
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a str,
            Option<&'a ProcessFacts>,
            bool,
        );
        let cases: [Case; 8] = [
            // Same host name, other id (another container or pid namespace): the
            // local pid says nothing, dead or alive; only the lease counts.
            ("here", Some("id-there"), &fresh, Some(&DEAD), false),
            ("here", Some("id-there"), &fresh, None, false),
            ("here", Some("id-there"), &old, None, true),
            // Other name, other id.
            ("there", Some("id-there"), &fresh, Some(&DEAD), false),
            ("there", Some("id-there"), &old, None, true),
            // Our id (the name may have changed): judged by the process here.
            ("renamed", Some("id-here"), &old, Some(&DEAD), true),
            ("renamed", Some("id-here"), &fresh, Some(&DEAD), true),
            // No id (an older version): the host name decides, as before.
            ("there", None, &fresh, Some(&DEAD), false),
        ];
        for (i, (name, id, beat, facts, want_stale)) in cases.into_iter().enumerate() {
            let mut o = owner(name, "boot-1", Some(100));
            o.host_id = id.map(str::to_string);
            o.heartbeat_at = Some(beat.to_string());
            let read = lock(OwnerRead::Valid(o), Some(4711), HOUR);
            for gated in [false, true] {
                let got = verdict(Some(&read), facts, &here(gated), &opts).unwrap();
                assert_eq!(got.is_stale(), want_stale, "case {i}: {got:?}");
            }
        }
        // Our id with a live process: alive.
        let mut o = owner("renamed", "boot-1", Some(100));
        o.host_id = Some("id-here".into());
        let read = lock(OwnerRead::Valid(o), Some(4711), HOUR);
        alive(&read, Some(&live(&read, 10)), false, "ours, live");
    }

    #[test]
    fn the_birth_time_dates_a_lock_whose_mtime_moved() {
        // Made an hour ago, touched (a file added) a minute ago; the process started
        // half an hour ago: after the lock was made.
        let mut read = lock(OwnerRead::Missing, Some(4711), Duration::from_secs(60));
        let facts = live(&read, 1800);
        alive(&read, Some(&facts), false, "only the mtime known");
        read.created = Some(now() - HOUR);
        stale(&read, Some(&facts), false, "birth time known");
    }

    #[test]
    fn a_corrupt_owner_with_a_pid_file_is_judged_by_the_pid() {
        let corrupt = OwnerRead::Corrupt("expected value at line 1".into());
        let read = lock(corrupt, Some(4711), HOUR);
        let r = alive(
            &read,
            Some(&live(&read, 10)),
            true,
            "corrupt owner, live pid",
        );
        assert!(r.contains("owner.json unreadable: expected value"), "{r}");
        stale(&read, Some(&DEAD), false, "corrupt owner, dead pid");
        let r = stale(
            &read,
            Some(&live(&read, -600)),
            false,
            "corrupt owner, pid reused",
        );
        assert!(r.contains("started after the lock was made"), "{r}");
    }

    #[test]
    fn an_ownerless_lock_gets_a_grace_period_unless_the_judge_holds_the_gate() {
        for owner in [OwnerRead::Missing, OwnerRead::Corrupt("EOF".into())] {
            let young = lock(owner.clone(), None, Duration::from_secs(3));
            let r = alive(&young, None, false, "ownerless, young");
            assert!(r.starts_with("being acquired:"), "{r}");
            assert!(r.contains("3000ms old"), "{r}");
            let r = stale(&young, None, true, "ownerless, young, under the gate");
            assert!(r.contains("every taker holds the gate"), "{r}");

            let old = lock(owner, None, Duration::from_secs(11));
            let r = stale(&old, None, false, "ownerless, past the grace");
            assert!(r.contains("for 11s (grace 10s)"), "{r}");
            stale(&old, None, true, "ownerless, old, under the gate");
        }
        // A lock dated in the future (clock stepped back) is young, not stale.
        let future = LockRead {
            modified: now() + HOUR,
            ..lock(OwnerRead::Missing, None, HOUR)
        };
        alive(&future, None, false, "dated in the future");
    }

    /// The multi-host burst's fault: a gate's flock does not cross an sshfs mount, so
    /// holding it says nothing about the other host's takers; an ownerless read there
    /// (a cached stat of a lock just released) must wait out the grace like any other.
    #[test]
    fn a_gate_on_a_shared_filesystem_earns_no_shortcut() {
        let shared = Vantage {
            shared: true,
            ..here(true)
        };
        let opts = LockOptions::default();
        for owner in [OwnerRead::Missing, OwnerRead::Corrupt("EOF".into())] {
            let young = lock(owner.clone(), None, Duration::from_secs(3));
            let got = verdict(Some(&young), None, &shared, &opts).unwrap();
            match got {
                Liveness::Alive(r) => assert!(r.starts_with("being acquired:"), "{r}"),
                stale => panic!("gated on a shared filesystem, young: {stale:?}"),
            }
            let old = lock(owner, None, Duration::from_secs(11));
            let got = verdict(Some(&old), None, &shared, &opts).unwrap();
            assert!(got.is_stale(), "past the grace: {got:?}");
        }
    }

    /// The multi-host burst's fault: a client's cache kept the stat of a lock released
    /// a moment before ("exists, last changed 18 s ago") while `owner.json` was gone,
    /// and the lock was judged ownerless past the grace at first sight.
    #[test]
    fn on_a_shared_filesystem_an_ownerless_lock_is_dated_by_our_own_sight_of_it() {
        let shared = Vantage {
            shared: true,
            ..here(false)
        };
        let opts = LockOptions::default();
        let mut read = lock(OwnerRead::Missing, None, Duration::from_secs(18));
        read.ownerless_for = Duration::ZERO;
        let got = verdict(Some(&read), None, &shared, &opts).unwrap();
        assert!(!got.is_stale(), "first sight: {got:?}");
        read.ownerless_for = Duration::from_secs(11);
        let got = verdict(Some(&read), None, &shared, &opts).unwrap();
        assert!(got.is_stale(), "seen ownerless past the grace: {got:?}");
        // A local filesystem's mtime is the truth: stale at first sight.
        read.ownerless_for = Duration::ZERO;
        let got = verdict(Some(&read), None, &here(false), &opts).unwrap();
        assert!(got.is_stale(), "local: {got:?}");
    }

    #[test]
    fn the_pid_judged_is_the_owners_when_owner_json_is_valid() {
        let read = lock(
            OwnerRead::Valid(owner("here", "boot-1", None)),
            Some(1),
            HOUR,
        );
        assert_eq!(read.pid(), Some(4711));
        let torn = lock(OwnerRead::Corrupt("x".into()), Some(1), HOUR);
        assert_eq!(torn.pid(), Some(1));
        assert_eq!(lock(OwnerRead::Missing, None, HOUR).pid(), None);
    }
}
