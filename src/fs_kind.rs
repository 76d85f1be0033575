//! Which filesystem a path is on: whether it delivers change events to watchers, how it
//! is mounted, and whether its flocks reach other hosts.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// A filesystem, as far as conductor cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsKind {
    /// `ext2/3/4`, `NFS`, … or `filesystem type 0x…` for one we do not know.
    pub name: String,
    /// Network and FUSE filesystems deliver no change events to local watchers.
    pub eventless: bool,
}

impl FsKind {
    /// Held in memory alone (tmpfs, ramfs): nothing on it outlives the machine.
    pub fn held_in_memory(&self) -> bool {
        self.name == "tmpfs" || self.name == "ramfs"
    }
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

/// [`of`] for an open file or directory; `None` when it cannot be told.
pub fn of_fd(fd: impl std::os::fd::AsFd) -> Option<FsKind> {
    #[cfg(target_os = "linux")]
    {
        // f_type's width differs between platforms.
        #[allow(clippy::unnecessary_cast)]
        nix::sys::statfs::fstatfs(fd)
            .ok()
            .map(|st| by_magic(st.filesystem_type().0 as i64))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        None
    }
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

/// A mount, from one line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_point: PathBuf,
    /// `ext4`, `nfs4`, `fuse.sshfs`, …
    pub fs_type: String,
    /// What is mounted: a device, `server:/export`, `user@host:/dir`.
    pub source: String,
    /// The per-mount options, then the filesystem's own (`vers=4.2`, `acdirmin=30`…).
    pub options: Vec<String>,
}

impl MountInfo {
    /// The value of option `name` (`Some("")` for a flag that is set).
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.iter().find_map(|o| match o.split_once('=') {
            Some((k, v)) if k == name => Some(v),
            None if o == name => Some(""),
            _ => None,
        })
    }

    /// Whether other machines may share this filesystem (network and FUSE filesystems).
    pub fn is_shared(&self) -> bool {
        let t = self.fs_type.as_str();
        matches!(
            t,
            "nfs"
                | "nfs4"
                | "cifs"
                | "smb3"
                | "smbfs"
                | "ceph"
                | "9p"
                | "glusterfs"
                | "lustre"
                | "gpfs"
                | "beegfs"
                | "afs"
                | "ocfs2"
                | "gfs2"
        ) || t.starts_with("fuse.")
            && !matches!(
                t,
                "fuse.lxcfs" | "fuse.portal" | "fuse.gvfsd-fuse" | "fuse.fuse-overlayfs"
            )
    }

    /// Whether this filesystem's client answers even a forced `stat` of a directory
    /// (`statx` with `AT_STATX_FORCE_SYNC`) from a cache of its own, while reading the
    /// directory asks the server (and refreshes that cache): GlusterFS's FUSE client,
    /// whose md-cache keeps attributes 1 s with the volume's defaults. A poller reads
    /// such a directory before its `stat` to see another host's new entry promptly.
    pub fn stat_needs_a_read_first(&self) -> bool {
        self.fs_type == "fuse.glusterfs"
    }

    /// Whether an flock taken on one host is seen by another, by the mount's type and
    /// options: the Linux NFS client turns flocks into server locks unless `local_lock`
    /// says otherwise, CephFS, GFS2/OCFS2 and GlusterFS (its FUSE client passes them to
    /// the bricks) share them; other FUSE filesystems (sshfs) and 9p keep them on the
    /// client; for SMB it depends on the server. `None`: unknown. For FUSE,
    /// [`flock_kept_by_kernel`] tells for sure.
    pub fn flock_crosses_hosts(&self) -> Option<bool> {
        match self.fs_type.as_str() {
            "nfs" | "nfs4" => Some(!matches!(self.option("local_lock"), Some("flock" | "all"))),
            "ceph" | "gfs2" | "ocfs2" | "glusterfs" => Some(true),
            "9p" => Some(false),
            t if t.starts_with("fuse.") => Some(matches!(t, "fuse.ceph-fuse" | "fuse.glusterfs")),
            _ => None,
        }
    }
}

/// The mount `path` is on (the deepest mount point above it; of mounts stacked on one
/// point, the last).
pub fn mount_of(path: &Path) -> Result<Option<MountInfo>> {
    let abs =
        std::fs::canonicalize(path).map_err(|e| crate::error::Error::io("resolve", path, e))?;
    let table = match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(crate::error::Error::io("read", "/proc/self/mountinfo", e)),
    };
    Ok(mount_containing(&abs, &table))
}

