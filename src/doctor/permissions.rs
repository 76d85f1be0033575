//! Whether anything under the root is open to other users.
//!
//! A mode alone says little: a 0644 file in a 0700 directory is out of everyone
//! else's reach. conductor writes its own files 0600 in 0700 directories, but files
//! that clients write (an original client's 0644 `task.json`, kept in `tasks/` or
//! `rejected/`) keep their mode, and the tool tightens those itself. So only what other
//! users can actually reach is reported: what a person has opened up and must close.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::layout::Root;

use super::check::Check;

/// Group and other permission bits.
const OTHERS: u32 = 0o077;

/// The group and other bits a directory of `mode` lets through: those of the classes
/// that may traverse it (its `x` bit).
fn passes(dir_mode: u32) -> u32 {
    let group = if dir_mode & 0o010 != 0 { 0o070 } else { 0 };
    let other = if dir_mode & 0o001 != 0 { 0o007 } else { 0 };
    group | other
}

/// What the walk found: the entries others can reach with their mode open to them.
#[derive(Debug, Default)]
struct Exposed {
    count: usize,
    /// The first few, as `path (mode)`.
    shown: Vec<String>,
}

impl Exposed {
    const SHOWN: usize = 5;

    fn note(&mut self, path: &Path, mode: u32) {
        self.count += 1;
        if self.shown.len() < Self::SHOWN {
            self.shown.push(format!("{} ({mode:04o})", path.display()));
        }
    }
}

/// Entries under `dir` that others can reach (through directories that let `reach`
/// bits pass) and whose own mode is open to them. Symlinks are not followed; depth is
/// bounded.
fn find_exposed(dir: &Path, reach: u32, depth: u32, found: &mut Exposed) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for entry in rd.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & OTHERS & reach != 0 {
            found.note(&path, mode);
        }
        let inner = reach & passes(mode);
        if meta.is_dir() && depth < 8 && inner != 0 {
            find_exposed(&path, inner, depth + 1, found);
        }
    }
}

/// Files should be 0600 and directories 0700; only what others can reach matters.
pub(super) fn check_permissions(root: &Root) -> Check {
    let root_mode = fs::metadata(root.path()).map_or(0, |m| m.permissions().mode());
    let mut found = Exposed::default();
    find_exposed(root.path(), passes(root_mode), 0, &mut found);
    if found.count == 0 {
        return Check::ok(
            "permissions",
            "nothing under the root is open to other users",
        );
    }
    Check::warn(
        "permissions",
        format!(
            "{} files or directories are open to other users: {}{}",
            found.count,
            found.shown.join(", "),
            if found.count > found.shown.len() {
                ", …"
            } else {
                ""
            }
        ),
        format!("chmod -R go-rwx {}", root.path().display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::CheckStatus;

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// root/sub/file, with these modes.
    fn tree(root_mode: u32, sub_mode: u32, file_mode: u32) -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("sub/file"), "x").unwrap();
        chmod(&root.join("sub/file"), file_mode);
        chmod(&root.join("sub"), sub_mode);
        chmod(&root, root_mode);
        (dir, Root::new(root))
    }

    #[test]
    fn a_loose_file_behind_a_private_directory_is_not_reported() {
        for (root_mode, sub_mode) in [(0o700, 0o755), (0o755, 0o700), (0o750, 0o705)] {
            let (_d, root) = tree(root_mode, sub_mode, 0o644);
            let c = check_permissions(&root);
            assert_eq!(
                c.status,
                CheckStatus::Ok,
                "{root_mode:o}/{sub_mode:o}: {c:?}"
            );
        }
    }

    #[test]
    fn what_others_can_reach_is_reported() {
        let (_d, root) = tree(0o755, 0o755, 0o644);
        let c = check_permissions(&root);
        assert_eq!(c.status, CheckStatus::Warn, "{c:?}");
        assert!(c.detail.starts_with("2 files"), "{c:?}");
        assert!(c.detail.contains("file (0644)"), "{c:?}");

        // Group can traverse and read, others cannot: still open to the group.
        let (_d, root) = tree(0o710, 0o710, 0o640);
        assert_eq!(check_permissions(&root).status, CheckStatus::Warn);
    }

    #[test]
    fn a_private_tree_is_ok() {
        let (_d, root) = tree(0o700, 0o700, 0o600);
        assert_eq!(check_permissions(&root).status, CheckStatus::Ok);
    }
}
