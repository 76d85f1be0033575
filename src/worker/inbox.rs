//! Reading the slot's inbox into a state, and quarantining what cannot be run.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::slot_server::{Shared, SlotServer};
use crate::error::{Error, FileProblem, Result};
use crate::fsio;
use crate::ids::{self, Place};
use crate::ledger;
use crate::protocol::{Task, TaskId};

/// What the inbox holds, read under the slot's lock.
pub(crate) enum Inbox {
    /// Gone (claimed or withdrawn) since we looked.
    Empty,
    /// Unparseable, but maybe still being written by a non-atomic client: look again
    /// after this long.
    Incomplete(Duration),
    /// Cannot be run: quarantine it, answering `id` when one could be read.
    Bad { reason: String, id: Option<TaskId> },
    /// A task ready to claim, with the bytes it was read from.
    /// `file`: the inbox still open (with what `fstat` said when it was opened), for
    /// the claim to read again after its rename ([`crate::fsio::reread_bounded`]).
    Ready {
        task: Box<Task>,
        bytes: Vec<u8>,
        file: (std::fs::File, std::fs::Metadata),
    },
}

/// Read and judge the inbox file.
pub(crate) fn read(shared: &Shared, slot: &SlotServer) -> Result<Inbox> {
    let inbox = slot.paths.task();
    let (file, meta, bytes) = match read_bytes(&inbox, shared.config.max_task_bytes())? {
        Ok(read) => read,
        Err(state) => return Ok(state),
    };
    let mut task = match Task::from_bytes(&inbox, &bytes) {
        Ok(t) => t,
        Err(Error::BadFile { problem, .. }) => {
            if problem.may_be_incomplete() {
                let read = bytes.len() as u64;
                if let Some(wait) = still_being_written(&inbox, shared.opts.quiet_grace, read)? {
                    return Ok(Inbox::Incomplete(wait));
                }
            }
            return Ok(Inbox::Bad {
                reason: problem.to_string(),
                id: Task::salvage_id(&bytes),
            });
        }
        Err(e) => return Err(e),
    };
    // Only a task this worker claims from queue/pending is a queue task.
    task.origin = None;
    if let Some(reason) = refusal(shared, slot, &task) {
        return Ok(Inbox::Bad {
            reason,
            id: task.id.clone(),
        });
    }
    Ok(Inbox::Ready {
        task: Box::new(task),
        bytes,
        file: (file, meta),
    })
}

/// The inbox file's bytes, or (`Err`) the state it is in when it cannot be read.
type Read = (std::fs::File, std::fs::Metadata, Vec<u8>);

fn read_bytes(inbox: &Path, limit: u64) -> Result<std::result::Result<Read, Inbox>> {
    Ok(match fsio::read_bounded_open(inbox, limit) {
        Ok(Some(read)) => Ok(read),
        Ok(None) => Err(Inbox::Empty),
        Err(Error::BadFile { problem, .. }) => {
            // Too large to read whole: its head may still name the id it waits under.
            let id = matches!(problem, FileProblem::TooLarge { .. })
                .then(|| fsio::read_head(inbox, crate::protocol::salvage::PREFIX_SCANNED))
                .flatten()
                .and_then(|head| Task::salvage_id(&head));
            Err(Inbox::Bad {
                reason: problem.to_string(),
                id,
            })
        }
        // Unopenable (a socket, no permission): refusing it once beats failing on it
        // at every start.
        Err(e @ Error::Io { .. }) => Err(Inbox::Bad {
            reason: e.to_string(),
            id: None,
        }),
        Err(e) => return Err(e),
    })
}

