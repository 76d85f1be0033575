//! Self-fencing: a task's holder stops its own agent before another host can judge its
//! locks gone — by this machine's clock, from one thread per process that never touches
//! the filesystem, so a hung mount (a partition, a frozen client) cannot hold it up.
//!
//! Another host takes a lock only once it has seen the lock's record unchanged for the
//! whole lease by its own clock, and it cannot have seen a record before we began writing
//! it (`DirLock::renewed_at`). So if our agent is stopped within `lease - margin` of the
//! start of the last renewal that succeeded, it is gone before any taker's agent starts:
//! the overlap is zero when the agent dies within the margin (docs/ARCHITECTURE.md,
//! "Fencing").

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::agent::signal_group;
use crate::host::boot_clock;

/// The longest the fencing thread sleeps at a time: its waits are on the monotonic
/// clock, which a suspend stops, and its deadlines on the boot clock, which it does not.
const LONGEST_NAP: Duration = Duration::from_millis(500);

/// How long the fencing thread keeps napping after its last fence is dropped, before it
/// sleeps until the next is armed. While it naps, arming a fence does not wake it: the
/// nearest deadline is three quarters of a lease away and a nap ends within
/// [`LONGEST_NAP`]. A worker taking task after task would otherwise wake it once a
/// task; an idle one still costs no wake-up once this has passed.
const NAP_ON_FOR: Duration = Duration::from_secs(30);

/// When a holder stops its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// SIGTERM to the agent's group once no renewal has succeeded for this long.
    pub after: Duration,
    /// SIGKILL to the group this long after the SIGTERM.
    pub grace: Duration,
}

impl Policy {
    /// For locks of lease `lease` (`leaseSecs`): SIGTERM once no renewal has succeeded
    /// for three quarters of the lease, SIGKILL `kill_grace` later but at most an eighth
    /// of the lease later. The agent's group is then gone an eighth of the lease (15 s at
    /// the default 120 s; 0.75 s at 6 s) before another host can take the task over,
    /// while the holder renews every `min(heartbeat, lease / 4)`: two renewals in a row
    /// can fail (or hang) before it fences itself.
    pub fn for_lease(lease: Duration, kill_grace: Duration) -> Policy {
        let margin = lease / 4;
        Policy {
            after: lease - margin,
            grace: kill_grace.min(margin / 2),
        }
    }
}

/// Where an armed fence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Armed,
    /// SIGTERM sent at this boot-clock time.
    Termed(Duration),
    Killed,
}

#[derive(Debug)]
struct Entry {
    pgid: u32,
    policy: Policy,
    /// Boot-clock time of the start of the last renewal that succeeded.
    renewed: Duration,
    state: State,
    /// How long it had gone without a renewal when it fired.
    fired_after: Option<Duration>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    entries: HashMap<u64, Entry>,
    /// The thread sleeps until woken (no fence armed for [`NAP_ON_FOR`]): arming must
    /// wake it.
    asleep: bool,
}

struct Fences {
    registry: Mutex<Registry>,
    changed: Condvar,
}

fn fences() -> &'static Arc<Fences> {
    static FENCES: OnceLock<Arc<Fences>> = OnceLock::new();
    FENCES.get_or_init(|| {
        let f = Arc::new(Fences {
            registry: Mutex::new(Registry::default()),
            changed: Condvar::new(),
        });
        let for_thread = Arc::clone(&f);
        // If no thread can be made, nothing fences: the heartbeat's `LockLost` still
        // stops the agent once the filesystem answers (the bound before self-fencing).
        if let Err(e) = std::thread::Builder::new()
            .name("fence".into())
            .spawn(move || watch(&for_thread))
        {
            tracing::error!("cannot start the fencing thread: {e}");
        }
        f
    })
}

fn registry(f: &Fences) -> MutexGuard<'_, Registry> {
    f.registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// The fencing thread: signals groups whose renewals stopped, and nothing else — no
