//! Singleton gates: a non-blocking exclusive flock held for a role's whole life, with a
//! lease beside it for other hosts.
//!
//! The kernel drops the flock when the holder dies, so a gate is never stale — on this
//! host. A flock may not cross hosts (sshfs, many NFS/SMB setups), so the holder also
//! holds a directory lock `<gate>.lease/`, renewed by one thread per process for every
//! gate it holds ([`renewer`]): another host's worker refuses a slot whose lease is
//! live, and judges it by that lease alone. Where flocks do cross hosts (GlusterFS, NFS
//! without `local_lock`) a flock held on another host is no proof of life either — a
//! paused host's filesystem client keeps holding it — so a gate whose recorded holder is
//! of another host is judged by its lease alone there too, and taken without its flock
//! once that lease is stale ([`Held::LeaseOnly`]). The
//! file records who holds it, so the loser can name the holder in its error.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::dirlock::{self, Acquire, DirLock};
use crate::error::{Error, Result};
use crate::fsio;
use crate::host;
use crate::protocol::now_rfc3339;

mod holder;
mod renewer;
mod waiting;
pub use holder::GateHolder;
use renewer::{lease_options, Lease};
pub use renewer::renew_every;
pub use waiting::{hold_waiting, is_waiting, WaitingHold, WAITING_FOR_SPACE};

/// How long `acquire` keeps retrying while the gate is only being probed (probes hold
/// a shared flock for microseconds; a real holder holds it exclusively).
const PROBE_RETRY: Duration = Duration::from_secs(1);

/// How long `acquire` keeps retrying while the gate's flock is held although the
/// holder it records is dead. The flock belongs to the open file, which every child
/// shares from fork until exec closes it (close-on-exec); a holder killed while
/// spawning its agent leaves the flock with that child for those moments — longer when
/// the child is slow to exec, as under load.
pub const DEAD_HOLDER_RETRY: Duration = Duration::from_secs(5);

/// A held singleton gate; dropping it (or dying) releases it.
#[derive(Debug)]
pub struct Gate {
    path: PathBuf,
    _lock: Held,
    // Only the tests read it back; the file is what other processes read.
    #[cfg(any(test, feature = "internals"))]
    holder: GateHolder,
    lease: Option<Lease>,
}

/// How a gate's file is held.
#[derive(Debug)]
enum Held {
    /// By its flock (the usual case).
    Flock(Flock<File>),
    /// By the lease alone: the flock is held through a filesystem whose flocks cross
    /// hosts by a holder of another host, which the lease has judged gone (paused or cut
    /// off: its filesystem client may hold the flock for as long as it lives). `flock_holder`
    /// is that holder's record, put back when we let go: the flock is still its.
    LeaseOnly { file: File, flock_holder: Vec<u8> },
}

impl Held {
    fn file(&mut self) -> &mut File {
        match self {
            Held::Flock(f) => f,
            Held::LeaseOnly { file, .. } => file,
        }
    }

    /// Leave the gate file as the next taker should find it: empty, or — held by the
    /// lease alone — naming the holder of the flock again, to be judged by its lease.
    fn release(&mut self) {
        let file = self.file();
        let _ = file.set_len(0);
        if let Held::LeaseOnly { file, flock_holder } = self {
            use std::os::unix::fs::FileExt;
            let _ = file.write_all_at(flock_holder, 0);
        }
    }
}

/// The lease directory beside a gate, `<gate>.lease`.
pub fn lease_path(gate: &Path) -> PathBuf {
    let mut name = gate.as_os_str().to_owned();
    name.push(".lease");
    PathBuf::from(name)
}

impl Gate {
    /// Take the gate at `path` for `role` (e.g. "worker 3"), or fail at once naming
    /// the current holder.
    ///
    /// "At once" has two bounded exceptions, both for a gate nobody really holds: it is
    /// only being probed, or its recorded holder is dead and the flock lingers in a
    /// descriptor that holder left to a child between fork and exec (see
    /// [`DEAD_HOLDER_RETRY`]).
    pub fn acquire(path: &Path, role: &str) -> Result<Gate> {
        Self::acquire_pausing(path, role, &mut || {
            std::thread::sleep(Duration::from_millis(10))
        })
    }

    /// [`Gate::acquire`], calling `pause` between attempts while a dead holder's flock
    /// lingers.
    fn acquire_pausing(path: &Path, role: &str, pause: &mut dyn FnMut()) -> Result<Gate> {
        if let Some(parent) = path.parent() {
            fsio::ensure_dir(parent)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .map_err(|e| Error::io("open gate", path, e))?;
        let mut lock = lock_exclusive(file, path, role, pause)?;
        let lease = take_lease(path, role)?;
        let holder = GateHolder {
            pid: std::process::id(),
            role: role.to_string(),
            host: host::hostname().to_string(),
            since: now_rfc3339(),
            host_id: Some(host::host_id().to_string()),
            lease: None,
        };
        let record = fsio::to_json_bytes(&holder);
        let file = lock.file();
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(&record));
        written.map_err(|e| Error::io("record gate holder in", path, e))?;
        Ok(Gate {
            path: path.to_path_buf(),
            _lock: lock,
            #[cfg(any(test, feature = "internals"))]
            holder,
            lease: Some(lease),
        })
    }