/// Why a well-formed inbox task cannot run here, if it cannot.
fn refusal(shared: &Shared, slot: &SlotServer, task: &Task) -> Option<String> {
    if !task.after.is_empty() {
        // Nothing would hold it back here: running it would break its promise.
        let e = Error::AfterNeedsQueue {
            task: task
                .id
                .as_ref()
                .map_or_else(|| "(no id)".into(), TaskId::to_string),
            after: crate::protocol::id_list(&task.after),
        };
        return Some(e.to_string());
    }
    let id = task.id.as_ref()?;
    // Its id must be this inbox's (registered now if an original client wrote it).
    if let Err(e @ Error::IdTaken { .. }) =
        ids::claim(&shared.opts.root, id, Place::Worker(slot.slot()))
    {
        return Some(e.to_string());
    }
    slot.paths.result_for(id).exists().then(|| {
        format!(
            "task id {id} was already used on worker {} (results/{id}.json exists); \
             send it with a new id",
            slot.slot()
        )
    })
}

/// A client's file kept by the tool (in `tasks/` or `rejected/`) is private like every
/// file the tool makes: clients often write task.json with their umask (0644). The mode
/// is changed through a descriptor opened without following links; a file with another
/// name (a hard link from outside the root) is not chmod'ed — that would change the
/// other name's file too — but replaced by a private copy under this name.
pub(crate) fn make_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path);
    let Ok(file) = opened else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    make_private_open(path, &file, &meta);
}

/// [`make_private`] for the file at `path` already open as `file`, `meta` what `fstat`
/// said of it then. The claim's case: the inbox it read, renamed to `running.json`. Its
/// links are counted again now (one made since the read must not be chmod'ed through,
/// and a publisher's temporary one may be gone). Whether `path` still names `file` after
/// (not when a private copy replaced it).
pub(crate) fn make_private_open(path: &Path, file: &fs::File, meta: &fs::Metadata) -> bool {
    if !meta.is_file() {
        return true;
    }
    match file.metadata() {
        Ok(now) => make_private_now(path, file, &now),
        Err(_) => true,
    }
}

/// [`make_private_open`] given what the file is now (`now`: its `fstat`, or an `lstat`
/// of `path` found to be the same inode as `file` — the claim has one at hand).
pub(crate) fn make_private_now(path: &Path, file: &fs::File, meta: &fs::Metadata) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !meta.is_file() {
        return true;
    }
    if meta.mode() & 0o777 == 0o600 && meta.nlink() == 1 {
        return true;
    }
    if meta.nlink() > 1 {
        const LIMIT: u64 = 64 * 1024 * 1024;
        let copied = fsio::read_bounded(path, LIMIT).and_then(|bytes| match bytes {
            Some(b) => fsio::write_replace(path, &b, fsio::Durability::Durable),
            None => Ok(()),
        });
        match copied {
            Ok(()) => tracing::info!(
                "{} had another name (a hard link): kept as a private copy",
                path.display()
            ),
            Err(e) => tracing::warn!("cannot make {} private: {e}", path.display()),
        }
        return false;
    }
    if let Err(e) = file.set_permissions(fs::Permissions::from_mode(0o600)) {
        tracing::debug!("cannot make {} private: {e}", path.display());
    }
    true
}

/// How soon an inbox file seen growing is read again.
const GROWING_LOOK: Duration = Duration::from_millis(20);

/// `Some(wait)` while an unparseable inbox file of `read` bytes may still be mid-write.
fn still_being_written(
    inbox: &Path,
    quiet_grace: Duration,
    read: u64,
) -> Result<Option<Duration>> {
    let meta = fs::symlink_metadata(inbox).map_err(|e| Error::io("stat", inbox, e))?;
    if meta.len() != read {
        // Grown (or cut) since it was read: still being written, however old its mtime
        // (one long `write` stamps it once, at its start: a 5 MiB one on a loaded
        // machine outlasted the grace, and its first 4 MiB were refused as cut JSON).
        return Ok(Some(GROWING_LOOK));
    }
    let mtime = meta.modified().map_err(|e| Error::io("stat", inbox, e))?;
    let quiet_for = SystemTime::now().duration_since(mtime).unwrap_or_default();
    if quiet_for >= quiet_grace {
        return Ok(None);
    }
    let wait = quiet_grace - quiet_for + Duration::from_millis(5);
    tracing::debug!(
        "{} does not parse yet; re-reading in {wait:?}",
        inbox.display()
    );
    Ok(Some(wait))
}

