//! One thread per process renews every gate lease the process holds, each when due.
//!
//! A many-slot worker holds a gate (and so a lease) per slot: a thread per lease would
//! cost a thread per idle slot, and renewing them all on one tick a burst of writes.
//! Here every lease has its own due time, spread over its interval, and one thread —
//! started with the first lease, gone with the last — sleeps until the earliest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::dirlock::{Acquire, DirLock, LockOptions, UNSEEN_LOOKS, UNSEEN_PAUSE};
use crate::error::{Error, Result};

/// The shortest interval between renewals of one lease, whatever its length: a lease
/// of 1 s (the least `leaseSecs` allows) is then renewed at half its length.
pub const MIN_RENEW_EVERY: Duration = Duration::from_millis(500);

/// The longest interval between renewals of one lease (reached from a 120 s lease on,
/// the default).
pub const MAX_RENEW_EVERY: Duration = Duration::from_secs(30);

/// How many tries to take a lost lease back before the gate counts as lost.
const TAKE_BACK_ROUNDS: u32 = 5;

/// The pause between those tries (or a lease's own interval, if shorter): a recovery
/// that judged us gone holds the lease for moments, not for a renewal interval.
const TAKE_BACK_PAUSE: Duration = Duration::from_secs(2);

/// Leases due within this much of each other are renewed in one wake-up (renewing a
/// little early is always safe).
const COALESCE: Duration = Duration::from_millis(100);

/// How often a lease of `lease` is renewed: a quarter of it, within
/// [`MIN_RENEW_EVERY`]..=[`MAX_RENEW_EVERY`]. Another host judges the lease stale
/// once its heartbeat is `lease` old; renewing at a quarter leaves three missed beats
/// (a slow disk, a network filesystem's attribute cache, a loaded machine) of margin,
/// and costs one small write per lease per quarter — 30 s at the default 120 s.
pub fn renew_every(lease: Duration) -> Duration {
    (lease / 4).clamp(MIN_RENEW_EVERY, MAX_RENEW_EVERY)
}

/// Where in its interval the `n`-th lease of this process is renewed, in [0, 1): the
/// golden-ratio sequence, which keeps any number of leases evenly apart (1,000 leases
/// taken in one burst are not renewed in one burst).
fn phase(n: u64) -> f64 {
    const GOLDEN: f64 = 0.618_033_988_749_894_9;
    (n as f64 * GOLDEN).fract()
}

/// The first renewal of the `n`-th lease, taken at `now`: within one interval (never
/// later than a lease renewed on a fixed tick would be), at its phase.
fn first_due(now: Instant, every: Duration, n: u64) -> Instant {
    now + every.mul_f64(phase(n))
}

/// The renewal after the one due at `due`, done at `now`: the first point of the
/// lease's own schedule after `now`, so a late wake-up (a pause, a loaded machine)
/// neither renews twice nor lines every lease up on one instant.
fn next_due(due: Instant, every: Duration, now: Instant) -> Instant {
    let every = every.max(Duration::from_millis(1));
    let behind = now.saturating_duration_since(due);
    let periods = behind.as_nanos() / every.as_nanos() + 1;
    due + every * u32::try_from(periods).unwrap_or(u32::MAX)
}

/// A registered lease, as its gate holds it; dropping it deregisters it and releases
/// the lock.
#[derive(Debug)]
pub(super) struct Lease {
    id: u64,
    held: Arc<Held>,
}

/// One lease's renewal state, shared by its gate and the renewing thread.
#[derive(Debug)]
struct Held {
    state: Mutex<HeldState>,
    /// Another host's holder keeps the lease: the gate is no longer ours.
    lost: AtomicBool,
}

#[derive(Debug)]
struct HeldState {
    /// `None` once the lease is released, lost, or abandoned.
    lock: Option<DirLock>,
    path: PathBuf,
    /// The lease's directory (links resolved) when taken.
    home: Option<PathBuf>,
    /// Tries so far to take back a lease another holder keeps.
    held_rounds: u32,
    /// Renewals in a row that did not see the lease in place (another host may be
    /// putting it back after moving it aside on a stale read).
    unseen: u32,
}

struct Entry {
    due: Instant,
    every: Duration,
    held: Arc<Held>,
}

#[derive(Default)]
struct Table {
    leases: BTreeMap<u64, Entry>,
    next_id: u64,
    /// The renewing thread is running (it ends when no lease is left).
    running: bool,
}

struct Renewer {
    table: Mutex<Table>,
    /// Told when a lease comes or goes: the thread then looks at its schedule again.
    changed: Condvar,
}

static RENEWER: Renewer = Renewer {
    table: Mutex::new(Table {
        leases: BTreeMap::new(),
        next_id: 0,
        running: false,
    }),
    changed: Condvar::new(),
};

