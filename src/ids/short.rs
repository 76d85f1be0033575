//! Short ids: handles unique on a root for generated ids, and the shortest prefixes views show.
//!
//! A generated id begins with a six-character handle ([`crate::protocol::id_gen`]).
//! [`fresh`] claims the handle on the root, `ids/.handles/<handle>` made exclusively, and
//! takes another id when it is taken, so no two generated ids on a root share their first
//! six characters. A retry's id is its task's id with `-rN`: a prefix that starts a task
//! and its retries only names the task, and `<prefix>-rN` names its retry N.

use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;

use crate::error::{Error, Result};
use crate::fsio;
use crate::layout::Root;
use crate::protocol::id_gen::HANDLE_LEN;
use crate::protocol::TaskId;

/// The directory of claimed handles, inside the registry (dot names are not ids there).
const HANDLES_DIR: &str = ".handles";
/// How many taken handles in a row before giving up (each is one chance in ~700 million
/// per task on the root).
const TRIES: usize = 64;

/// A generated id whose handle no other generated id on `root` has.
pub fn fresh(root: &Root) -> Result<TaskId> {
    fresh_from(root, TaskId::generate)
}

/// [`fresh`] with ids from `generate` (a test gives colliding ones).
pub(crate) fn fresh_from(root: &Root, mut generate: impl FnMut() -> TaskId) -> Result<TaskId> {
    let dir = root.ids_dir().join(HANDLES_DIR);
    let mut made_dir = false;
    for _ in 0..TRIES {
        let id = generate();
        let text = id.to_string();
        let handle = dir.join(text.get(..HANDLE_LEN).unwrap_or(&text));
        let claim = || {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&handle)
        };
        let mut made = claim();
        if matches!(&made, Err(e) if e.kind() == io::ErrorKind::NotFound) && !made_dir {
            // A root deleted meanwhile is refused, never made again by a recursive mkdir.
            root.require_existing()?;
            fsio::ensure_dir(&dir)?;
            made_dir = true;
            made = claim();
        }
        match made {
            Ok(_) => return Ok(id),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("claim id handle", handle, e)),
        }
    }
    Err(Error::io(
        "claim id handle",
        dir,
        io::Error::other(format!("{TRIES} generated handles in a row were taken")),
    ))
}

/// Mark a generated `id`'s handle taken (for ids found again by `tasks --reindex`,
/// whose `ids/` may have lost `.handles/` with it); other ids are left alone.
pub fn claim_handle(root: &Root, id: &TaskId) -> Result<()> {
    let text = id.to_string();
    if !crate::protocol::id_gen::is_generated(&text) {
        return Ok(());
    }
    let dir = root.ids_dir().join(HANDLES_DIR);
    fsio::ensure_dir(&dir)?;
    let handle = dir.join(&text[..HANDLE_LEN]);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&handle)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("claim id handle", handle, e)),
    }
}