    /// Whether this gate's lease was taken by another host's holder (we were judged
    /// gone: paused or cut off past the lease); a worker should then stop serving.
    pub fn lease_lost(&self) -> bool {
        self.lease.as_ref().is_some_and(Lease::lost)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What this gate's file records about us.
    #[cfg(any(test, feature = "internals"))]
    pub fn holder(&self) -> &GateHolder {
        &self.holder
    }
}

impl Drop for Gate {
    /// A clean exit leaves no holder details behind for `cat` to mislead with.
    /// (After a crash the record stays, but the kernel has dropped the flock.)
    fn drop(&mut self) {
        // A holder whose lease was taken leaves the record alone: it is the new holder's.
        let lost = self.lease_lost();
        // Released before the flock (a field, dropped after this): while we hold the
        // flock nobody of this host takes the lease from under us.
        drop(self.lease.take());
        if !lost {
            self._lock.release();
        }
    }
}

/// Take the lease beside `gate` (we hold its flock) and have it renewed, or refuse
/// naming its holder.
fn take_lease(gate: &Path, role: &str) -> Result<Lease> {
    let path = lease_path(gate);
    let opts = lease_options(gate);
    match DirLock::try_acquire(&path, &opts)? {
        Acquire::Acquired(lock) => Lease::register(lock, &path, renew_every(opts.lease)),
        Acquire::Held(h) => Err(Error::GateHeld {
            role: role.to_string(),
            holder: h.to_string(),
            path: gate.to_path_buf(),
        }),
    }
}

/// The exclusive flock on the gate file, or why not (naming the holder); or the file
/// alone when the flock is held for a holder of another host, whose lease decides.
fn lock_exclusive(file: File, path: &Path, role: &str, pause: &mut dyn FnMut()) -> Result<Held> {
    let probed_until = Instant::now() + PROBE_RETRY;
    let dead_until = Instant::now() + DEAD_HOLDER_RETRY;
    let mut file = file;
    loop {
        let file_back = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Ok(Held::Flock(l)),
            Err((f, Errno::EWOULDBLOCK)) => f,
            Err((_, errno)) => return Err(Error::io("flock gate", path, errno.into())),
        };
        // A `probe` holds a brief shared flock, which also makes our exclusive attempt
        // fail. Only an exclusive holder refuses a shared lock: if we can get one, the
        // gate is merely being probed — let go and try again (bounded).
        let held_by = match Flock::lock(file_back, FlockArg::LockSharedNonblock) {
            Ok(shared) => {
                file = shared
                    .unlock()
                    .map_err(|(_, errno)| Error::io("unlock gate", path, errno.into()))?;
                if Instant::now() < probed_until {
                    std::thread::yield_now();
                    continue;
                }
                format!("nobody recorded; probed without pause for {PROBE_RETRY:?}")
            }
            Err((mut f, Errno::EWOULDBLOCK)) => match read_holder(&mut f) {
                // The flock crossed hosts: the lease, taken next, says whether its
                // holder is alive (refused then, naming it) or gone.
                Some(h) if !h.is_this_host() => {
                    let flock_holder = fsio::to_json_bytes(&h);
                    return Ok(Held::LeaseOnly {
                        file: f,
                        flock_holder,
                    });
                }
                Some(h) if provably_dead(&h) => {
                    if Instant::now() < dead_until {
                        file = f;
                        pause();
                        continue;
                    }
                    format!(
                        "pid {} (dead), since {}; a process it started still holds the \
                         gate's descriptor after {DEAD_HOLDER_RETRY:?}",
                        h.pid, h.since
                    )
                }
                Some(h) => format!("pid {}, since {}", h.pid, h.since),
                // It took the flock but has not recorded itself yet.
                None => "pid not yet recorded".to_string(),
            },
            Err((_, errno)) => return Err(Error::io("flock gate", path, errno.into())),
        };
        return Err(Error::GateHeld {
            role: role.to_string(),
            holder: held_by,
            path: path.to_path_buf(),
        });
    }
}

/// The recorded holder is a process of this host that no longer exists.
fn provably_dead(h: &GateHolder) -> bool {
    h.is_this_host() && !host::pid_alive(h.pid)
}