fn table() -> MutexGuard<'static, Table> {
    RENEWER.table.lock().unwrap_or_else(|e| e.into_inner())
}

impl Lease {
    /// Renew `lock` (the lease at `path`) every `every` from now on, until released.
    pub(super) fn register(lock: DirLock, path: &Path, every: Duration) -> Result<Lease> {
        lock.ready_for_renewals();
        let held = Arc::new(Held {
            state: Mutex::new(HeldState {
                lock: Some(lock),
                path: path.to_path_buf(),
                home: canonical_parent(path),
                held_rounds: 0,
                unseen: 0,
            }),
            lost: AtomicBool::new(false),
        });
        let mut t = table();
        let id = t.next_id;
        t.next_id += 1;
        let due = first_due(Instant::now(), every, id + 1);
        let entry = Entry {
            due,
            every,
            held: held.clone(),
        };
        t.leases.insert(id, entry);
        if !t.running {
            let started = std::thread::Builder::new()
                .name("gate-leases".into())
                .spawn(run);
            if let Err(e) = started {
                // Not renewed, not kept: dropping the entry's lock releases it.
                t.leases.remove(&id);
                return Err(Error::io("start the lease thread for", path, e));
            }
            t.running = true;
        }
        RENEWER.changed.notify_all();
        Ok(Lease { id, held })
    }

    pub(super) fn lost(&self) -> bool {
        self.held.lost.load(Ordering::Relaxed)
    }
}

impl Drop for Lease {
    /// Stop renewing and release the lease (after a renewal under way, if any).
    fn drop(&mut self) {
        table().leases.remove(&self.id);
        RENEWER.changed.notify_all();
        let lock = self.held.lock().lock.take();
        if let Some(Err(e)) = lock.map(DirLock::release) {
            tracing::debug!("releasing gate lease: {e}");
        }
    }
}

impl Held {
    fn lock(&self) -> MutexGuard<'_, HeldState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The renewing thread: renew what is due, sleep until the next; end with the last lease.
fn run() {
    loop {
        let Some(due) = wait_for_due() else {
            return;
        };
        for (id, held) in due {
            // A panic must not end the thread that renews every other lease too.
            let renewed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| renew_once(&held)));
            let after = match renewed.unwrap_or(Renewed::Soon) {
                Renewed::OnTime => continue,
                Renewed::Soon => Some(Instant::now() + TAKE_BACK_PAUSE),
                Renewed::LookAgain(after) => Some(Instant::now() + after),
                Renewed::Ended => None,
            };
            let mut t = table();
            match (after, t.leases.get_mut(&id)) {
                (Some(at), Some(e)) => e.due = at.min(Instant::now() + e.every),
                (None, Some(_)) => {
                    t.leases.remove(&id);
                }
                (_, None) => {} // released meanwhile
            }
        }
    }
}