/// `Some(base)` when `id` is `base-rN`, a retry's id.
fn retry_base(id: &str) -> Option<&str> {
    let (base, n) = id.rsplit_once("-r")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

/// Whether `other` is a retry of `id` (`<id>-rN`).
fn is_retry_of(other: &str, id: &str) -> bool {
    retry_base(other) == Some(id)
}

/// Of the ids a prefix starts (`matches`, sorted), the one it names when they are one
/// task and its retries: that task.
pub(super) fn one_task(matches: &[&String]) -> Option<String> {
    let first = matches.first()?;
    matches[1..]
        .iter()
        .all(|m| is_retry_of(m, first))
        .then(|| first.to_string())
}

/// `<prefix>-rN`, when `prefix` names a task: its retry N, if registered.
pub(super) fn retry_of_prefix(
    text: &str,
    resolve: impl Fn(&str) -> Result<Option<String>>,
) -> Result<Option<String>> {
    let Some(base) = retry_base(text) else {
        return Ok(None);
    };
    let suffix = &text[base.len()..];
    Ok(resolve(base)?.map(|b| format!("{b}{suffix}")))
}

/// Each of `ids` cut to the shortest prefix (at least `min` characters) that starts no
/// other id in `all` (sorted) but its own retries; a retry is shown as its task's short
/// form and `-rN`. What [`super::resolve`] takes back.
pub fn short_forms(all: &[String], ids: &[String], min: usize) -> Vec<String> {
    ids.iter()
        .map(|id| match retry_base(id) {
            Some(base) if all.binary_search_by(|n| n.as_str().cmp(base)).is_ok() => {
                format!("{}{}", short_form(all, base, min), &id[base.len()..])
            }
            // Only a registered id can be found again from a prefix.
            _ if all.binary_search(id).is_err() => id.clone(),
            _ => short_form(all, id, min),
        })
        .collect()
}

fn short_form(all: &[String], id: &str, min: usize) -> String {
    let common = |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let at = all.partition_point(|n| n.as_str() < id);
    let mut need = min;
    // Its neighbours in sorted order share the longest starts with it; its own
    // retries, which all start with it, do not count.
    let before = at.checked_sub(1).map(|i| &all[i]);
    let after = all[at..].iter().find(|n| *n != id && !is_retry_of(n, id));
    for other in before.into_iter().chain(after) {
        need = need.max(common(id, other) + 1);
    }
    if need >= id.len() {
        id.to_string()
    } else {
        id[..need].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn short_forms_are_the_shortest_unique_prefixes() {
        let all = strings(&[
            "1700000000001-42-0",
            "1700000000001-42-1",
            "1700000009999-7-0",
            "abc",
        ]);
        let forms = short_forms(&all, &all, 4);
        assert_eq!(
            forms,
            [
                "1700000000001-42-0",
                "1700000000001-42-1",
                "1700000009",
                "abc"
            ]
        );
        let one = vec!["solo-task-id".to_string()];
        assert_eq!(short_forms(&one, &one, 4), ["solo"]);
        let unknown = vec!["unregistered-id".to_string()];
        assert_eq!(
            short_forms(&one, &unknown, 4),
            unknown,
            "not found again if cut"
        );
    }

    #[test]
    fn a_retry_shows_as_its_tasks_short_form_and_its_number() {
        let all = strings(&[
            "kq3x9a-1795439873131-4242-0",
            "kq3x9a-1795439873131-4242-0-r1",
            "kq3x9a-1795439873131-4242-0-r2",
            "kq3x9b-1795439873135-4242-1",
        ]);
        let forms = short_forms(&all, &all, 6);
        assert_eq!(forms, ["kq3x9a", "kq3x9a-r1", "kq3x9a-r2", "kq3x9b"]);
    }

    #[test]
    fn a_handle_taken_on_the_root_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let taken = TaskId::from("kq3x9a-1795439873131-4242-0");
        claim_handle(&root, &taken).unwrap();
        // Another process made an id with the same handle: it is not used.
        let mut offered = vec![
            TaskId::from("kq3x9a-1795439873999-77-0"),
            TaskId::from("m7hd2e-1795439873999-77-1"),
        ]
        .into_iter();
        let got = fresh_from(&root, || offered.next().unwrap()).unwrap();
        assert_eq!(got.to_string(), "m7hd2e-1795439873999-77-1");
        // Every handle taken: a bounded search, then an error naming the directory.
        let err = fresh_from(&root, || taken.clone()).unwrap_err();
        assert!(err.to_string().contains(".handles"), "{err}");
    }

    #[test]
    fn a_prefix_of_a_task_and_its_retries_names_the_task() {
        let all = strings(&["ab-1", "ab-1-r1", "ab-1-r2"]);
        let refs: Vec<&String> = all.iter().collect();
        assert_eq!(one_task(&refs).as_deref(), Some("ab-1"));
        let two = strings(&["ab-1", "ab-2"]);
        let refs: Vec<&String> = two.iter().collect();
        assert_eq!(one_task(&refs), None);
    }
}
