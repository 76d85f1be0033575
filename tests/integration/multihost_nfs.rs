//! The NFS side of the multi-host harness: nfs-ganesha (the VFS FSAL) exporting the
//! backing directory from a network + mount + PID namespace of the test's own, and one
//! kernel NFS mount per host, made from that network namespace into ours (the kernel's
//! NFS client talks from the namespace its mount was made in).
//!
//! Issue 27: the NFS scenarios run where a kernel NFS mount works, and otherwise say
//! why they skip — also under `CI=true`, the one skip CI allows here
//! ([`kernel_client_missing`], `crate::prereq::skip_allowed_in_ci`): the machines this
//! project is developed and tested on have no NFS client in their kernel (no modules,
//! `CONFIG_NETWORK_FILESYSTEMS` unset) and no FUSE NFS client is packaged, so nothing
//! here can run these scenarios; what they need beyond the kernel (ganesha, mount.nfs)
//! fails under CI like every other prerequisite. Not run on the machine it was written
//! on: the server side (ganesha with this configuration, in such a namespace, read with
//! libnfs's `nfs-ls`) was, the mounts could not be.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::multihost_mounts::{which, Mount, Owned};

/// The server's address inside its namespace (a veth pair gives it one of its own).
const ADDR: &str = "10.213.8.1";
/// Where the export appears in the server's NFSv4 pseudo filesystem.
const PSEUDO: &str = "/conductor";

/// Why no kernel NFS mount can be made here, if none can: the kernel lists no `nfs`
/// / `nfs4` filesystem and `modprobe nfs` does not add one.
pub(crate) fn kernel_client_missing() -> Option<String> {
    fn listed() -> bool {
        std::fs::read_to_string("/proc/filesystems").is_ok_and(|t| {
            t.lines()
                .any(|l| matches!(l.split_whitespace().last(), Some("nfs" | "nfs4")))
        })
    }
    if listed() {
        return None;
    }
    let probe = match which("modprobe") {
        None => "no modprobe".to_string(),
        Some(m) => match Command::new(m)
            .args(["-q", "nfs"])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
        {
            Ok(o) if o.status.success() && listed() => return None,
            Ok(o) => format!(
                "`modprobe nfs` {}",
                if o.status.success() {
                    "succeeded but added no nfs filesystem".to_string()
                } else {
                    format!("failed ({})", o.status)
                }
            ),
            Err(e) => format!("modprobe: {e}"),
        },
    };
    Some(format!(
        "this kernel has no NFS client: /proc/filesystems lists no nfs or nfs4 and {probe}"
    ))
}

/// Whether the NFS server and client tools are here; if not, why not.
/// (The kernel's NFS client is `multihost_env::nfs_skips`'s to check, before this.)
pub(crate) fn available() -> Result<(), String> {
    if which("ganesha.nfsd").is_none() {
        return Err(
            "ganesha.nfsd is not installed (apt-get install nfs-ganesha nfs-ganesha-vfs)".into(),
        );
    }
    if vfs_fsal().is_none() {
        return Err(
            "nfs-ganesha's VFS FSAL (libfsalvfs.so) is not installed (apt-get install \
             nfs-ganesha-vfs)"
                .into(),
        );
    }
    if which("mount.nfs4").is_none() {
        return Err("mount.nfs4 is not installed (apt-get install nfs-common)".into());
    }
    if which("ip").is_none() {
        return Err("ip is not installed (apt-get install iproute2)".into());
    }
    Ok(())
}

/// ganesha's VFS FSAL, wherever the distribution put its plugins.
fn vfs_fsal() -> Option<PathBuf> {
    ["/usr/lib", "/usr/lib64", "/usr/local/lib"]
        .iter()
        .flat_map(|l| {
            let mut dirs = vec![PathBuf::from(l)];
            if let Ok(rd) = std::fs::read_dir(l) {
                dirs.extend(rd.flatten().map(|e| e.path()));
            }
            dirs
        })
        .map(|d| d.join("ganesha/libfsalvfs.so"))
        .find(|p| p.is_file())
}

