//! A task's own working directory (`dir`): checked before submit and before its agent runs.
//!
//! One pool of workers can serve several projects: a task may name the directory its
//! agent runs in. It must be an existing directory owned by the worker's user, so a task
//! cannot point an agent at someone else's files (or at `/`); a link is followed (a
//! project reached through a link is common) and the check applies to what it reaches.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Check that `dir` can be a task's working directory for the user `uid`; the error
/// names the directory and what is wrong with it.
pub fn check_for(dir: &Path, uid: u32) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::BadTaskDir {
            path: dir.to_path_buf(),
            reason,
        })
    };
    if !dir.is_absolute() {
        return refuse("is not an absolute path".into());
    }
    let meta = match fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return refuse("does not exist".into());
        }
        Err(e) => return refuse(format!("cannot be read: {e}")),
    };
    if !meta.is_dir() {
        return refuse("is not a directory".into());
    }
    if meta.uid() != uid {
        return refuse(format!(
            "is owned by uid {}, not by this user (uid {uid}); a task runs only in a \
             directory of the worker's user",
            meta.uid()
        ));
    }
    Ok(())
}

/// [`check_for`] the current (effective) user.
pub fn check(dir: &Path) -> Result<()> {
    check_for(dir, crate::host::euid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_existing_directory_of_ours_is_accepted() {
        let t = tempfile::tempdir().unwrap();
        let me = crate::host::euid();
        check_for(t.path(), me).unwrap();
        let reason = |p: &Path, uid| match check_for(p, uid) {
            Err(Error::BadTaskDir { reason, .. }) => reason,
            other => panic!("{}: {other:?}", p.display()),
        };
        assert_eq!(reason(&t.path().join("missing"), me), "does not exist");
        let file = t.path().join("file");
        fs::write(&file, "x").unwrap();
        assert_eq!(reason(&file, me), "is not a directory");
        assert_eq!(reason(Path::new("relative"), me), "is not an absolute path");
        assert!(reason(t.path(), me + 1).starts_with(&format!("is owned by uid {me}")));
    }
}
