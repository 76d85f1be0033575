//! Singleton gates: a non-blocking exclusive flock held for a role's whole life.
//!
//! The kernel drops the flock when the holder dies, so a gate is never stale. The file
//! also records who holds it, so the loser can name the holder in its error.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsio;
use crate::host;
use crate::protocol::now_rfc3339;

/// How long `acquire` keeps retrying while the gate is only being probed (probes hold
/// a shared flock for microseconds; a real holder holds it exclusively).
const PROBE_RETRY: Duration = Duration::from_secs(1);

/// What a gate file records about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateHolder {
    pub pid: u32,
    pub role: String,
    pub host: String,
    pub since: String,
}

/// A held singleton gate; dropping it (or dying) releases it.
#[derive(Debug)]
pub struct Gate {
    path: PathBuf,
    _lock: Flock<File>,
    holder: GateHolder,
}

impl Gate {
    /// Take the gate at `path` for `role` (e.g. "worker 3"), or fail at once naming
    /// the current holder.
    pub fn acquire(path: &Path, role: &str) -> Result<Gate> {
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
        // A `probe` holds a brief shared flock, which also makes our exclusive attempt
        // fail. Only an exclusive holder refuses a shared lock: if we can get one, the
        // gate is merely being probed — let go and try again (bounded).
        let probed_until = Instant::now() + PROBE_RETRY;
        let mut file = file;
        let mut lock = loop {
            let file_back = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(l) => break l,
                Err((f, Errno::EWOULDBLOCK)) => f,
                Err((_, errno)) => return Err(Error::io("flock gate", path, errno.into())),
            };
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
        };
        let holder = GateHolder {
            pid: std::process::id(),
            role: role.to_string(),
            host: host::hostname().to_string(),
            since: now_rfc3339(),
        };
        let record = fsio::to_json_bytes(&holder);
        let written = lock
            .set_len(0)
            .and_then(|()| lock.seek(SeekFrom::Start(0)))
            .and_then(|_| lock.write_all(&record));
        written.map_err(|e| Error::io("record gate holder in", path, e))?;
        Ok(Gate {
            path: path.to_path_buf(),
            _lock: lock,
            holder,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn holder(&self) -> &GateHolder {
        &self.holder
    }
}

impl Drop for Gate {
    /// A clean exit leaves no holder details behind for `cat` to mislead with.
    /// (After a crash the record stays, but the kernel has dropped the flock.)
    fn drop(&mut self) {
        let _ = self._lock.set_len(0);
    }
}

/// Who holds the gate at `path`, if anyone (probes with a non-blocking flock).
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
        Ok(_free) => Ok(None),
        Err((mut file, Errno::EWOULDBLOCK)) => {
            Ok(Some(read_holder(&mut file).unwrap_or(GateHolder {
                pid: 0,
                role: String::new(),
                host: String::new(),
                since: String::new(),
            })))
        }
        Err((_, errno)) => Err(Error::io("flock gate", path, errno.into())),
    }
}

fn read_holder(file: &mut File) -> Option<GateHolder> {
    let mut buf = Vec::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(64 * 1024).read_to_end(&mut buf).ok()?;
    serde_json::from_slice(&buf).ok()
}
