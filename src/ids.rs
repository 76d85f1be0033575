//! The root-wide task-id registry: `ids/<id>` says where each task went, so an id is used once.
//!
//! Every id is reserved here before its task is delivered ([`crate::queue::Queue::submit`],
//! [`crate::Client::write_task`]) or, for a task an original client wrote straight into an
//! inbox, when a worker claims it. An entry is staged and then hard-linked into place (so
//! it appears whole, exclusively, 0600) and is never rewritten: a task's result can never
//! be confused with another task's, and the entry doubles as the index from an id to the
//! place its task went (`{"schema":1,"place":"queue"}` or `"workers/3"`).
//!
//! Roots from before the registry kept queue ids as empty files in `queue/ids/`; such an
//! entry still counts as taken by the queue.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, FileProblem, Result};
use crate::fsio::{self, SMALL_FILE_LIMIT};
use crate::layout::{Root, Slot};
use crate::protocol::{check_schema, TaskId, SCHEMA};

mod short;
pub use short::{claim_handle, fresh, short_forms};

/// Where a task went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Place {
    /// The shared queue (`queue/pending/`, then whichever worker claimed it).
    Queue,
    /// One worker's inbox (`workers/<N>/task.json`).
    Worker(Slot),
}

impl Place {
    /// The place as stored in an entry: a path relative to the root.
    fn as_stored(&self) -> String {
        match self {
            Place::Queue => "queue".to_string(),
            Place::Worker(s) => format!("workers/{s}"),
        }
    }

