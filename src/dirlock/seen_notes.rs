//! Notes, kept in the root per observing host, of when this host first saw another
//! host's lock record at a given renewal: the lease wait survives restarts.
//!
//! A lock of another host is taken only once seen unchanged for a whole lease by the
//! judge's own clock (its date is the other host's clock). Kept in memory alone, that
//! wait began again in every process: a worker restarted by a supervisor each time it
//! refused the slot never waited long enough (issue 38.3). A note records the record's
//! nonce and renewal stamp and this host's boot clock (`CLOCK_BOOTTIME`) when it was
//! first seen so; the host id names the boot, so the clock is comparable between the
//! processes of one host and never across hosts. The note only says what was seen and
//! when: a process reading it knows no more than the one that wrote it knew then.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fsio::{self, Durability};
use crate::host;

/// Notes not rewritten for this long are pruned: past the longest lease
/// (`config::MAX_LEASE_SECS`) with room; a note pruned early only makes its reader wait again.
const PRUNE_AFTER: Duration = Duration::from_secs(2 * 86_400);

/// How often (at most) one process prunes its host's notes.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// This host's notes directory for the root holding `lock`: `<root>/hosts/<host id>/seen`,
/// where the root is the nearest ancestor with `workers/` and `queue/` in it. `None`
/// for a lock outside any root (then only memory keeps what was seen).
fn notes_dir(lock: &Path) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static KNOWN: Mutex<Option<HashMap<PathBuf, Option<PathBuf>>>> = Mutex::new(None);
    let parent = lock.parent()?;
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(dir) = known.get(parent) {
        return dir.clone();
    }
    let dir = parent
        .ancestors()
        .take(4)
        .find(|d| d.join("workers").is_dir() && d.join("queue").is_dir())
        .map(|root| root.join("hosts").join(host::host_id()).join("seen"));
    known.insert(parent.to_path_buf(), dir.clone());
    dir
}

/// A nonce usable as a file name (another host wrote it: anything else gets no note).
fn file_name(nonce: &str) -> Option<&str> {
    let ok = !nonce.is_empty()
        && nonce.len() <= 96
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then_some(nonce)
}

/// How long ago, by this host's boot clock, a process of this host first saw the
/// record `nonce` at renewal `stamp` of the lock at `lock`; notes it as seen now when
/// no note says so. `None`: no note could be read or written.
pub(super) fn seen_for(lock: &Path, nonce: &str, stamp: &str) -> Option<Duration> {
    let dir = notes_dir(lock)?;
    let path = dir.join(file_name(nonce)?);
    let now = host::boot_clock();
    let noted = fsio::read_bounded(&path, 512)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|text| parse(&text, stamp));
    if let Some(at) = noted {
        return Some(now.saturating_sub(at));
    }
    if let Err(e) = fsio::ensure_dir(&dir).and_then(|()| {
        let text = format!("{stamp}\n{}\n", now.as_nanos());
        fsio::write_replace(&path, text.as_bytes(), Durability::Atomic)
    }) {
        tracing::debug!("cannot note a lock record as seen: {e}");
        return None;
    }
    prune_if_due(&dir);
    Some(Duration::ZERO)
}

/// The boot-clock time a note records, if it is of renewal `stamp`.
fn parse(text: &str, stamp: &str) -> Option<Duration> {
    let mut lines = text.lines();
    if lines.next()? != stamp {
        return None;
    }
    let nanos: u64 = lines.next()?.trim().parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Remove this host's notes not rewritten for [`PRUNE_AFTER`], at most once per
/// [`PRUNE_EVERY`] per process.
fn prune_if_due(dir: &Path) {
    use std::sync::Mutex;
    use std::time::Instant;
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
            return;
        }
        *last = Some(Instant::now());
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > PRUNE_AFTER);
        if old {
            let _ = fsio::remove_file_if_exists(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        for d in ["workers/0", "queue", "keys"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let lock = dir.path().join("keys/k.lock");
        (dir, lock)
    }

    #[test]
    fn a_note_keeps_the_first_sighting_of_a_renewal_across_readers() {
        let (_d, lock) = root();
        assert_eq!(seen_for(&lock, "n1", "t1"), Some(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(30));
        // Another process of this host reads the same note: the wait goes on.
        let later = seen_for(&lock, "n1", "t1").unwrap();
        assert!(later >= Duration::from_millis(30), "{later:?}");
        // A renewal starts it again.
        assert_eq!(seen_for(&lock, "n1", "t2"), Some(Duration::ZERO));
    }

    #[test]
    fn no_note_outside_a_root_or_for_a_strange_nonce() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(seen_for(&dir.path().join("x.lock"), "n", "t"), None);
        let (_d, lock) = root();
        assert_eq!(seen_for(&lock, "../escape", "t"), None);
    }
}
