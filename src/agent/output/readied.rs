//! The empty `output.log` readied after a task, kept open for the next run: the run
//! then looks at the name once (is it still that file, still empty?) instead of
//! opening it again and asking the descriptor; the readying saves its close. One file
//! is kept, the last readied (a worker of one slot; many slots take turns, and the
//! others open theirs by name as before).

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

struct Readied {
    path: PathBuf,
    file: File,
    ino: u64,
    dev: u64,
}

static READIED: Mutex<Option<Readied>> = Mutex::new(None);

/// Keep `file`, just made at `path`, for the next [`take`] of `path`.
pub(super) fn keep(path: &Path, file: File) {
    let Ok(meta) = file.metadata() else {
        return;
    };
    *READIED.lock().unwrap_or_else(|p| p.into_inner()) = Some(Readied {
        path: path.to_path_buf(),
        ino: meta.ino(),
        dev: meta.dev(),
        file,
    });
}

/// The file kept for `path` if `path` still names it and `fresh` says it is still as
/// readied; `None` otherwise (the caller opens by name). Taken either way.
pub(super) fn take(path: &Path, fresh: impl Fn(&fs::Metadata) -> bool) -> Option<File> {
    let kept = {
        let mut held = READIED.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_ref() {
            Some(r) if r.path == path => held.take()?,
            _ => return None,
        }
    };
    // Recovery may have moved it (as a leftover task's log) or someone replaced it.
    let meta = fs::symlink_metadata(path).ok()?;
    (meta.ino() == kept.ino && meta.dev() == kept.dev && fresh(&meta)).then_some(kept.file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readied_log_moved_away_is_not_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        // (Other tests ready logs in this process too: only what cannot race is said.)
        keep(&log, File::create(&log).unwrap());
        fs::rename(&log, dir.path().join("kept.log")).unwrap();
        File::create(&log).unwrap();
        assert!(take(&log, |_| true).is_none(), "another file now has the name");
        assert!(take(&log, |_| true).is_none(), "taken either way");
    }
}
