//! Who holds a lock (`LockOwner`, `owner.json`), how alive they look (`Liveness`,
//! `Holder`), and how long staleness waits (`LockOptions`).

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::fsio;
use crate::host;
use crate::protocol::rfc3339;

/// How long to wait before judging locks stale in the cases that need time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// A lock directory with no owner yet is young (its holder may be between `mkdir`
    /// and its first write) until it is this old.
    pub grace: Duration,
    /// A lock held from another host is alive until its heartbeat is this old.
    pub lease: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            grace: Duration::from_secs(10),
            lease: Duration::from_secs(120),
        }
    }
}

/// Debug variable (like `CONDUCTOR_DEBUG_WATCH_EVENTS`): seconds, signed, added to the
/// wall clock this process dates its lock records by (`acquiredAt`, `heartbeatAt`), to
/// play a host whose clock is off (tests of clock skew across hosts; nothing else).
pub const ENV_DEBUG_CLOCK_OFFSET: &str = "CONDUCTOR_DEBUG_CLOCK_OFFSET_SECS";

/// Now by this process's clock, as its lock records are dated ([`ENV_DEBUG_CLOCK_OFFSET`]).
pub(super) fn lease_stamp() -> String {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let offset = *OFFSET.get_or_init(|| {
        std::env::var(ENV_DEBUG_CLOCK_OFFSET)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    });
    let now = SystemTime::now();
    let at = match offset {
        0 => now,
        o if o > 0 => now + Duration::from_secs(o.unsigned_abs()),
        o => now - Duration::from_secs(o.unsigned_abs()),
    };
    rfc3339(at)
}

/// `owner.json`: who holds a lock, with enough to prove them gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockOwner {
    pub pid: u32,
    pub host: String,
    pub boot_id: String,
    /// Clock ticks since boot at which `pid` started (detects pid reuse).
    #[serde(default)]
    pub start_time: Option<u64>,
    pub nonce: String,
    pub acquired_at: String,
    /// Renewed by long holders; what other hosts judge the lease by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<String>,
    /// [`host::host_id`] of the holder: only a holder of this host is judged by its pid
    /// (absent in locks of versions before it: then `host` decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// The fencing token: one more than any earlier holder of this lock name that this
    /// acquisition could see (the counter in `<lock>.guard`, the taken-over owner's).
    #[serde(default)]
    pub epoch: u64,
    /// The task this lock is held for (key and run-slot locks, recorded before its agent
    /// starts): while processes carrying that task's marker live on this host, the lock
    /// is not free, even if its holder died (its agent's children outlive it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl LockOwner {
    pub(super) fn for_this_process() -> LockOwner {
        let pid = crate::host::pid();
        LockOwner {
            pid,
            host: host::hostname().to_string(),
            boot_id: host::boot_id().to_string(),
            start_time: host::own_start_time(),
            nonce: fsio::nonce(),
            acquired_at: lease_stamp(),
            heartbeat_at: None,
            host_id: Some(host::host_id().to_string()),
            epoch: 0,
            task: None,
        }
    }

    /// Whether this owner is a process of this host (so its pid means something here).
    pub fn is_this_host(&self) -> bool {
        host::is_this_host(self.host_id.as_deref(), Some(&self.host))
    }
}

/// Whether a lock's holder is still there, and why we think so.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    Alive(String),
    Stale(String),
}

impl Liveness {
    pub fn is_stale(&self) -> bool {
        matches!(self, Liveness::Stale(_))
    }
}

/// What we know about the holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub path: PathBuf,
    pub owner: Option<LockOwner>,
    /// From `pid` (or `owner.json` when `pid` is missing).
    pub pid: Option<u32>,
    pub liveness: Liveness,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.liveness, &self.owner) {
            (Liveness::Alive(why) | Liveness::Stale(why), Some(o)) => {
                write!(f, "{why} (since {})", o.acquired_at)
            }
            (Liveness::Alive(why) | Liveness::Stale(why), None) => f.write_str(why),
        }
    }
}