/// file, no log line (stderr may be a file on the very mount that hangs).
fn watch(f: &Fences) {
    let mut reg = registry(f);
    // Boot-clock time the last fence was seen gone; `None` while there are some.
    let mut empty_since: Option<Duration> = None;
    loop {
        let now = boot_clock();
        let mut next: Option<Duration> = None;
        for e in reg.entries.values_mut() {
            let due = match e.state {
                // Woken past the KILL's time too (this process was stopped, or the
                // machine suspended): a taker may be running already.
                State::Armed if now >= e.renewed + e.policy.after + e.policy.grace => {
                    signal_group(e.pgid, Signal::SIGKILL);
                    e.state = State::Killed;
                    e.fired_after = Some(now.saturating_sub(e.renewed));
                    continue;
                }
                State::Armed if now >= e.renewed + e.policy.after => {
                    signal_group(e.pgid, Signal::SIGTERM);
                    e.state = State::Termed(now);
                    e.fired_after = Some(now.saturating_sub(e.renewed));
                    now + e.policy.grace
                }
                State::Armed => e.renewed + e.policy.after,
                State::Termed(at) if now >= at + e.policy.grace => {
                    signal_group(e.pgid, Signal::SIGKILL);
                    e.state = State::Killed;
                    continue;
                }
                State::Termed(at) => at + e.policy.grace,
                State::Killed => continue,
            };
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        if reg.entries.is_empty() {
            let since = *empty_since.get_or_insert(now);
            if now.saturating_sub(since) < NAP_ON_FOR {
                // Nothing to fence, but a fence is likely soon: nap, so arming it need
                // not wake us.
                next = Some(now + LONGEST_NAP);
            }
        } else {
            empty_since = None;
        }
        reg = match next {
            Some(due) => {
                let nap = due.saturating_sub(now).min(LONGEST_NAP);
                f.changed
                    .wait_timeout(reg, nap)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => {
                reg.asleep = true;
                let mut woken = f.changed.wait(reg).unwrap_or_else(|p| p.into_inner());
                // Cleared by the arm that woke us, unless woken spuriously.
                woken.asleep = false;
                empty_since = None;
                woken
            }
        };
    }
}

/// An armed fence over one agent's process group; dropping it disarms it. Drop it
/// before the agent's leader is reaped: until then the group id cannot be another's.
#[derive(Debug)]
pub(crate) struct Fence {
    id: u64,
}

/// Fence the process group `pgid` (an agent, its leader not yet reaped) by `policy`,
/// its locks last renewed at `renewed` ([`boot_clock`] time, `DirLock::renewed_at`).
pub(crate) fn arm(pgid: u32, policy: Policy, renewed: Duration) -> Fence {
    let f = fences();
    let mut reg = registry(f);
    let id = reg.next;
    reg.next += 1;
    reg.entries.insert(
        id,
        Entry {
            pgid,
            policy,
            renewed,
            state: State::Armed,
            fired_after: None,
        },
    );
    // A napping thread looks within `LONGEST_NAP`, long before this fence's deadline.
    let wake = std::mem::take(&mut reg.asleep);
    drop(reg);
    if wake {
        f.changed.notify_all();
    }
    Fence { id }
}

impl Fence {
    /// Every lock is renewed as of `renewed` (the oldest of their `renewed_at`): the
    /// deadline moves on. A fence that already fired stays fired.
    pub fn renewed(&self, renewed: Duration) {
        if let Some(e) = registry(fences()).entries.get_mut(&self.id) {
            e.renewed = e.renewed.max(renewed);
        }
    }

    /// Whether it stopped the agent, and why (for the task's result).
    pub fn fired(&self) -> Option<String> {
        let reg = registry(fences());
        let e = reg.entries.get(&self.id)?;
        let after = e.fired_after?;
        Some(format!(
            "interrupted: fenced itself: no renewal of the task's locks succeeded for {:.1}s \
             (the limit is {:.1}s, three quarters of the lease), so its agent was stopped \
             before another host could take the task over",
            after.as_secs_f64(),
            e.policy.after.as_secs_f64(),
        ))
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        registry(fences()).entries.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::time::Instant;

    const BOUND: Duration = Duration::from_secs(10);

    /// `sh -c script` as the leader of a group of its own (as an agent is), killed and
    /// reaped when the test ends however it ends.
    fn group(script: &str) -> Leader {
        Leader(
            Command::new("sh")
                .args(["-c", script])
                .process_group(0)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sh"),
        )
    }

    struct Leader(Child);

    impl std::ops::Deref for Leader {
        type Target = Child;
        fn deref(&self) -> &Child {
            &self.0
        }
    }

    impl std::ops::DerefMut for Leader {
        fn deref_mut(&mut self) -> &mut Child {
            &mut self.0
        }
    }

    impl Drop for Leader {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Wait (bounded) for `child` to exit, without reaping it before the fence is
    /// dropped: `try_wait` reaps, so the caller drops its fence first.
    fn exit_within(child: &mut Child, bound: Duration) -> Option<(ExitStatus, Instant)> {
        let began = Instant::now();
        loop {
            // Exited (unreaped) yet? WNOWAIT leaves it a zombie, the group id unreusable.
            let exited = nix::sys::wait::waitid(
                nix::sys::wait::Id::Pid(nix::unistd::Pid::from_raw(child.id() as i32)),
                nix::sys::wait::WaitPidFlag::WEXITED
                    | nix::sys::wait::WaitPidFlag::WNOWAIT
                    | nix::sys::wait::WaitPidFlag::WNOHANG,
            );
            if matches!(exited, Ok(s) if s.pid().is_some()) {
                let at = Instant::now();
                return Some((child.wait().expect("reap"), at));
            }
            if began.elapsed() >= bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A renewal source that renews `renewals` times, `every` apart, then blocks (as a
    /// heartbeat in a frozen filesystem client does) until `hang_up` is dropped.
    fn renew_until_hung(
        fence: &Arc<Fence>,
        renewals: u32,
        every: Duration,
    ) -> std::sync::mpsc::Sender<()> {
        let fence = Arc::clone(fence);
        let (hang_up, hung) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            for _ in 0..renewals {
                std::thread::sleep(every);
                let began = boot_clock();
                fence.renewed(began);
            }
            let _ = hung.recv();
        });
        hang_up
    }

    #[test]
    fn the_default_policy_stops_the_agent_before_any_taker_can_start() {
        for lease in [6, 15, 120, 3600] {
            let lease = Duration::from_secs(lease);
            let p = Policy::for_lease(lease, Duration::from_secs(5));
            assert!(p.after + p.grace < lease, "{lease:?}: {p:?}");
            assert!(lease - p.after - p.grace >= lease / 8, "{p:?}");
            // At least two renewals (every quarter lease at most) may fail first.
            assert!(p.after >= 2 * (lease / 4), "{p:?}");
        }
        let p = Policy::for_lease(Duration::from_secs(120), Duration::from_secs(5));
        assert_eq!(
            (p.after, p.grace),
            (Duration::from_secs(90), Duration::from_secs(5))
        );
    }

    #[test]
    fn a_holder_whose_renewals_hang_stops_its_agent_by_its_own_clock() {
        let mut agent = group("exec sleep 100");
        // Long enough that a loaded machine's stall of the renewing thread does not
        // pass for hung renewals.
        let policy = Policy {
            after: Duration::from_secs(1),
            grace: Duration::from_millis(300),
        };
        let t0 = Instant::now();
        let fence = Arc::new(arm(agent.id(), policy, boot_clock()));
        let every = Duration::from_millis(200);
        let hang_up = renew_until_hung(&fence, 3, every);
        // Not before three renewals and a policy's `after` past the last of them.
        let (status, at) =
            exit_within(&mut agent, BOUND).expect("the fence stopped the agent in time");
        assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
        let at = at - t0;
        assert!(
            at >= 3 * every + policy.after,
            "stopped {at:?} after arming"
        );
        let why = fence.fired().expect("it says it fired");
        assert!(why.contains("fenced itself"), "{why}");
        drop(hang_up);
        drop(fence);
    }

    #[test]
    fn an_agent_that_ignores_sigterm_is_killed_after_the_grace() {
        // The shell ignores SIGTERM, and so does the sleep it becomes.
        let mut agent = group("trap '' TERM; exec sleep 100");
        let policy = Policy {
            after: Duration::from_millis(300),
            grace: Duration::from_millis(300),
        };
        let t0 = Instant::now();
        let fence = arm(agent.id(), policy, boot_clock());
        let (status, at) =
            exit_within(&mut agent, BOUND).expect("the fence killed the agent in time");
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
        let at = at - t0;
        assert!(
            at >= policy.after + policy.grace,
            "killed {at:?} after arming"
        );
        drop(fence);
    }

    /// An agent fenced with its last renewal older than `after` + `grace` already (as
    /// after a pause): SIGKILLed at once. Its fence, fired.
    fn killed_at_once() -> Fence {
        let mut agent = group("exec sleep 100");
        let policy = Policy {
            after: Duration::from_millis(200),
            grace: Duration::from_secs(60),
        };
        let long_ago = boot_clock().saturating_sub(Duration::from_secs(61));
        let fence = arm(agent.id(), policy, long_ago);
        let (status, _) = exit_within(&mut agent, BOUND).expect("killed at once");
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
        fence
    }

    #[test]
    fn a_holder_that_wakes_past_the_grace_kills_at_once() {
        let fence = killed_at_once();
        assert!(fence.fired().is_some());
    }

    #[test]
    fn a_fence_armed_while_the_thread_naps_is_kept_without_waking_it() {
        // A fence armed and dropped, as by a task just ended: the thread then naps for
        // `NAP_ON_FOR` instead of sleeping until woken, so the next arm wakes nobody.
        let first = group("exec sleep 100");
        drop(arm(
            first.id(),
            Policy::for_lease(Duration::from_secs(120), Duration::from_secs(5)),
            boot_clock(),
        ));
        assert!(
            !registry(fences()).asleep,
            "asleep right after a fence was dropped"
        );
        // Due at once: found by the napping thread within a nap, never missed.
        drop(killed_at_once());
    }

    #[test]
    fn a_holder_that_keeps_renewing_keeps_its_agent() {
        let mut agent = group("exec sleep 100");
        let policy = Policy {
            after: Duration::from_secs(1),
            grace: Duration::from_millis(100),
        };
        let fence = arm(agent.id(), policy, boot_clock());
        // Renewed every 100 ms for two and a half times the fence's `after`.
        let until = Instant::now() + policy.after * 5 / 2;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
            fence.renewed(boot_clock());
        }
        assert!(exit_within(&mut agent, Duration::ZERO).is_none());
        assert!(fence.fired().is_none());
        // Disarmed, it never fires.
        drop(fence);
        assert!(exit_within(&mut agent, 2 * policy.after).is_none());
        agent.kill().expect("kill the sleep");
        agent.wait().expect("reap it");
    }
}
