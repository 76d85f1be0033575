//! A gate held by its flock alone while its holder waits for disk space to start.
//!
//! A worker started on a full disk cannot take its gate (the lease beside it is a
//! directory, and the holder record needs a block), yet it is there and will serve the
//! slot once space returns. Holding the gate file's flock meanwhile makes it seen as
//! the slot's worker by whatever probes the gate (`conductor wait` waits instead of
//! ending "nobody serves it", `conductor status` shows it live). Its holder record is
//! written in place over the old one's bytes, padded, so that it needs no new block;
//! where it does not fit, the flock alone says the gate is held. No lease is taken:
//! another host, which our flock may not reach, judges the slot by the old lease.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use super::holder::GateHolder;
use crate::host;
use crate::protocol::now_rfc3339;

/// The role a waiting holder records: what `conductor status` shows of it.
pub const WAITING_FOR_SPACE: &str = "waiting for disk space";

/// The flock of a gate whose holder waits for space; released when dropped.
#[derive(Debug)]
pub struct WaitingHold {
    _lock: Flock<File>,
}

/// Hold the gate at `path` for `role` while waiting for disk space, if nobody holds
/// it and its file can be opened (made, when missing: a file needs no data block).
/// `None` otherwise: the wait goes on unseen, as before.
pub fn hold_waiting(path: &Path, role: &str) -> Option<WaitingHold> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .ok()?;
    let mut lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()?;
    let holder = GateHolder {
        pid: std::process::id(),
        role: format!("{role} ({WAITING_FOR_SPACE})"),
        host: host::hostname().to_string(),
        since: now_rfc3339(),
        host_id: Some(host::host_id().to_string()),
        lease: None,
    };
    record_in_place(&mut lock, &crate::fsio::to_json_bytes(&holder));
    Some(WaitingHold { _lock: lock })
}

/// Overwrite the record without truncating: padded with spaces to the old length (JSON
/// ignores them), so the file's blocks are reused. A record longer than the old one
/// may find no room; the flock still stands for it then.
fn record_in_place(file: &mut File, record: &[u8]) {
    let old = file.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    let mut bytes = record.to_vec();
    if bytes.len() < old {
        bytes.resize(old, b' ');
    }
    let written = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.write_all(&bytes));
    if let Err(e) = written {
        tracing::debug!("no room to record the waiting holder of a gate: {e}");
    }
}

/// Whether a gate's recorded holder is one waiting for disk space.
pub fn is_waiting(holder: &GateHolder) -> bool {
    holder.role.ends_with(&format!("({WAITING_FOR_SPACE})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_holder_is_seen_by_a_probe_and_gives_way_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let gate = dir.path().join(".worker.lock");
        std::fs::write(&gate, vec![b' '; 400]).unwrap();
        let hold = hold_waiting(&gate, "worker 0").expect("held");
        let seen = super::super::probe(&gate).unwrap().expect("a holder");
        assert_eq!(seen.pid, std::process::id());
        assert!(is_waiting(&seen), "{seen:?}");
        assert!(hold_waiting(&gate, "worker 0").is_none(), "held once only");
        drop(hold);
        assert!(super::super::probe(&gate).unwrap().is_none());
        let gate = super::super::Gate::acquire(&gate, "worker 0").expect("taken");
        assert!(!is_waiting(gate.holder()));
    }
}