/// Of the mounts in `mountinfo` (its text), the one `abs` is on.
pub fn mount_containing(abs: &Path, mountinfo: &str) -> Option<MountInfo> {
    let mut best: Option<MountInfo> = None;
    for m in mountinfo.lines().filter_map(parse_mountinfo_line) {
        let deeper = best.as_ref().is_none_or(|b| {
            m.mount_point.components().count() >= b.mount_point.components().count()
        });
        if abs.starts_with(&m.mount_point) && deeper {
            best = Some(m);
        }
    }
    best
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
pub fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (head, tail) = line.split_once(" - ")?;
    let head: Vec<&str> = head.split(' ').collect();
    let mut tail = tail.split(' ');
    let (fs_type, source, super_opts) = (tail.next()?, tail.next()?, tail.next().unwrap_or(""));
    let mut options: Vec<String> = head.get(5)?.split(',').map(unescape).collect();
    options.extend(
        super_opts
            .split(',')
            .filter(|o| !o.is_empty())
            .map(unescape),
    );
    Some(MountInfo {
        mount_point: PathBuf::from(unescape(head.get(4)?)),
        fs_type: unescape(fs_type),
        source: unescape(source),
        options,
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether this machine's kernel keeps the flocks taken on files in `dir` itself — they
/// show in `/proc/locks` — rather than passing them to the filesystem: a FUSE filesystem
/// that implements flock (GlusterFS) sends them to its server and the kernel records
/// none; one that does not (sshfs) leaves them to the kernel, on this client only. (The
/// NFS client records the locks it got from the server too, so for NFS this tells
/// nothing.) Probed with a fresh file in `dir`, removed again; `None` where
/// `/proc/locks` cannot be read.
#[cfg(target_os = "linux")]
pub fn flock_kept_by_kernel(dir: &Path) -> Result<Option<bool>> {
    use std::os::unix::fs::MetadataExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Not fsio::nonce: fsio stands on this module, not the other way round.
    let path = dir.join(format!(".flock-probe.{}.{nanos}", std::process::id()));
    let io = |op: &'static str, e: std::io::Error| crate::error::Error::io(op, &path, e);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io("create flock probe", e))?;
    let kept = (|| {
        let meta = file.metadata().map_err(|e| io("stat flock probe", e))?;
        let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| io("flock", errno.into()))?;
        let table = match std::fs::read_to_string("/proc/locks") {
            Ok(t) => t,
            Err(_) => return Ok(None),
        };
        let dev = meta.dev();
        let found = flock_listed(
            &table,
            (nix::sys::stat::major(dev), nix::sys::stat::minor(dev)),
            meta.ino(),
        );
        drop(locked);
        Ok(Some(found))
    })();
    let _ = std::fs::remove_file(&path);
    kept
}

/// Whether flocks are not observable here (off Linux): not probed.
#[cfg(not(target_os = "linux"))]
pub fn flock_kept_by_kernel(_dir: &Path) -> Result<Option<bool>> {
    Ok(None)
}

/// Whether `/proc/locks` (its text) lists an FLOCK on inode `ino` of device `dev`
/// (`1: FLOCK  ADVISORY  WRITE 7770 00:28:16 0 EOF`: major and minor in hex).
pub fn flock_listed(table: &str, dev: (u64, u64), ino: u64) -> bool {
    table.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&"FLOCK") {
            return false;
        }
        let Some(id) = f.get(5) else {
            return false;
        };
        let mut parts = id.rsplitn(3, ':');
        let (Some(i), Some(mi), Some(ma)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        i.parse() == Ok(ino)
            && u64::from_str_radix(mi, 16) == Ok(dev.1)
            && u64::from_str_radix(ma, 16) == Ok(dev.0)
    })
}

