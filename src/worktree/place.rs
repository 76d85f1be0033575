//! Where task worktrees go: next to the repository, not inside its git directory.
//!
//! The default is `<parent of the repository's top>/<its dir name>.conductor-worktrees/<id>`.
//! Not under `.git/` (the earlier default, [`FOLDER`]): Claude Code treats every
//! path there as a sensitive file and refuses each Write, Edit and writing Bash command,
//! so its tasks changed nothing. Not inside the working tree either: a worktree nested
//! there would be captured by the repository's own tools (a Cargo or npm workspace finds
//! the nested manifest, `git status` shows it). Worktrees made in the old place keep
//! working: everything after `make` goes by the recorded path, and [`is_task_folder`]
//! knows both names.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The folder under the repository's git directory that held task worktrees before
/// they moved next to the repository (this module); worktrees there still work.
pub const FOLDER: &str = "conductor-worktrees";

/// The suffix of the default folder next to the repository: `app.conductor-worktrees`.
pub const SIBLING_SUFFIX: &str = ".conductor-worktrees";

/// The folder holding the repository's task worktrees: `configured` (config.json's
/// `worktreeDir`) if given, else `<top>.conductor-worktrees` next to `top`; a repository
/// at `/` (no parent to put it in) keeps them under its git directory, as before.
pub fn folder(top: &Path, common_dir: &Path, configured: Option<&Path>) -> PathBuf {
    if let Some(f) = configured {
        return f.to_path_buf();
    }
    match (top.parent(), top.file_name()) {
        (Some(parent), Some(name)) => {
            let mut name = name.to_os_string();
            name.push(SIBLING_SUFFIX);
            parent.join(name)
        }
        _ => common_dir.join(FOLDER),
    }
}

/// Make `folder` if need be, or say it cannot be made and what to set instead.
pub fn ensure(folder: &Path) -> Result<()> {
    std::fs::create_dir_all(folder).map_err(|source| Error::WorktreeFolder {
        folder: folder.to_path_buf(),
        source,
    })
}

/// Whether a folder of this name holds task worktrees: the default next to the
/// repository (`*.conductor-worktrees`) or the earlier one under its git directory
/// (`conductor-worktrees`).
pub fn is_task_folder(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name == FOLDER || (name.ends_with(SIBLING_SUFFIX) && name.len() > SIBLING_SUFFIX.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_default_is_next_to_the_repository_and_the_configured_folder_wins() {
        let top = Path::new("/home/me/src/app");
        let git = Path::new("/home/me/src/app/.git");
        assert_eq!(
            folder(top, git, None),
            Path::new("/home/me/src/app.conductor-worktrees")
        );
        assert_eq!(folder(top, git, Some(Path::new("/wt"))), Path::new("/wt"));
        assert_eq!(
            folder(Path::new("/"), Path::new("/.git"), None),
            Path::new("/.git/conductor-worktrees")
        );
    }

    #[test]
    fn both_the_new_and_the_old_folder_names_are_known() {
        assert!(is_task_folder(OsStr::new("app.conductor-worktrees")));
        assert!(is_task_folder(OsStr::new("conductor-worktrees")));
        assert!(!is_task_folder(OsStr::new(".conductor-worktrees")));
        assert!(!is_task_folder(OsStr::new("app")));
    }

    #[test]
    fn a_folder_that_cannot_be_made_names_worktree_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let e = ensure(&file.join("wt")).unwrap_err().to_string();
        assert!(
            e.contains("\"worktreeDir\" in the root's config.json"),
            "{e}"
        );
        assert!(e.contains("a-file/wt"), "{e}");
    }
}
