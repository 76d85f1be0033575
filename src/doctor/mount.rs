//! Doctor check of the root's mount: filesystem, source and options, whether flocks reach
//! other hosts, the pickup to expect, and the mount options that make it quicker.

use crate::fs_kind::{self, MountInfo};
use crate::layout::Root;

use super::check::Check;

pub(super) fn check_mount(root: &Root) -> Check {
    let m = match fs_kind::mount_of(root.path()) {
        Err(e) => {
            return Check::warn(
                "mount",
                e.to_string(),
                "nothing to do unless workers misbehave",
            )
        }
        Ok(None) => return Check::ok("mount", "no /proc/self/mountinfo: not checked here"),
        Ok(Some(m)) => m,
    };
    let sshfs = (m.fs_type == "fuse.sshfs")
        .then(|| fs_kind::sshfs_options(&m.mount_point))
        .flatten();
    let mut shown = m.options.join(",");
    if let Some(o) = &sshfs {
        shown = format!("{shown}; sshfs -o {o}");
    }
    let at = format!(
        "{} is on {} {} mounted at {} ({shown})",
        root.path().display(),
        m.fs_type,
        m.source,
        m.mount_point.display()
    );
    if !m.is_shared() {
        return Check::ok("mount", format!("{at}: local, flocks and file events work"));
    }
    let lease = crate::inspect::lock_options(root).lease.as_secs();
    // For FUSE the kernel either keeps an flock (on this client only) or passes it to the
    // filesystem's server, and /proc/locks shows which; the type says what it should be.
    let probed = fs_kind::flock_kept_by_kernel(root.path()).ok().flatten();
    let (crosses, how) = match probed {
        Some(kept) if m.fs_type.starts_with("fuse.") => (
            Some(!kept),
            if kept {
                "probed: this client's kernel keeps them"
            } else {
                "probed: this client's kernel passes them to the filesystem"
            },
        ),
        _ => (m.flock_crosses_hosts(), "by the mount's type and options"),
    };
    let flocks = match crosses {
        Some(true) => format!(
            "flocks reach the server ({how}), so a slot's gate holds across hosts; a holder \
             on a host whose lease has run out (leaseSecs={lease}: paused, cut off) is taken \
             over all the same, its flock notwithstanding"
        ),
        Some(false) => format!(
            "flocks stay on this client ({how}): a slot's gate (and each lock's guard) is \
             local, and across hosts the lease decides (heartbeat age, leaseSecs={lease})"
        ),
        None => format!(
            "whether flocks reach other hosts depends on the server: across hosts conductor \
             goes by the lease (heartbeat age, leaseSecs={lease})"
        ),
    };
    let missing = missing_options(&m, sshfs.as_deref());
    let detail = format!("{at}; {flocks}; pickup: {}", pickup(&m, sshfs.as_deref()));
    let mut fix = String::new();
    if !missing.is_empty() {
        fix = format!("for quicker pickup mount with {}; ", missing.join(","));
    }
    if m.fs_type == "fuse.sshfs" && sshfs.is_none() {
        fix = format!("unless this sshfs runs with -o dir_cache=no, remount it so; {fix}");
    }
    fix.push_str(
        "give every host the same config.json and keep their clocks in sync (NTP): leases \
         compare heartbeat times written on different hosts (docs/HOSTS.md)",
    );
    if missing.is_empty() && crosses == Some(true) {
        return Check::ok("mount", detail);
    }
    Check::warn("mount", detail, fix)
}

