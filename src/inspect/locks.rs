//! Every lock under a root (task locks, key and run-slot locks, gates, parked spares),
//! each judged alive, stale or free for display: what `conductor locks` lists.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::config::Config;
use crate::dirlock::{self, Holder, Liveness, LockOptions};
use crate::error::Result;
use crate::gate;
use crate::host;
use crate::layout::Root;
use crate::protocol::parse_rfc3339;

use crate::fsio::sorted_entries;
use crate::text::{age_since, secs};

/// The root's lock timings from `config.json`; the defaults when it is missing or
/// unreadable (a broken config must not stop anyone from looking at the state).
pub fn lock_options(root: &Root) -> LockOptions {
    match Config::load(&root.config_file()) {
        Ok(c) => c.lock_options(),
        Err(e) => {
            tracing::warn!("using default lock timings: {e}");
            LockOptions::default()
        }
    }
}

/// Who holds a directory lock, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockState {
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub acquired_at: Option<String>,
    #[serde(rename = "ageSecs", serialize_with = "secs")]
    pub age: Option<Duration>,
    pub stale: bool,
    /// The liveness verdict in words ("holder pid 812 is dead").
    pub reason: String,
}

impl From<&Holder> for LockState {
    fn from(h: &Holder) -> LockState {
        let (stale, reason) = match &h.liveness {
            Liveness::Alive(why) => (false, why.clone()),
            Liveness::Stale(why) => (true, why.clone()),
        };
        let acquired_at = h.owner.as_ref().map(|o| o.acquired_at.clone());
        LockState {
            pid: h.pid,
            host: h.owner.as_ref().map(|o| o.host.clone()),
            age: acquired_at
                .as_deref()
                .and_then(parse_rfc3339)
                .map(age_since),
            acquired_at,
            stale,
            reason,
        }
    }
}

/// What kind of lock an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LockKind {
    /// `workers/<N>/.lock/`: held while a worker has a task in hand.
    Task,
    /// `keys/<key>.lock/`: one running task per key.
    Key,
    /// `slots/<i>.lock/`: the global cap on running agents.
    RunSlot,
    /// A flock gate: `workers/<N>/.worker.lock` or `.locks/<name>`.
    Gate,
    /// `ports/<port>.lock/`: a running worktree task's port (config.json `portRange`).
    Port,
    /// A lock directory parked between tasks as `<lock>.spare.<pid>`.
    Spare,
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockKind::Task => "task",
            LockKind::Key => "key",
            LockKind::RunSlot => "run-slot",
            LockKind::Gate => "gate",
            LockKind::Port => "port",
            LockKind::Spare => "spare",
        })
    }
}

/// Whether a lock's holder is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LockStatus {
    Alive,
    Stale,
    /// A gate file nobody holds (gates are never stale: the kernel drops them).
    Free,
}

impl fmt::Display for LockStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockStatus::Alive => "alive",
            LockStatus::Stale => "stale",
            LockStatus::Free => "free",
        })
    }
}

/// One lock under the root, as `conductor locks` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockEntry {
    pub kind: LockKind,
    /// `worker 0`, `key alice`, `run-slot 3`, `.locks/launcher` …
    pub name: String,
    pub path: PathBuf,
    pub status: LockStatus,
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub acquired_at: Option<String>,
    #[serde(rename = "ageSecs", serialize_with = "secs")]
    pub age: Option<Duration>,
    /// Why it is judged alive, stale or free.
    pub reason: String,
}

impl LockEntry {
    /// An entry with nothing known about its holder yet.
    fn new(kind: LockKind, name: String, path: &Path, status: LockStatus, reason: String) -> Self {
        LockEntry {
            kind,
            name,
            path: path.to_path_buf(),
            status,
            pid: None,
            host: None,
            acquired_at: None,
            age: None,
            reason,
        }
    }

    fn from_holder(kind: LockKind, name: String, h: &Holder) -> LockEntry {
        let st = LockState::from(h);
        let status = if st.stale {
            LockStatus::Stale
        } else {
            LockStatus::Alive
        };
        LockEntry {
            pid: st.pid,
            host: st.host,
            acquired_at: st.acquired_at,
            age: st.age,
            ..LockEntry::new(kind, name, &h.path, status, st.reason)
        }
    }

    fn gate(name: String, path: &Path) -> Result<LockEntry> {
        let Some(g) = gate::probe(path)? else {
            let reason = "not held".to_string();
            return Ok(LockEntry::new(
                LockKind::Gate,
                name,
                path,
                LockStatus::Free,
                reason,
            ));
        };
        let pid = Some(g.pid).filter(|p| *p != 0);
        let since = Some(g.since).filter(|s| !s.is_empty());
        let reason = match (pid, &g.lease) {
            // Another host's holder: its flock does not reach us; its lease does.
            (_, Some(lease)) if g.role.is_empty() => format!("lease: {lease}"),
            (_, Some(lease)) => format!("lease: {lease} ({})", g.role),
            (p, None) => flock_reason(p, &g.role),
        };
        Ok(LockEntry {
            pid,
            host: Some(g.host).filter(|h| !h.is_empty()),
            age: since.as_deref().and_then(parse_rfc3339).map(age_since),
            acquired_at: since,
            ..LockEntry::new(LockKind::Gate, name, path, LockStatus::Alive, reason)
        })
    }

