//! Taking away a lock judged stale, safely across hosts: move it aside, judge the moved
//! copy afresh, and put it back if it was alive after all.

use std::path::Path;

use super::files;
use super::owner::{Holder, LockOptions};
use super::reading::judge_read;
use crate::error::Result;

/// What became of a lock judged stale through its name.
#[derive(Debug)]
pub(super) enum Takeover {
    /// Stale by a fresh read too, and gone: who held it.
    Removed(Holder),
    /// Alive after all, and back in place (unless a third taker's lock took the name
    /// meanwhile: then its holder finds it lost, and is fenced).
    PutBack(Holder),
    /// There was no lock left to take.
    Gone,
}

/// Remove the lock at `path` — judged stale through its name — only if it still is.
///
/// That judgement may be wrong in two ways a guard flock cannot prevent across hosts: a
/// network client may have answered it from its caches (a stat of a lock released a
/// moment ago, so its `owner.json` was missing; an `owner.json` read to the size an
/// earlier lock had), and the lock may have changed hands between the read and the
/// move. The moved directory, read under a name no client has cached, is what was
/// really there: removed if it is stale, renamed back if not.
pub(super) fn take_away(path: &Path, opts: &LockOptions, gated: bool) -> Result<Takeover> {
    let Some(tomb) = files::move_aside(path)? else {
        return Ok(Takeover::Gone);
    };
    let Some(moved) = judge_read(&tomb, opts, gated, true)? else {
        // Emptied and removed under us: nothing of it is left in place.
        return Ok(Takeover::Gone);
    };
    let moved = Holder {
        path: path.to_path_buf(),
        ..moved
    };
    if moved.liveness.is_stale() {
        files::bury(&tomb);
        return Ok(Takeover::Removed(moved));
    }
    if files::put_back(&tomb, path)? {
        tracing::warn!(
            lock = %path.display(),
            "a lock judged stale through its name was alive when read aside ({moved}); put back"
        );
    } else {
        tracing::warn!(
            lock = %path.display(),
            "a live lock moved aside on a stale read ({moved}) could not be put back: another \
             took its place; left in {}",
            tomb.display()
        );
    }
    Ok(Takeover::PutBack(moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirlock::{Acquire, DirLock, Liveness};

    /// A live holder's lock, taken away on a judgement that a client cache made (the
    /// multi-host burst: a stat of the lock released a moment before said "exists,
    /// 18 s old", `owner.json` was missing, and the new holder's lock was moved away).
    #[test]
    fn a_live_lock_judged_stale_on_a_stale_read_is_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let opts = LockOptions::default();
        let Acquire::Acquired(held) = DirLock::try_acquire(&path, &opts).unwrap() else {
            panic!("free");
        };
        match take_away(&path, &opts, true).unwrap() {
            Takeover::PutBack(h) => {
                assert!(matches!(h.liveness, Liveness::Alive(_)), "{h:?}");
                assert_eq!(h.path, path);
            }
            other => panic!("a live lock must stay: {other:?}"),
        }
        held.check().expect("still ours, in place");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tomb."))
            .collect();
        assert!(names.is_empty(), "nothing left aside: {names:?}");
        held.release().unwrap();
    }

    #[test]
    fn a_stale_lock_is_removed_and_a_missing_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let opts = LockOptions::default();
        assert!(matches!(
            take_away(&path, &opts, false).unwrap(),
            Takeover::Gone
        ));
        // Ownerless under an exclusive gate (a local filesystem): stale at once.
        std::fs::create_dir(&path).unwrap();
        match take_away(&path, &opts, true).unwrap() {
            Takeover::Removed(h) => assert!(h.liveness.is_stale(), "{h:?}"),
            other => panic!("an ownerless lock under the gate goes: {other:?}"),
        }
        assert!(!path.exists());
    }
}