/// Move a bad inbox file to `rejected/` with a `.reason`, and answer it with an
/// `error` result when its id could be read.
///
/// The reason is written first, so whoever sees the inbox empty can read why. Then
/// the file leaves the inbox (to `rejecting.json`, where recovery finishes the
/// rejection should we die — never as a task to run), and only then is it answered: a client that sees the answer may
/// deliver its next task at once, and that one must not be swept away in its place.
pub(crate) fn reject(
    slot: &SlotServer,
    inbox: &Path,
    reason: &str,
    id: Option<TaskId>,
) -> Result<()> {
    let reason_line = format!("{}: {reason}\n", inbox.display());
    let dest = ledger::note_rejection(&slot.paths, id.as_ref(), &reason_line)?;
    let held = slot.paths.rejecting();
    match fs::rename(inbox, &held) {
        Ok(()) => {}
        // Withdrawn meanwhile (`conductor cancel`): whoever took it answered it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut note = dest.into_os_string();
            note.push(".reason");
            let _ = fs::remove_file(note);
            return Ok(());
        }
        Err(e) => return Err(Error::io("take out of the inbox", inbox, e)),
    }
    make_private(&held);
    if let Some(id) = id {
        answer_rejected(slot, id, reason)?;
    }
    fs::rename(&held, &dest).map_err(|e| Error::io("move to rejected/", &held, e))?;
    tracing::warn!(
        "rejected {}: {reason} (kept as {})",
        inbox.display(),
        dest.display()
    );
    Ok(())
}

/// A rejected task's `error` result and status.
fn answer_rejected(slot: &SlotServer, id: TaskId, reason: &str) -> Result<()> {
    let st = ledger::answer_rejected(&slot.root, &slot.paths, id, reason)?;
    if let Err(e) = slot.board.publish(st) {
        tracing::warn!("publishing status for rejected task: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Client;
    use crate::layout::{Root, Slot};

    /// One long `write` stamps the file's mtime once, at its start: a file still
    /// growing under an mtime older than the grace is mid-write all the same (the
    /// oversize case of `worker::bad_inputs_are_rejected_…` read 4 MiB of a 5 MiB
    /// write on a loaded machine and refused it as cut JSON).
    #[test]
    fn a_file_grown_since_its_read_is_still_being_written_whatever_its_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = dir.path().join("task.json");
        fs::write(&inbox, b"{\"id\": \"x\", \"prompt\": \"aaaa").unwrap();
        let old = SystemTime::now() - Duration::from_secs(10);
        fs::File::options()
            .write(true)
            .open(&inbox)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let grace = Duration::from_millis(500);
        let len = fs::metadata(&inbox).unwrap().len();
        assert_eq!(still_being_written(&inbox, grace, len).unwrap(), None);
        assert!(still_being_written(&inbox, grace, len - 4).unwrap().is_some());
    }

    #[test]
    fn a_file_withdrawn_before_its_rejection_ends_it_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        let client = Client::new(root.clone());
        client.init_queue().unwrap();
        let paths = client.create_worker(Slot(0)).unwrap();
        let slot = SlotServer::take(&root, Slot(0), Vec::new()).unwrap();
        // The inbox file was judged bad, then withdrawn before it could be moved.
        let gone = paths.task();
        reject(&slot, &gone, "is not valid JSON", Some(TaskId::from("w1"))).unwrap();
        let left: Vec<_> = fs::read_dir(paths.rejected_dir()).unwrap().collect();
        assert!(left.is_empty(), "no reason is left for a file that is gone");
        assert!(!paths.running().exists());
        assert!(
            !paths.result_for(&TaskId::from("w1")).exists(),
            "whoever withdrew it answers it"
        );
    }
}