    fn spare(name: String, path: &Path, pid: u32) -> LockEntry {
        // A spare records its owner: another host's pid means nothing here.
        let owner: Option<crate::dirlock::LockOwner> =
            crate::fsio::read_json(&path.join("owner.json"), crate::fsio::SMALL_FILE_LIMIT)
                .unwrap_or(None);
        if let Some(o) = owner.filter(|o| !o.is_this_host()) {
            let reason = format!("parked between tasks by pid {pid} on host {}", o.host);
            return LockEntry {
                pid: Some(pid),
                host: Some(o.host),
                ..LockEntry::new(LockKind::Spare, name, path, LockStatus::Alive, reason)
            };
        }
        let (status, reason) = if host::pid_alive(pid) {
            (
                LockStatus::Alive,
                format!("parked between tasks by live pid {pid}"),
            )
        } else {
            (
                LockStatus::Stale,
                format!("parked by pid {pid}, which is dead"),
            )
        };
        LockEntry {
            pid: Some(pid),
            ..LockEntry::new(LockKind::Spare, name, path, status, reason)
        }
    }
}

/// Why a gate held by a flock on this host is alive.
fn flock_reason(pid: Option<u32>, role: &str) -> String {
    match pid {
        Some(p) if role.is_empty() => format!("flock held by live pid {p}"),
        Some(p) => format!("flock held by live pid {p} ({role})"),
        None => "flock held (holder not recorded yet)".to_string(),
    }
}

/// The parked spares (`<lock>.spare.<pid>`) in `dir`, with the pid each names.
pub fn spares_in(dir: &Path) -> Result<Vec<(PathBuf, u32)>> {
    Ok(sorted_entries(dir)?
        .into_iter()
        .filter(|(_, _, m)| m.is_dir())
        .filter_map(|(name, path, _)| {
            let (base, suffix) = name.rsplit_once(".spare.")?;
            (base.ends_with(".lock") || base == ".lock")
                .then_some(())
                .and(dirlock::spare_suffix(suffix))
                .map(|(pid, _)| (path, pid))
        })
        .collect())
}

/// Directory locks (`<name>.lock/`) in `dir`: `keys/` or `slots/`.
fn dir_locks_in(
    dir: &Path,
    kind: LockKind,
    opts: &LockOptions,
    out: &mut Vec<LockEntry>,
) -> Result<()> {
    for (name, path, meta) in sorted_entries(dir)? {
        let Some(base) = name.strip_suffix(".lock") else {
            continue;
        };
        if !meta.is_dir() || base.is_empty() {
            continue;
        }
        if let Some(h) = dirlock::inspect(&path, opts)? {
            out.push(LockEntry::from_holder(kind, format!("{kind} {base}"), &h));
        }
    }
    for (path, pid) in spares_in(dir)? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = name.split(".lock.spare.").next().unwrap_or_default();
        out.push(LockEntry::spare(
            format!("{kind} {base} (pid {pid})"),
            &path,
            pid,
        ));
    }
    Ok(())
}

/// Every lock under the root: each worker's `.lock`, gate and parked spares,
/// `keys/*.lock`, `slots/*.lock` and the gates in `.locks/`.
pub fn list_locks(root: &Root, opts: &LockOptions) -> Result<Vec<LockEntry>> {
    let mut out = Vec::new();
    for slot in root.slots()? {
        let w = root.worker(slot);
        if let Some(h) = dirlock::inspect(&w.lock_dir(), opts)? {
            out.push(LockEntry::from_holder(
                LockKind::Task,
                format!("worker {slot}"),
                &h,
            ));
        }
        if fs::symlink_metadata(w.worker_gate()).is_ok() {
            out.push(LockEntry::gate(format!("worker {slot}"), &w.worker_gate())?);
        }
        for (path, pid) in spares_in(&w.dir)? {
            out.push(LockEntry::spare(
                format!("worker {slot} (pid {pid})"),
                &path,
                pid,
            ));
        }
    }
    dir_locks_in(&root.keys_dir(), LockKind::Key, opts, &mut out)?;
    dir_locks_in(&root.slots_dir(), LockKind::RunSlot, opts, &mut out)?;
    dir_locks_in(&root.groups_dir(), LockKind::RunSlot, opts, &mut out)?;
    dir_locks_in(&root.ports_dir(), LockKind::Port, opts, &mut out)?;
    for (name, path, meta) in sorted_entries(&root.gates_dir())? {
        if meta.is_file() && !name.ends_with(".guard") && !name.ends_with(".tmp") {
            out.push(LockEntry::gate(format!(".locks/{name}"), &path)?);
        }
    }
    Ok(out)
}