/// nfs-ganesha exporting one directory over NFSv4 (no rpcbind needed).
pub(crate) struct NfsServer {
    _ns: Owned,
    /// The namespace's init (ganesha itself), as we see its pid.
    init: u32,
    base: PathBuf,
}

impl NfsServer {
    /// Start ganesha in a fresh namespace exporting `export` read-write, root not
    /// squashed, without the grace period (a fresh server has no clients to wait for).
    pub(crate) fn start(base: &Path, export: &Path) -> NfsServer {
        let conf = base.join("ganesha.conf");
        std::fs::write(
            &conf,
            format!(
                "NFS_CORE_PARAM {{ Protocols = 4; Enable_NLM = false; Enable_RQUOTA = false; }}\n\
                 NFSv4 {{ Graceless = true; }}\n\
                 EXPORT {{\n  Export_Id = 1; Path = {export}; Pseudo = {PSEUDO};\n  \
                 Access_Type = RW; Squash = No_Root_Squash; SecType = sys; Protocols = 4;\n  \
                 FSAL {{ Name = VFS; }}\n}}\n",
                export = export.display()
            ),
        )
        .expect("write ganesha.conf");
        // Private /run and /var/lib/nfs: ganesha's pid file and recovery state stay in
        // this namespace (tmpfs, gone with it).
        let script = format!(
            "set -e\n\
             ip link set lo up\n\
             ip link add nv0 type veth peer name nv1\n\
             ip addr add {ADDR}/24 dev nv0\n\
             ip link set nv1 up\n\
             ip link set nv0 up\n\
             mount -t tmpfs tmpfs /run\n\
             mkdir -p /var/lib/nfs\n\
             mount -t tmpfs tmpfs /var/lib/nfs\n\
             mkdir -p /run/ganesha /var/lib/nfs/ganesha\n\
             exec ganesha.nfsd -F -f {conf} -L {log} -p /run/ganesha/ganesha.pid -N NIV_EVENT",
            conf = conf.display(),
            log = base.join("ganesha.log").display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(base.join("ganesha.out")).expect("ganesha.out"));
        // SAFETY: only prctl, async-signal-safe, between fork and exec: if the test dies
        // without dropping us, unshare dies, and with it (--kill-child) the namespace.
        unsafe {
            cmd.pre_exec(|| {
                let sig = nix::libc::SIGKILL as nix::libc::c_ulong;
                if nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, sig) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let ns = Owned(cmd.spawn().expect("start unshare for ganesha"));
        let outer = ns.0.id();
        let mut init = None;
        crate::harness::wait_until(Duration::from_secs(20), "ganesha to start", || {
            init = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "ganesha.nfsd")
                });
            init.is_some()
        });
        let server = NfsServer {
            _ns: ns,
            init: init.expect("ganesha"),
            base: base.to_path_buf(),
        };
        // Serving once it logs so (it exits on a bad configuration instead).
        crate::harness::wait_until(Duration::from_secs(30), "ganesha to serve", || {
            std::fs::read_to_string(base.join("ganesha.log"))
                .is_ok_and(|l| l.contains("NFS SERVER INITIALIZED"))
        });
        server
    }

    /// A kernel NFSv4 mount of the export at `mnt` with `options` (after `vers=4.2`).
    pub(crate) fn mount(&self, mnt: &Path, options: &str) -> Mount {
        let out = Command::new("nsenter")
            .arg("-t")
            .arg(self.init.to_string())
            .args(["--net", "--", "mount", "-t", "nfs4", "-o"])
            .arg(format!("vers=4.2,{options}"))
            .arg(format!("{ADDR}:{PSEUDO}"))
            .arg(mnt)
            .stdin(Stdio::null())
            .output()
            .expect("run mount -t nfs4");
        assert!(
            out.status.success(),
            "mount -t nfs4 {ADDR}:{PSEUDO} {}: {}\n{}",
            mnt.display(),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.base.join("ganesha.log")).unwrap_or_default()
        );
        Mount::kernel(mnt)
    }
}