/// What a worker on this mount should see: a poll every 100 ms, plus the client's cache.
fn pickup(m: &MountInfo, sshfs: Option<&str>) -> String {
    let base = "workers poll every 100 ms (no file events cross hosts)";
    match m.fs_type.as_str() {
        "nfs" | "nfs4" if m.option("noac").is_some() => format!("{base}; noac: no attribute cache"),
        "nfs" | "nfs4" => {
            let lo = m.option("acdirmin").unwrap_or("30");
            let hi = m.option("acdirmax").unwrap_or("60");
            format!(
                "{base}, and a directory's attributes are cached for {lo}–{hi} s: a task can \
                 wait that long unless the client revalidates on open (close-to-open)"
            )
        }
        "fuse.sshfs" if sshfs.is_some_and(|o| o.contains("dir_cache=no")) => {
            format!("{base}; directory cache off: about 0.1–0.2 s")
        }
        // sshfs keeps its own options out of /proc/mounts; they are read from its
        // process, which another PID namespace (a container) or a gone `ps` hides.
        "fuse.sshfs" if sshfs.is_none() => format!(
            "{base}; whether sshfs's directory cache is off cannot be told here (sshfs's \
             options are not in /proc/mounts, and no sshfs process serving this mount is \
             visible from here): with it on (the default) a task another host queued stays \
             hidden for up to dcache_timeout (20 s by default), one sent to an inbox about \
             2 s (the worker's rescan); nothing a client does sees past it"
        ),
        "fuse.sshfs" => format!(
            "{base}, behind sshfs's directory cache: a task another host queued stays \
             hidden for up to dcache_timeout (20 s by default), one sent to an inbox about \
             2 s (the worker's rescan)"
        ),
        "fuse.glusterfs" => format!(
            "{base}; the queue is read before each look, which the client's metadata cache \
             (1 s) cannot answer: a task another host queued starts in about 0.1 s, and one \
             waiting there for a pause another host lifted about as soon; a lock another \
             host freed, and a lifted pause for a task waiting in an inbox, may be seen up \
             to about 1 s later unless the volume has features.cache-invalidation and \
             performance.cache-invalidation on"
        ),
        _ => format!("{base}, plus however long this client caches directory listings"),
    }
}

/// Recommended options this mount lacks (empty when it has them or we know none).
fn missing_options(m: &MountInfo, sshfs: Option<&str>) -> Vec<&'static str> {
    let has = |k: &str| m.option(k).is_some();
    let mut want = Vec::new();
    match m.fs_type.as_str() {
        "nfs" | "nfs4" => {
            if !matches!(m.option("lookupcache"), Some("positive" | "pos" | "none")) {
                want.push("lookupcache=positive");
            }
            let acdirmax: u64 = m
                .option("acdirmax")
                .and_then(|v| v.parse().ok())
                .unwrap_or(60);
            if !has("noac") && acdirmax > 1 {
                want.push("actimeo=1");
            }
        }
        "cifs" | "smb3" if m.option("actimeo").is_none_or(|v| v != "0" && v != "1") => {
            want.push("actimeo=1");
        }
        "9p" if m.option("cache").is_some_and(|c| c != "none") => want.push("cache=none"),
        // Unknown options are said to be unknown (check_mount), not missing.
        "fuse.sshfs" if sshfs.is_some_and(|o| !o.contains("dir_cache=no")) => {
            want.push("dir_cache=no");
        }
        _ => {}
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn mount(fs_type: &str, options: &str) -> MountInfo {
        MountInfo {
            mount_point: PathBuf::from("/mnt/x"),
            fs_type: fs_type.into(),
            source: "srv:/e".into(),
            options: options.split(',').map(String::from).collect(),
        }
    }

    #[test]
    fn nfs_is_told_to_cache_less_unless_it_already_does() {
        let default = mount("nfs4", "rw,vers=4.2,acdirmin=30,acdirmax=60");
        assert_eq!(
            missing_options(&default, None),
            ["lookupcache=positive", "actimeo=1"]
        );
        assert!(pickup(&default, None).contains("30–60 s"));
        let tuned = mount("nfs4", "rw,lookupcache=pos,acdirmin=1,acdirmax=1");
        assert!(missing_options(&tuned, None).is_empty());
    }

    #[test]
    fn sshfs_options_come_from_its_process() {
        let m = mount("fuse.sshfs", "rw,user_id=0");
        assert_eq!(missing_options(&m, Some("reconnect")), ["dir_cache=no"]);
        assert!(missing_options(&m, Some("reconnect,dir_cache=no")).is_empty());
        assert!(pickup(&m, Some("dir_cache=no")).contains("0.1–0.2 s"));
        assert!(pickup(&m, Some("reconnect")).contains("20 s by default"));
        // Not found (another PID namespace): unknown, not missing.
        assert!(missing_options(&m, None).is_empty());
        assert!(pickup(&m, None).contains("cannot be told here"));
    }

    #[test]
    fn a_local_root_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let c = check_mount(&root);
        // Whatever the temp dir is on here, the check names its mount and type.
        assert!(c.detail.contains(" mounted at "), "{c:?}");
    }
}
