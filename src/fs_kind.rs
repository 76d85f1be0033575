//! Which filesystem a path is on, and whether it delivers change events to watchers.

use std::path::Path;

use crate::error::Result;

/// A filesystem, as far as conductor cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsKind {
    /// `ext2/3/4`, `NFS`, … or `filesystem type 0x…` for one we do not know.
    pub name: String,
    /// Network and FUSE filesystems deliver no change events to local watchers.
    pub eventless: bool,
}

/// The filesystem `path` is on, by its statfs magic; `None` where the platform
/// cannot tell (only Linux is detected).
#[cfg(target_os = "linux")]
pub fn of(path: &Path) -> Result<Option<FsKind>> {
    let st = nix::sys::statfs::statfs(path)
        .map_err(|e| crate::error::Error::io("statfs", path, e.into()))?;
    // f_type's width differs between platforms.
    #[allow(clippy::unnecessary_cast)]
    Ok(Some(by_magic(st.filesystem_type().0 as i64)))
}

/// The filesystem `path` is on: not detected off Linux.
#[cfg(not(target_os = "linux"))]
pub fn of(_path: &Path) -> Result<Option<FsKind>> {
    Ok(None)
}

/// A filesystem by its statfs magic number.
pub fn by_magic(magic: i64) -> FsKind {
    let (name, eventless) = match magic {
        0xEF53 => ("ext2/3/4", false),
        0x5846_5342 => ("xfs", false),
        0x9123_683E => ("btrfs", false),
        0x0102_1994 => ("tmpfs", false),
        0x794C_7630 => ("overlayfs", false),
        0x2FC1_2FC1 => ("zfs", false),
        0xF2F5_2010 => ("f2fs", false),
        0x8584_58F6 => ("ramfs", false),
        0x4d44 => ("vfat", false),
        0x3153_464A => ("jfs", false),
        0x5265_4973 => ("reiserfs", false),
        0xCA45_1A4E => ("bcachefs", false),
        0x6969 => ("NFS", true),
        0x517B => ("SMB", true),
        0xFF53_4D42 => ("CIFS", true),
        0xFE53_4D42 => ("SMB2", true),
        0x6573_5546 => ("FUSE", true),
        0x0102_1997 => ("9p", true),
        0x564c => ("NCP", true),
        0x7375_7245 => ("Coda", true),
        0x4750_4653 => ("GPFS", true),
        0x0BD0_0BD0 => ("Lustre", true),
        0x00C3_6400 => ("CephFS", true),
        other => {
            return FsKind {
                name: format!("filesystem type {other:#x}"),
                eventless: false,
            }
        }
    };
    FsKind {
        name: name.to_string(),
        eventless,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_filesystems_are_eventless_local_ones_are_not() {
        assert_eq!(by_magic(0x6969).name, "NFS");
        assert!(by_magic(0x6969).eventless);
        assert!(!by_magic(0xEF53).eventless);
        assert_eq!(by_magic(0x1234).name, "filesystem type 0x1234");
        assert!(!by_magic(0x1234).eventless);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_temp_dir_has_a_kind() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!of(dir.path()).unwrap().unwrap().name.is_empty());
    }
}