/// The `-o` options of the sshfs process serving `mount_point` (sshfs's own options do
/// not show in mountinfo), if one of ours is found.
pub fn sshfs_options(mount_point: &Path) -> Option<String> {
    let want = mount_point.as_os_str().as_encoded_bytes();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_sshfs = args.first().is_some_and(|a| a.ends_with(b"sshfs"));
        if !is_sshfs || !args.contains(&want) {
            continue;
        }
        let opts: Vec<String> = args
            .windows(2)
            .filter(|w| w[0] == b"-o")
            .map(|w| String::from_utf8_lossy(w[1]).into_owned())
            .collect();
        return Some(opts.join(","));
    }
    None
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

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
40 22 0:39 / /mnt/shared\\040root rw,relatime shared:5 - nfs4 srv:/export rw,vers=4.2,acdirmin=30,local_lock=none
41 40 0:40 / /mnt/shared\\040root/sub rw - fuse.sshfs me@h:/d rw,user_id=0
";

    #[test]
    fn a_path_is_on_the_deepest_mount_above_it() {
        let m = mount_containing(Path::new("/mnt/shared root/x/y"), TABLE).unwrap();
        assert_eq!(m.mount_point, Path::new("/mnt/shared root"));
        assert_eq!(
            (m.fs_type.as_str(), m.source.as_str()),
            ("nfs4", "srv:/export")
        );
        assert_eq!(m.option("acdirmin"), Some("30"));
        assert_eq!(m.option("relatime"), Some(""));
        assert_eq!(m.option("noac"), None);
        assert!(m.is_shared());
        assert_eq!(m.flock_crosses_hosts(), Some(true));
        let sub = mount_containing(Path::new("/mnt/shared root/sub/q"), TABLE).unwrap();
        assert_eq!(sub.fs_type, "fuse.sshfs");
        assert_eq!(sub.flock_crosses_hosts(), Some(false));
        let root = mount_containing(Path::new("/home/me"), TABLE).unwrap();
        assert!(!root.is_shared());
        // A sibling whose name merely starts like a mount point is not under it.
        let other = mount_containing(Path::new("/mnt/shared rootless"), TABLE).unwrap();
        assert_eq!(other.fs_type, "ext4");
    }

    #[test]
    fn nfs_with_local_locks_keeps_flocks_on_the_client() {
        let mut m = mount_containing(Path::new("/mnt/shared root"), TABLE).unwrap();
        m.options.push("local_lock=flock".into());
        let m = MountInfo {
            options: m
                .options
                .into_iter()
                .filter(|o| o != "local_lock=none")
                .collect(),
            ..m
        };
        assert_eq!(m.flock_crosses_hosts(), Some(false));
    }

    #[test]
    fn a_malformed_mountinfo_line_is_skipped() {
        assert_eq!(parse_mountinfo_line("garbage"), None);
        assert_eq!(parse_mountinfo_line("1 2 3 4 - ext4"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_temp_dir_is_on_a_mount() {
        let dir = tempfile::tempdir().unwrap();
        let m = mount_of(dir.path()).unwrap().unwrap();
        assert!(dir
            .path()
            .canonicalize()
            .unwrap()
            .starts_with(&m.mount_point));
    }

    #[test]
    fn proc_locks_lines_are_matched_by_device_and_inode() {
        let table = "1: FLOCK  ADVISORY  WRITE 7770 00:28:16 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 11873 fe:00:99 0 EOF\n\
                     3: FLOCK  ADVISORY  READ 11873 fe:01:10133507 0 EOF\n";
        assert!(flock_listed(table, (0, 0x28), 16));
        assert!(flock_listed(table, (0xfe, 1), 10133507));
        assert!(!flock_listed(table, (0, 0x28), 17));
        assert!(
            !flock_listed(table, (0xfe, 0), 99),
            "a POSIX lock is not an flock"
        );
        assert!(!flock_listed("garbage\n", (0, 0x28), 16));
    }

    #[test]
    fn glusterfs_passes_flocks_to_its_server() {
        let m = parse_mountinfo_line(
            "65 27 0:41 / /mnt/g rw,relatime - fuse.glusterfs 10.0.0.1:vol rw,user_id=0",
        )
        .unwrap();
        assert!(m.is_shared());
        assert_eq!(m.flock_crosses_hosts(), Some(true));
        assert!(m.stat_needs_a_read_first());
        let sshfs = mount_containing(Path::new("/mnt/shared root/sub/q"), TABLE).unwrap();
        assert!(!sshfs.stat_needs_a_read_first());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_local_directorys_flocks_are_kept_by_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(flock_kept_by_kernel(dir.path()).unwrap(), Some(true));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_temp_dir_has_a_kind() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!of(dir.path()).unwrap().unwrap().name.is_empty());
    }
}
