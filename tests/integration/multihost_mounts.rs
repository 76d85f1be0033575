//! The sshfs side of the multi-host harness: a private sshd on a loopback port (its own
//! keys and config in a temp dir) and one `sshfs -f` mount per host, undone on drop
//! (the GlusterFS side is multihost_gluster.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a host's sshfs mount caches what it has seen of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    /// sshfs's defaults: a 20 s directory cache, 1 s kernel attribute/entry caches.
    Default,
    /// `dir_cache=no` and zero kernel attribute/entry timeouts: every lookup asks the server.
    Off,
}

impl Cache {
    pub fn sshfs_options(self) -> &'static str {
        match self {
            Cache::Default => "",
            Cache::Off => ",dir_cache=no,entry_timeout=0,attr_timeout=0,negative_timeout=0",
        }
    }
}

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

pub(crate) fn sshd_path() -> Option<PathBuf> {
    which("sshd")
}

fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A process we started, killed and reaped on drop.
pub(crate) struct Owned(pub(crate) Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `dir` is a mount point now (from our own mountinfo).
pub(crate) fn is_mounted(dir: &Path) -> bool {
    let want = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// One FUSE mount, served by a child of ours (`sshfs -f`, `glusterfs -N`): unmounted,
/// then killed, on drop.
pub(crate) struct Mount {
    pub(crate) dir: PathBuf,
    client: Option<Owned>,
}

impl Mount {
    /// The mount `client` (just started, logging to `log`) makes at `mnt`, once it shows
    /// in our mountinfo; panics with the log if it does not within 20 s.
    pub(crate) fn wait_for(client: Child, mnt: &Path, log: &Path) -> Mount {
        let mut m = Mount {
            dir: mnt.to_path_buf(),
            client: Some(Owned(client)),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(mnt) {
            let client = &mut m.client.as_mut().expect("client").0;
            if Instant::now() >= deadline || matches!(client.try_wait(), Ok(Some(_))) {
                panic!(
                    "{} was not mounted; the log of its client:\n{}",
                    mnt.display(),
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }
}

impl Mount {
    /// A kernel mount (NFS) at `mnt`, made already: served by no process of ours.
    pub(crate) fn kernel(mnt: &Path) -> Mount {
        Mount {
            dir: mnt.to_path_buf(),
            client: None,
        }
    }

    /// The pid of the process serving this mount (its filesystem client: `sshfs`,
    /// `glusterfs`).
    pub(crate) fn client_pid(&self) -> Option<u32> {
        self.client.as_ref().map(|o| o.0.id())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.dir) {
            let fuse = which("fusermount3").or_else(|| which("fusermount"));
            let unmounted = fuse.is_some_and(|f| {
                Command::new(f)
                    .arg("-u")
                    .arg(&self.dir)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
            }
        }
        self.client.take();
    }
}

/// Host keys, a client key and a config under `base`; sshd on a free loopback port.
pub(crate) fn start_sshd(base: &Path) -> (Owned, u16) {
    let keys = base.join("ssh");
    std::fs::create_dir_all(&keys).expect("create key dir");
    for k in ["host_key", "client_key"] {
        run_quiet(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(keys.join(k)),
        )
        .expect("generate an ssh key");
    }
    std::fs::copy(keys.join("client_key.pub"), keys.join("authorized_keys"))
        .expect("authorize the client key");
    // sshd refuses to start without its privilege separation directory.
    std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
    for _attempt in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let config = keys.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {k}/host_key\n\
                 AuthorizedKeysFile {k}/authorized_keys\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 StrictModes no\nUsePAM no\nPidFile none\nMaxStartups 100\n\
                 Subsystem sftp internal-sftp\n",
                k = keys.display()
            ),
        )
        .expect("write sshd_config");
        let mut sshd = Owned(
            Command::new(sshd_path().expect("sshd"))
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(base.join("sshd.log")).expect("sshd log"))
                .spawn()
                .expect("start sshd"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (sshd, port);
            }
            if let Ok(Some(_)) = sshd.0.try_wait() {
                break; // the port was taken meanwhile: try another
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = sshd.0.kill();
    }
    panic!(
        "sshd did not start; its log:\n{}",
        std::fs::read_to_string(base.join("sshd.log")).unwrap_or_default()
    );
}

pub(crate) fn mount(base: &Path, port: u16, backing: &Path, mnt: &Path, cache: Cache) -> Mount {
    let key = base.join("ssh/client_key");
    let sshfs = Command::new("sshfs")
        .arg(format!("root@127.0.0.1:{}", backing.display()))
        .arg(mnt)
        .args(["-f", "-p", &port.to_string(), "-o"])
        .arg(format!(
            "IdentityFile={},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,\
             BatchMode=yes,LogLevel=ERROR{}",
            key.display(),
            cache.sshfs_options()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(base.join("sshfs.log")).expect("sshfs log"))
        .spawn()
        .expect("start sshfs");
    Mount::wait_for(sshfs, mnt, &base.join("sshfs.log"))
}