    fn from_stored(s: &str) -> Option<Place> {
        if s == "queue" {
            return Some(Place::Queue);
        }
        s.strip_prefix("workers/")?.parse().ok().map(Place::Worker)
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Queue => f.write_str("the shared queue"),
            Place::Worker(s) => write!(f, "worker {s}"),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    #[serde(default = "schema_v1")]
    schema: u32,
    place: String,
}

fn schema_v1() -> u32 {
    SCHEMA
}

fn legacy_entry(root: &Root, id: &TaskId) -> PathBuf {
    root.queue_ids().join(id.to_string())
}

/// Where `id`'s task went, if the id is taken. O(1): one or two file reads.
pub fn lookup(root: &Root, id: &TaskId) -> Result<Option<Place>> {
    let path = root.id_entry(id);
    match read_entry(&path) {
        Ok(Some(place)) => Ok(Some(place)),
        Ok(None) if legacy_entry(root, id).exists() => Ok(Some(Place::Queue)),
        Ok(None) => Ok(None),
        Err(Error::BadFile { problem, .. }) => rebuild(root, id, &path, &problem),
        Err(e) => Err(e),
    }
}

/// The shortest a shortened id may be (as git's abbreviated hashes).
pub const MIN_PREFIX: usize = 4;

/// Every id registered on the root (the registry's and the legacy queue's), sorted.
pub fn all(root: &Root) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for dir in [root.ids_dir(), root.queue_ids()] {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("listing", dir.clone(), e)),
        };
        for entry in entries.flatten() {
            if let Some(name) = entry.file_name().to_str() {
                if !name.starts_with('.') {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The id `given` names: itself when it is a registered id (or too short to be a
/// prefix, or starts no id); else the one registered id it is a prefix of, at least
/// [`MIN_PREFIX`] characters long, as git takes an abbreviated hash — a prefix of a task
/// and its retries names the task, and `<prefix>-rN` its retry N. Several:
/// [`Error::AmbiguousId`].
pub fn resolve(root: &Root, given: &TaskId) -> Result<TaskId> {
    let text = given.to_string();
    if text.len() < MIN_PREFIX || lookup(root, given)?.is_some() {
        return Ok(given.clone());
    }
    let all = all(root)?;
    match resolve_in(&all, &text)? {
        Some(one) => TaskId::parse(&one).map_err(|reason| Error::InvalidTask { reason }),
        None => Ok(given.clone()),
    }
}

/// The registered id (of `all`, sorted) that `text` names, if any.
fn resolve_in(all: &[String], text: &str) -> Result<Option<String>> {
    if text.len() < MIN_PREFIX {
        return Ok(None);
    }
    let matches: Vec<&String> = all.iter().filter(|n| n.starts_with(text)).collect();
    match matches.as_slice() {
        [] => Ok(short::retry_of_prefix(text, |base| resolve_in(all, base))?
            .filter(|id| all.binary_search(id).is_ok())),
        [one] => Ok(Some(one.to_string())),
        many => match short::one_task(many) {
            Some(task) => Ok(Some(task)),
            None => Err(Error::AmbiguousId {
                prefix: text.to_string(),
                count: many.len(),
                matches: many.iter().take(5).map(|m| m.to_string()).collect(),
            }),
        },
    }
}

/// Whether the registry entry at `path` is whole (for `doctor`).
pub fn check_entry(path: &std::path::Path) -> Result<()> {
    read_entry(path).map(drop)
}

fn read_entry(path: &std::path::Path) -> Result<Option<Place>> {
    let Some(bytes) = fsio::read_bounded(path, SMALL_FILE_LIMIT)? else {
        return Ok(None);
    };
    let entry: Entry = fsio::parse_json(path, &bytes)?;
    check_schema(path, entry.schema)?;
    Place::from_stored(&entry.place).map(Some).ok_or_else(|| {
        Error::bad(
            path,
            FileProblem::Invalid(format!(
                "place {:?} is neither \"queue\" nor \"workers/N\"",
                entry.place
            )),
        )
    })
}

/// A damaged entry (empty after a power loss, say: entries are not fsynced) is an
/// index, not a record: set it aside and write it anew from where the task really is.
/// `None` when nothing on the root knows the id any more.
fn rebuild(
    root: &Root,
    id: &TaskId,
    path: &std::path::Path,
    problem: &FileProblem,
) -> Result<Option<Place>> {
    let aside = fsio::set_aside_damaged(path)?;
    let place = where_it_is(root, id)?;
    if let Some(place) = place {
        let entry = Entry {
            schema: SCHEMA,
            place: place.as_stored(),
        };
        match fsio::write_new(path, &fsio::to_json_bytes(&entry), fsio::Durability::Atomic) {
            // Someone rebuilt it first (or registered the id anew): theirs stands.
            Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {}
            other => other?,
        }
    }
    tracing::warn!(
        "task id entry {} {problem}: set aside{}; {}",
        path.display(),
        aside
            .map(|a| format!(" as {}", a.display()))
            .unwrap_or_default(),
        match place {
            Some(p) => format!("rebuilt from where the task is: {p}"),
            None => "no file on the root has the task, so the id is free".to_string(),
        }
    );
    Ok(place)
}

/// Where task `id` is, from its files: a pending entry or a result of the queue, or a
/// slot's inbox, task in hand, result or task record.
fn where_it_is(root: &Root, id: &TaskId) -> Result<Option<Place>> {
    let pending = root.pending_entry(id)?.is_some();
    if pending || root.queue_results().join(format!("{id}.json")).exists() {
        return Ok(Some(Place::Queue));
    }
    let holds = |p: &std::path::Path| crate::protocol::Task::file_holds(p, id);
    // A queue task run by a slot says so in its `origin`.
    let place_of = |task_file: &std::path::Path, slot: Slot| {
        let queued = crate::protocol::Task::read(task_file, fsio::TASK_SIZE_LIMIT)
            .ok()
            .flatten()
            .is_some_and(|t| t.origin.as_deref() == Some("queue"));
        if queued {
            Place::Queue
        } else {
            Place::Worker(slot)
        }
    };
    for slot in root.slots()? {
        let w = root.worker(slot);
        if holds(&w.task()) {
            return Ok(Some(Place::Worker(slot)));
        }
        if holds(&w.running()) {
            return Ok(Some(place_of(&w.running(), slot)));
        }
        if w.task_record(id).exists() {
            return Ok(Some(place_of(&w.task_record(id), slot)));
        }
        if w.result_for(id).exists() {
            return Ok(Some(Place::Worker(slot)));
        }
    }
    Ok(None)
}

fn taken(id: &TaskId, place: Place, path: PathBuf) -> Error {
    Error::IdTaken {
        id: id.to_string(),
        place: place.to_string(),
        path,
    }
}

/// Where an existing entry lives (the registry's, or the legacy queue's).
fn entry_path(root: &Root, id: &TaskId) -> PathBuf {
    let path = root.id_entry(id);
    if path.exists() {
        path
    } else {
        legacy_entry(root, id)
    }
}

/// Reserve `id` for a task about to be delivered to `place`. Refuses, naming where,
/// an id that is registered, or that has a result from before the registry existed
/// (in the queue's results, or in `place`'s own).
pub fn reserve(root: &Root, id: &TaskId, place: Place) -> Result<()> {
    id.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    if let Some(p) = lookup(root, id)? {
        return Err(taken(id, p, entry_path(root, id)));
    }
    let queue_result = root.queue_results().join(format!("{id}.json"));
    if queue_result.exists() {
        return Err(taken(id, Place::Queue, queue_result));
    }
    if let Place::Worker(slot) = place {
        let kept = root.worker(slot).result_for(id);
        if kept.exists() {
            return Err(taken(id, place, kept));
        }
    }
    create(root, id, place)
}

/// [`reserve`] for an id [`TaskId::generate`] just made (milliseconds, our pid, our own
/// counter; its handle claimed on the root by [`fresh`], which alone keeps a forked
/// child's ids apart from its parent's): no task can have used it before, so only the
/// entry's own link — which refuses a name already there — is needed, not the four look-ups for an earlier use
/// (a fifth of an orchestrator's work between a result and the next delivery).
pub fn reserve_fresh(root: &Root, id: &TaskId, place: Place) -> Result<()> {
    id.validate()
        .map_err(|reason| Error::InvalidTask { reason })?;
    create(root, id, place)
}

/// The worker's side, for a task it has claimed from `place`: fine if `id` is
/// registered for `place` (or free, and is now), refused if it went elsewhere.
pub fn claim(root: &Root, id: &TaskId, place: Place) -> Result<()> {
    match lookup(root, id)? {
        Some(p) if p == place => Ok(()),
        Some(p) => Err(taken(id, p, entry_path(root, id))),
        None => match create(root, id, place) {
            // Someone registered it between our look and our link: look again.
            Err(Error::IdTaken { .. }) => match lookup(root, id)? {
                Some(p) if p == place => Ok(()),
                Some(p) => Err(taken(id, p, entry_path(root, id))),
                None => Err(Error::bad(
                    root.id_entry(id),
                    FileProblem::Invalid("exists but could not be read back".into()),
                )),
            },
            other => other,
        },
    }
}

/// Give back an id reserved for `place` whose delivery failed (e.g. a busy inbox), so
/// a retry of the same delivery can use it. Leaves an entry for another place alone.
pub fn release(root: &Root, id: &TaskId, place: Place) -> Result<()> {
    if lookup(root, id)? == Some(place) {
        fsio::remove_file_if_exists(&root.id_entry(id))?;
    }
    Ok(())
}

/// Create the entry exclusively; `IdTaken` if it exists.
fn create(root: &Root, id: &TaskId, place: Place) -> Result<()> {
    let path = root.id_entry(id);
    let entry = fsio::to_json_bytes(&Entry {
        schema: SCHEMA,
        place: place.as_stored(),
    });
    // Atomic (temp file + link) but not fsynced: a second fsync per delivery doubled
    // the cost of a send on disk. Losing an entry to a power loss is harmless: the task
    // file it named is durable, and a worker claiming it registers its id then; recovery
    // falls back to the running file's `origin`, which only the worker sets.
    let write = || fsio::write_new(&path, &entry, fsio::Durability::Atomic);
    // `ids/` is nearly always there: made only when the write finds it missing, not
    // looked at before every entry (a `stat` a task on every delivery and submit).
    let written = match write() {
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            // A root deleted meanwhile is refused, never made again by a recursive mkdir.
            root.require_existing()?;
            fsio::ensure_dir(&root.ids_dir())?;
            write()
        }
        other => other,
    };
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
            let now = lookup(root, id)?.unwrap_or(place);
            Err(taken(id, now, path))
        }
        Err(e) => Err(e),
    }
}

/// True when `a` and `b` are the same file (one is a hard link of the other).
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn places_round_trip_through_their_stored_form() {
        for p in [
            Place::Queue,
            Place::Worker(Slot(0)),
            Place::Worker(Slot(17)),
        ] {
            assert_eq!(Place::from_stored(&p.as_stored()), Some(p));
        }
        for bad in [
            "",
            "queues",
            "workers/",
            "workers/07",
            "workers/x",
            "/queue",
        ] {
            assert_eq!(Place::from_stored(bad), None, "{bad}");
        }
    }
}