/// Sleep until some lease is due; then the due ones (each moved on to its next due
/// time), or `None` when no lease is left (the thread then ends).
fn wait_for_due() -> Option<Vec<(u64, Arc<Held>)>> {
    let mut t = table();
    loop {
        let Some(next) = t.leases.values().map(|e| e.due).min() else {
            t.running = false;
            return None;
        };
        let now = Instant::now();
        if next <= now + COALESCE {
            break;
        }
        t = RENEWER
            .changed
            .wait_timeout(t, next - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let now = Instant::now();
    let due = t
        .leases
        .iter_mut()
        .filter(|(_, e)| e.due <= now + COALESCE)
        .map(|(&id, e)| {
            e.due = next_due(e.due, e.every, now);
            (id, e.held.clone())
        })
        .collect();
    Some(due)
}

/// What became of one renewal.
enum Renewed {
    /// Renewed (or failed in a way the next renewal may not): next at its time.
    OnTime,
    /// The lease was taken and is not back yet: try again soon.
    Soon,
    /// The lease was not seen in place: look again after this long.
    LookAgain(Duration),
    /// Nothing more to renew: released, lost, or its directory changed.
    Ended,
}

/// Renew one lease. A lease found taken (we were judged gone) is taken back if its
/// taker is gone too (a recovery that has finished); one that another holder keeps
/// through [`TAKE_BACK_ROUNDS`] tries is marked lost.
fn renew_once(held: &Held) -> Renewed {
    let mut s = held.lock();
    let s = &mut *s;
    let Some(lock) = s.lock.as_mut() else {
        return Renewed::Ended;
    };
    // Looked for once per renewal: the waits between looks are the schedule's, so the
    // other leases of this thread are not held up by this one.
    match lock.heartbeat_once() {
        Ok(true) => {
            s.held_rounds = 0;
            s.unseen = 0;
            return Renewed::OnTime;
        }
        Ok(false) if s.unseen < UNSEEN_LOOKS => {
            s.unseen += 1;
            return Renewed::LookAgain(UNSEEN_PAUSE);
        }
        Ok(false) | Err(Error::LockLost { .. }) => s.unseen = 0,
        Err(e) => {
            tracing::warn!("renewing gate lease: {e}");
            return Renewed::OnTime;
        }
    }
    let path = s.path.as_path();
    if canonical_parent(path) != s.home {
        // The slot's directory was moved or swapped for a link: nothing is written
        // there; the worker's own checks refuse the slot.
        tracing::warn!(
            "gate lease {}: its directory changed; not renewed",
            path.display()
        );
        std::mem::forget(s.lock.take());
        return Renewed::Ended;
    }
    match DirLock::try_acquire(path, &lease_options(path)) {
        Ok(Acquire::Acquired(l)) => {
            s.held_rounds = 0;
            tracing::warn!(
                "gate lease {} was taken while we were away; took it back",
                path.display()
            );
            std::mem::forget(s.lock.replace(l));
            Renewed::OnTime
        }
        // A recovery that judged us gone holds it for a moment: only a holder that
        // keeps it (another host's worker) means the slot is no longer ours.
        Ok(Acquire::Held(h)) if s.held_rounds < TAKE_BACK_ROUNDS => {
            s.held_rounds += 1;
            tracing::warn!("gate lease {} is held: {h}; trying again", path.display());
            Renewed::Soon
        }
        Ok(Acquire::Held(h)) => {
            tracing::error!("gate lease {} was taken over: {h}", path.display());
            held.lost.store(true, Ordering::Relaxed);
            std::mem::forget(s.lock.take());
            Renewed::Ended
        }
        Err(e) => {
            tracing::warn!("taking back gate lease: {e}");
            Renewed::Soon
        }
    }
}

/// The directory `path` is in, with every link resolved (`None` if it is gone).
fn canonical_parent(path: &Path) -> Option<PathBuf> {
    path.parent()?.canonicalize().ok()
}

/// The lock options of the root a gate (or its lease) belongs to — `leaseSecs` from its
/// `config.json` — for `workers/<N>/.worker.lock` and `.locks/<name>.lock`; the
/// defaults where there is none or it cannot be read.
pub(super) fn lease_options(gate: &Path) -> LockOptions {
    let dir = gate.parent();
    let root = match dir.and_then(Path::file_name).and_then(|n| n.to_str()) {
        Some(".locks") => dir.and_then(Path::parent),
        _ => dir
            .and_then(Path::parent)
            .filter(|p| p.file_name().is_some_and(|n| n == "workers"))
            .and_then(Path::parent),
    };
    root.and_then(|r| crate::config::Config::load(&r.join("config.json")).ok())
        .map(|c| c.lock_options())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirlock::LockOwner;
    use crate::gate::{lease_path, Gate};
    use crate::protocol::now_rfc3339;

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A root whose leases last 2 s (renewed every 0.5 s), and slot `n`'s gate path.
    fn root_with_short_leases() -> (tempfile::TempDir, impl Fn(u32) -> PathBuf) {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("config.json"), r#"{"leaseSecs": 2}"#).unwrap();
        let base = root.path().to_path_buf();
        (root, move |n| {
            base.join(format!("workers/{n}/.worker.lock"))
        })
    }

    fn lease_owner(gate: &Path) -> Option<LockOwner> {
        let text = std::fs::read_to_string(lease_path(gate).join("owner.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Put another host's live lease in place of ours (as its worker would after
    /// judging us gone), renewed now.
    fn plant_foreign_lease(gate: &Path) {
        let lease = lease_path(gate);
        let owner = LockOwner {
            pid: 4242,
            host: "host-b".into(),
            boot_id: "b-boot".into(),
            start_time: None,
            nonce: "b-nonce".into(),
            acquired_at: now_rfc3339(),
            heartbeat_at: Some(now_rfc3339()),
            host_id: Some("host-b-id".into()),
            epoch: 1000,
            task: None,
        };
        std::fs::create_dir_all(&lease).unwrap();
        let tmp = lease.join(".owner.json.test.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&owner).unwrap()).unwrap();
        std::fs::rename(&tmp, lease.join("owner.json")).unwrap();
        std::fs::write(lease.join("pid"), "4242\n").unwrap();
    }

    fn lease_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim() == "gate-leases")
            .count()
    }

    #[test]
    fn many_gates_share_one_renewing_thread_and_each_lease_is_renewed() {
        let (_root, gate) = root_with_short_leases();
        let gates: Vec<Gate> = (0..20)
            .map(|n| Gate::acquire(&gate(n), &format!("worker {n}")).unwrap())
            .collect();
        // One renewing thread for every lease. (Another test's renewer that has just
        // seen its last lease go may still be ending: wait it out, bounded.)
        wait_until("one renewing thread for every lease", || {
            lease_threads() == 1
        });
        let first: Vec<_> = (0..20).map(|n| lease_owner(&gate(n)).unwrap()).collect();
        wait_until("every lease renewed", || {
            (0..20).all(|n| {
                let now = lease_owner(&gate(n)).unwrap();
                now.heartbeat_at.is_some() && now.heartbeat_at != first[n as usize].heartbeat_at
            })
        });
        drop(gates);
        for n in 0..20 {
            assert!(
                !lease_path(&gate(n)).exists(),
                "lease {n} released with its gate"
            );
        }
    }

    #[test]
    fn a_lease_taken_and_given_up_while_we_were_away_is_taken_back() {
        let (root, gate) = root_with_short_leases();
        let g = Gate::acquire(&gate(0), "worker 0").unwrap();
        // A recovery took the lease (moved it aside) and finished.
        std::fs::rename(lease_path(&gate(0)), root.path().join("taken")).unwrap();
        wait_until("the lease taken back", || {
            lease_owner(&gate(0)).is_some_and(|o| o.pid == std::process::id())
        });
        assert!(!g.lease_lost());
    }

    #[test]
    fn a_lease_another_host_keeps_is_lost() {
        let (root, gate) = root_with_short_leases();
        let g = Gate::acquire(&gate(0), "worker 0").unwrap();
        std::fs::rename(lease_path(&gate(0)), root.path().join("taken")).unwrap();
        plant_foreign_lease(&gate(0));
        wait_until("the gate's lease lost", || {
            // Host B keeps renewing its lease.
            plant_foreign_lease(&gate(0));
            g.lease_lost()
        });
        drop(g);
        let kept = lease_owner(&gate(0)).unwrap();
        assert_eq!(
            kept.pid, 4242,
            "a lost lease is not released from under its holder"
        );
    }

    #[test]
    fn a_lease_is_renewed_at_a_quarter_of_its_length_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(renew_every(s(120)), s(30), "the default lease");
        assert_eq!(renew_every(s(6)), Duration::from_millis(1500));
        assert_eq!(renew_every(s(2)), MIN_RENEW_EVERY);
        assert_eq!(
            renew_every(s(1)),
            MIN_RENEW_EVERY,
            "half of the shortest lease"
        );
        assert_eq!(renew_every(s(86_400)), MAX_RENEW_EVERY);
        for secs in 1..=86_400 {
            assert!(renew_every(s(secs)) <= s(secs) / 2, "lease {secs}s");
        }
    }

    #[test]
    fn many_leases_taken_at_once_are_spread_over_their_interval() {
        let now = Instant::now();
        let every = Duration::from_secs(30);
        let n = 1000;
        let mut offsets: Vec<Duration> = (1..=n).map(|i| first_due(now, every, i) - now).collect();
        offsets.sort();
        assert!(
            offsets.iter().all(|&o| o < every),
            "all within one interval"
        );
        // Evenly spread: every tenth of the interval holds about a tenth of the leases.
        for tenth in 0..10 {
            let (lo, hi) = (every * tenth / 10, every * (tenth + 1) / 10);
            let count = offsets.iter().filter(|&&o| o >= lo && o < hi).count();
            assert!(
                (90..=110).contains(&count),
                "{count} leases in tenth {tenth}"
            );
        }
        // No two leases share a 10 ms moment of the 30 s interval.
        let crowded = offsets
            .windows(2)
            .filter(|w| w[1] - w[0] < Duration::from_millis(10))
            .count();
        assert!(
            crowded < n as usize / 20,
            "{crowded} leases crowd their neighbours"
        );
    }

    #[test]
    fn a_late_renewal_keeps_the_leases_own_schedule() {
        let t0 = Instant::now();
        let every = Duration::from_secs(2);
        let ms = Duration::from_millis;
        // On time (or early, coalesced): the next interval.
        assert_eq!(next_due(t0, every, t0), t0 + every);
        assert_eq!(next_due(t0, every, t0 - ms(50)), t0 + every);
        // A little late: still the next point of its schedule.
        assert_eq!(next_due(t0, every, t0 + ms(300)), t0 + every);
        // After a pause of several intervals: the first point after now, not a catch-up
        // burst and not a shift that would line it up with the others.
        assert_eq!(next_due(t0, every, t0 + ms(7_300)), t0 + every * 4);
        assert_eq!(next_due(t0, every, t0 + every * 3), t0 + every * 4);
    }
}
