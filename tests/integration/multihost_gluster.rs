//! The GlusterFS side of the multi-host harness: `glusterd` and a one-brick volume in a
//! network + mount + PID namespace of the test's own (nothing it does can meet another
//! gluster on the machine, and killing the namespace's init ends glusterd and the brick
//! process), and one FUSE client (`glusterfs -N`) per host, run in that network
//! namespace but mounting into ours. Torn down on drop: clients unmounted and killed by
//! their [`Mount`]s, then the namespace.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::multihost_mounts::{which, Mount, Owned};

/// The server's address inside its namespace. glusterd refuses loopback bricks, so a
/// veth pair gives the namespace an address of its own; no other namespace sees it.
const ADDR: &str = "10.213.7.1";
const VOLUME: &str = "conductor";

/// Whether GlusterFS can be run here; if not, why not.
pub(crate) fn available() -> Result<(), String> {
    for tool in ["glusterd", "gluster", "glusterfs"] {
        if which(tool).is_none() {
            return Err(format!(
                "{tool} is not installed (apt-get install glusterfs-server glusterfs-client)"
            ));
        }
    }
    if which("ip").is_none() {
        return Err("ip is not installed (apt-get install iproute2)".into());
    }
    Ok(())
}

/// glusterd serving one volume whose brick is `<base>/brick`.
pub(crate) struct GlusterServer {
    ns: Owned,
    /// The namespace's init (glusterd itself), as we see its pid.
    init: u32,
    base: PathBuf,
}

impl GlusterServer {
    /// Start glusterd in a fresh namespace and create and start the volume (`force`: the
    /// brick is on the root filesystem) with `options` set.
    pub(crate) fn start(base: &Path, options: &[(&str, &str)]) -> GlusterServer {
        let brick = base.join("brick");
        let logs = base.join("gluster-logs");
        for d in [&brick, &logs] {
            std::fs::create_dir_all(d).expect("create a gluster dir");
        }
        // Private /run, /var/lib/glusterd and /var/log/glusterfs: glusterd's state, sockets
        // and the brick's log stay in this namespace (tmpfs, gone with it).
        let script = format!(
            "set -e\n\
             ip link set lo up\n\
             ip link add gv0 type veth peer name gv1\n\
             ip addr add {ADDR}/24 dev gv0\n\
             ip link set gv1 up\n\
             ip link set gv0 up\n\
             mount -t tmpfs tmpfs /run\n\
             mkdir -p /var/lib/glusterd /var/log/glusterfs\n\
             mount -t tmpfs tmpfs /var/lib/glusterd\n\
             mount -t tmpfs tmpfs /var/log/glusterfs\n\
             exec glusterd -N --log-file={logs}/glusterd.log --log-level=WARNING",
            logs = logs.display()
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
        .stderr(std::fs::File::create(base.join("glusterd.out")).expect("glusterd.out"));
        // SAFETY: only prctl, async-signal-safe, between fork and exec. If this test's
        // thread dies without dropping us (the process is killed), so does unshare, and
        // with it (--kill-child) the whole namespace.
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
        let ns = Owned(cmd.spawn().expect("start unshare for glusterd"));
        let outer = ns.0.id();
        let mut init = None;
        crate::harness::wait_until(Duration::from_secs(20), "glusterd to start", || {
            init = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "glusterd")
                });
            init.is_some()
        });
        let mut server = GlusterServer {
            ns,
            init: init.expect("glusterd"),
            base: base.to_path_buf(),
        };
        // glusterd answers the CLI once its socket is up: retry the create until then.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let made = server.cli(&[
                "volume",
                "create",
                VOLUME,
                &format!("{ADDR}:{}", brick.display()),
                "force",
            ]);
            match made {
                Ok(_) => break,
                Err(e) if Instant::now() >= deadline => {
                    panic!("gluster volume create: {e}\n{}", server.logs())
                }
                Err(_) => {
                    if let Ok(Some(st)) = server.ns.0.try_wait() {
                        panic!("glusterd exited ({st}):\n{}", server.logs());
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        for (k, v) in options {
            if let Err(e) = server.cli(&["volume", "set", VOLUME, k, v]) {
                panic!("gluster volume set {k} {v}: {e}\n{}", server.logs());
            }
        }
        if let Err(e) = server.cli(&["volume", "start", VOLUME]) {
            panic!("gluster volume start: {e}\n{}", server.logs());
        }
        server
    }

    /// Run `gluster --mode=script ARGS` against this server.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("nsenter")
            .arg("-t")
            .arg(self.init.to_string())
            .args(["--net", "--mount", "--", "gluster", "--mode=script"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run gluster: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn logs(&self) -> String {
        let mut all = std::fs::read_to_string(self.base.join("glusterd.out")).unwrap_or_default();
        all.push_str(
            &std::fs::read_to_string(self.base.join("gluster-logs/glusterd.log"))
                .unwrap_or_default(),
        );
        all
    }

    /// A FUSE client of the volume mounted at `mnt`; `extra` are its options (e.g.
    /// kernel cache timeouts).
    pub(crate) fn mount(&self, mnt: &Path, extra: &[&str]) -> Mount {
        let name = mnt
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let log = self.base.join(format!("gluster-logs/client-{name}.log"));
        // nsenter execs glusterfs (no fork without --pid): the child is the client.
        let client = Command::new("nsenter")
            .arg("-t")
            .arg(self.init.to_string())
            .args(["--net", "--", "glusterfs", "-N"])
            .arg(format!("--volfile-server={ADDR}"))
            .arg(format!("--volfile-id={VOLUME}"))
            .arg(format!("--log-file={}", log.display()))
            .arg("--log-level=WARNING")
            .args(extra)
            .arg(mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start glusterfs");
        let m = Mount::wait_for(client, mnt, &log);
        // Mounted before it has the volume: the first look waits until it does.
        std::fs::read_dir(mnt)
            .unwrap_or_else(|e| panic!("list {}: {e}\n{}", mnt.display(), self.logs()));
        m
    }
}
