//! The root under a running worker: deleted (`rm -r`), or replaced by a new one made on
//! the same path (`conductor init`), the worker says so and stops, rather than serve
//! files that nobody else sees while `status` calls it gone.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::layout::Root;

/// The root directory a worker started on: its path and which directory that was.
pub(crate) struct RootIdentity {
    path: PathBuf,
    /// `(device, inode)` at start; `None` when it could not be read then (never judged).
    id: Option<(u64, u64)>,
}

impl RootIdentity {
    pub(crate) fn of(root: &Root) -> RootIdentity {
        let path = root.path().to_path_buf();
        let id = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
        RootIdentity { path, id }
    }

    /// [`Error::RootGone`] once the path no longer names the directory the worker
    /// started on. Any other failure to look (a slow mount, no descriptors left) says
    /// nothing and is not judged.
    pub(crate) fn check(&self) -> Result<()> {
        let Some(started) = self.id else {
            return Ok(());
        };
        let replaced = match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == started => return Ok(()),
            Ok(_) => true,
            Err(e) if gone(&e) => false,
            Err(_) => return Ok(()),
        };
        let err = Error::RootGone {
            path: self.path.clone(),
            replaced,
        };
        tracing::error!("{err}");
        Err(err)
    }
}

/// The path is gone: missing, or (NFS) a handle to a removed directory.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESTALE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_deleted_or_made_anew_is_told_from_the_one_started_on() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        std::fs::create_dir(root.path()).unwrap();
        let id = RootIdentity::of(&root);
        id.check().unwrap();
        std::fs::remove_dir(root.path()).unwrap();
        let err = id.check().unwrap_err();
        assert!(
            matches!(
                err,
                Error::RootGone {
                    replaced: false,
                    ..
                }
            ),
            "{err}"
        );
        // `init` on the same path: another directory.
        std::fs::create_dir(dir.path().join("other")).unwrap();
        std::fs::create_dir(root.path()).unwrap();
        let err = id.check().unwrap_err();
        assert!(
            matches!(err, Error::RootGone { replaced: true, .. }),
            "{err}"
        );
    }
}