/// Who holds the gate at `path`, if anyone: a holder of this host (probed with a
/// non-blocking flock), or one of another host whose lease is live (its flock may not
/// reach us).
pub fn probe(path: &Path) -> Result<Option<GateHolder>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open gate", path, e)),
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(mut free) => Ok(match read_holder(&mut free) {
            Some(h) if !h.is_this_host() => foreign_holder(path, h)?,
            _ => None,
        }),
        Err((mut file, Errno::EWOULDBLOCK)) => match read_holder(&mut file) {
            // Held through a filesystem whose flocks cross hosts: by its lease.
            Some(h) if !h.is_this_host() => foreign_holder(path, h),
            held => Ok(Some(held.unwrap_or(GateHolder {
                pid: 0,
                role: String::new(),
                host: String::new(),
                since: String::new(),
                host_id: None,
                lease: None,
            }))),
        },
        Err((_, errno)) => Err(Error::io("flock gate", path, errno.into())),
    }
}

/// `recorded`, the holder another host wrote into the gate file, if its lease is live.
fn foreign_holder(gate: &Path, mut recorded: GateHolder) -> Result<Option<GateHolder>> {
    let Some(lease) = dirlock::inspect(&lease_path(gate), &lease_options(gate))? else {
        return Ok(None);
    };
    let live_and_theirs = !lease.liveness.is_stale()
        && lease
            .owner
            .as_ref()
            .is_some_and(|o| o.pid == recorded.pid && o.host_id == recorded.host_id);
    Ok(live_and_theirs.then(|| {
        recorded.lease = Some(lease.to_string());
        recorded
    }))
}

fn read_holder(file: &mut File) -> Option<GateHolder> {
    let mut buf = Vec::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(64 * 1024).read_to_end(&mut buf).ok()?;
    serde_json::from_slice(&buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirlock::LockOptions;
    use std::process::{Command, Stdio};

    /// A pid that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!host::pid_alive(pid), "pid {pid} reused at once");
        pid
    }

    /// The situation a holder killed mid-spawn leaves: the gate file names the dead
    /// holder, and the flock lives on in a process that inherited its descriptor.
    fn gate_left_to_a_child(path: &Path) -> std::process::Child {
        let record = GateHolder {
            pid: dead_pid(),
            role: "worker 3".into(),
            host: host::hostname().to_string(),
            since: now_rfc3339(),
            host_id: None,
            lease: None,
        };
        std::fs::write(path, fsio::to_json_bytes(&record)).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        // Not nix's Flock: dropping that would unlock the file for the child too.
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let locked = unsafe {
            nix::libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                nix::libc::LOCK_EX | nix::libc::LOCK_NB,
            )
        };
        assert_eq!(locked, 0, "the gate is free to start with");
        // The child shares the open file (and so the flock) as its stdout; closing our
        // descriptor leaves the flock with the child alone.
        let child = Command::new("sleep")
            .arg("60")
            .stdout(Stdio::from(file))
            .spawn()
            .unwrap();
        let held = probe(path).unwrap().expect("the child holds the gate");
        assert_eq!(held.pid, record.pid);
        child
    }

    #[test]
    fn a_dead_holders_lingering_descriptor_delays_the_gate_but_does_not_refuse_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".worker.lock");
        let mut child = Some(gate_left_to_a_child(&path));
        let mut pauses = 0;
        // The inheriting child goes away while acquire waits, as a child between fork
        // and exec does.
        let gate = Gate::acquire_pausing(&path, "worker 3", &mut || {
            pauses += 1;
            if let Some(mut c) = child.take() {
                c.kill().unwrap();
                c.wait().unwrap();
            }
        })
        .expect("the dead holder's flock went away: the gate is ours");
        assert!(pauses >= 1, "acquire must have found the gate held first");
        assert_eq!(gate.holder().pid, std::process::id());
        assert_eq!(probe(&path).unwrap().unwrap().pid, std::process::id());
    }

    #[test]
    fn a_gates_lease_is_judged_by_its_roots_config() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("config.json"), r#"{"leaseSecs": 6}"#).unwrap();
        let six = Duration::from_secs(6);
        let worker = root.path().join("workers/0/.worker.lock");
        assert_eq!(lease_options(&worker).lease, six);
        assert_eq!(lease_options(&lease_path(&worker)).lease, six);
        let launch = root.path().join(".locks/launch-s.lock");
        assert_eq!(lease_options(&launch).lease, six);
        let elsewhere = root.path().join("other/x.lock");
        assert_eq!(lease_options(&elsewhere), LockOptions::default());
    }

    #[test]
    fn a_live_recorded_holder_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".worker.lock");
        let _held = Gate::acquire(&path, "worker 3").unwrap();
        // Another open of the same file: the flock is taken, and its holder (us) lives.
        let mut pauses = 0;
        let err = Gate::acquire_pausing(&path, "worker 3", &mut || pauses += 1).unwrap_err();
        assert_eq!(pauses, 0);
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
    }
}
