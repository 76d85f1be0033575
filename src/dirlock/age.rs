//! How long a lock has looked dead, and what its holder's process and clock say:
//! the facts a judgement of staleness rests on.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::judge::{LockRead, OwnerRead, ProcessFacts};
use super::owner::LockOwner;
use crate::host;
use crate::procfs;

/// What this host knows about the process a lock names: nothing unless the lock is
/// provably of this host — an owner of this host id (or, before host ids, host name).
/// A pid-only lock is not: locks are born with their owner, so a pid alone is an older
/// version's lock or another host's, whose pid means nothing here.
pub(super) fn facts_about(read: &LockRead) -> Option<ProcessFacts> {
    let pid = read.pid()?;
    let task = match &read.owner {
        OwnerRead::Valid(o) if o.is_this_host() => o.task.as_deref(),
        OwnerRead::Valid(_) => return None,
        // Pid-only: looked at only to keep a lock alive past its grace (see judge).
        _ => None,
    };
    let alive = host::pid_alive(pid);
    let start_time = alive.then(|| host::process_start_time(pid)).flatten();
    let holder_gone = !alive
        || matches!(&read.owner, OwnerRead::Valid(o) if o.start_time.is_some() && o.start_time != start_time);
    // Only when the holder is gone: its task's processes may have outlived it.
    let task_processes = match task {
        Some(task) if holder_gone => procfs::with_environ_entry(
            &format!("{}={task}", crate::env::ENV_TASK_ID),
            nix::unistd::getuid().as_raw(),
        ),
        _ => Vec::new(),
    };
    // Pid-only and alive: what it runs says whether it can be the holder at all.
    let pid_only = !matches!(&read.owner, OwnerRead::Valid(_));
    Some(ProcessFacts {
        alive,
        start_time,
        started_at: alive.then(|| host::process_started_at(pid)).flatten(),
        task_processes,
        command: (alive && pid_only)
            .then(|| super::pid_only::command_line(pid))
            .flatten(),
    })
}

/// Whether the lock at `lock` is on a filesystem other hosts may mount (network or
/// FUSE; a mount table we fail to read counts as shared). Remembered per directory.
pub(super) fn on_shared_fs(lock: &Path) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static KNOWN: Mutex<Option<HashMap<PathBuf, bool>>> = Mutex::new(None);
    let dir = lock.parent().unwrap_or(Path::new("."));
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(&shared) = known.get(dir) {
        return shared;
    }
    let shared = match crate::fs_kind::mount_of(dir) {
        Ok(Some(m)) => m.is_shared(),
        Ok(None) => false,
        Err(_) => return true,
    };
    known.insert(dir.to_path_buf(), shared);
    shared
}

/// How long this process has seen the lock at `path` with no pid at all, without a
/// break; `seen_ownerless`: it is so now (else its record is dropped).
pub(super) fn ownerless_for(path: &Path, seen_ownerless: bool) -> Duration {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Instant;
    static SINCE: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);
    let mut since = SINCE.lock().unwrap_or_else(|e| e.into_inner());
    let since = since.get_or_insert_with(HashMap::new);
    if !seen_ownerless {
        since.remove(path);
        return Duration::ZERO;
    }
    since
        .entry(path.to_path_buf())
        .or_insert_with(Instant::now)
        .elapsed()
}

/// How long this host has seen `owner`'s record (of the lock at `path`) — its acquisition
/// (nonce) at the same renewal — without a change, by its own clock: this process's
/// monotonic clock, from the first sighting by any process of this host that its
/// notes in the root keep ([`super::seen_notes`]). Keyed by the nonce, not the path, so
/// a lock moved aside for a takeover keeps what was seen of it.
pub(super) fn unchanged_for(path: &Path, owner: &LockOwner) -> Duration {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Instant;
    /// Past this many remembered records, those not seen for an hour are forgotten.
    const PRUNE_AT: usize = 4096;
    /// Per nonce: the renewal time last seen, since when, and when last looked at.
    type Seen = HashMap<String, (String, Instant, Instant)>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let stamp = owner
        .heartbeat_at
        .clone()
        .unwrap_or_else(|| owner.acquired_at.clone());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    let now = Instant::now();
    if seen.len() > PRUNE_AT {
        seen.retain(|_, (_, _, last)| now.duration_since(*last) < Duration::from_secs(3600));
    }
    // First sight here of this renewal: since when the host's notes say it was seen.
    let first_seen = |stamp: &str| {
        super::seen_notes::seen_for(path, &owner.nonce, stamp)
            .and_then(|ago| now.checked_sub(ago))
            .unwrap_or(now)
    };
    let entry = match seen.entry(owner.nonce.clone()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert((stamp.clone(), first_seen(&stamp), now))
        }
    };
    if entry.0 != stamp {
        *entry = (stamp.clone(), first_seen(&stamp), now);
    }
    entry.2 = now;
    now.duration_since(entry.1)
}

/// How far a record's own date may stray from its file's time before it is called skew.
pub const SKEW_WARNING: Duration = Duration::from_secs(60);

/// The clock skew `owner`'s record shows: its renewal time (the writer's clock) against
/// the time its lock directory was last changed (the filesystem's), when they differ by
/// more than [`SKEW_WARNING`]; positive when the writer's clock is ahead.
pub fn visible_skew(owner: &LockOwner, modified: SystemTime) -> Option<i64> {
    let stamp = owner
        .heartbeat_at
        .as_deref()
        .and_then(crate::protocol::parse_rfc3339)
        .or_else(|| crate::protocol::parse_rfc3339(&owner.acquired_at))?;
    let skew = match stamp.duration_since(modified) {
        Ok(ahead) => ahead.as_secs() as i64,
        Err(behind) => -(behind.duration().as_secs() as i64),
    };
    (skew.unsigned_abs() > SKEW_WARNING.as_secs()).then_some(skew)
}

/// Warn, once per host, of a lock record whose date and file time disagree by minutes.
pub(super) fn warn_of_skew(path: &Path, owner: &LockOwner, modified: SystemTime) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let Some(skew) = visible_skew(owner, modified) else {
        return;
    };
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned
        .get_or_insert_with(HashSet::new)
        .insert(owner.host.clone())
    {
        tracing::warn!(
            "clock skew: host {}'s lock record {} is dated {}s {} its file's time; its leases \
             are judged by what this process sees change, not by that date (`conductor doctor` \
             reports it)",
            owner.host,
            path.display(),
            skew.unsigned_abs(),
            if skew > 0 { "ahead of" } else { "behind" }
        );
    }
}
