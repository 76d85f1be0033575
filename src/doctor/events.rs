//! Doctor checks of whether workers get native file events: the watcher they would
//! use, the root's filesystem, and the inotify limits.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::fs_kind;
use crate::layout::Root;
use crate::watch::{DirWatcher, Interest, WatchMode, WatcherKind};

use super::Check;

/// inotify limits below these are worth raising (one instance per worker and per
/// waiting client, one watch per watched directory).
const LOW_INOTIFY_INSTANCES: u64 = 256;
const LOW_INOTIFY_WATCHES: u64 = 16_384;

pub(super) fn check_watcher(root: &Root) -> Check {
    let (tx, _rx) = crossbeam_channel::bounded(1);
    let ignore: Interest = Arc::new(|_: &Path| false);
    match DirWatcher::new(&[root.path().to_path_buf()], WatchMode::Auto, ignore, tx) {
        Ok(w) => match w.kind() {
            WatcherKind::Native => Check::ok(
                "watcher",
                "native file events (inotify): pickup in about a millisecond",
            ),
            k @ WatcherKind::Poll { .. } => Check::warn(
                "watcher",
                format!("workers would fall back to {k}"),
                "on a local filesystem, raise the inotify limits (see the inotify check); \
                 on a network filesystem polling is expected (slower pickup)",
            ),
        },
        Err(e) => Check::fail(
            "watcher",
            e.to_string(),
            "check that the root is readable; workers cannot watch it",
        ),
    }
}

pub(super) fn check_filesystem(path: &Path) -> Check {
    match fs_kind::of(path) {
        Err(e) => Check::warn(
            "filesystem",
            e.to_string(),
            "nothing to do unless workers misbehave",
        ),
        Ok(None) => Check::ok(
            "filesystem",
            format!("{}: not checked on this platform", path.display()),
        ),
        Ok(Some(kind)) if kind.eventless => Check::warn(
            "filesystem",
            format!(
                "{} is on {}: no change events reach local watchers, so workers poll; \
                 locks and flocks depend on the server",
                path.display(),
                kind.name
            ),
            "keep the root on a local filesystem (e.g. under /tmp or $HOME on a local disk) when \
             one host is enough; for several hosts see the mount check",
        ),
        Ok(Some(kind)) => Check::ok(
            "filesystem",
            format!("{} is on {}", path.display(), kind.name),
        ),
    }
}

fn read_proc_number(path: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub(super) fn check_inotify_limits() -> Check {
    let watches = read_proc_number("/proc/sys/fs/inotify/max_user_watches");
    let instances = read_proc_number("/proc/sys/fs/inotify/max_user_instances");
    let (Some(watches), Some(instances)) = (watches, instances) else {
        return Check::ok("inotify", "no inotify limits to check on this system");
    };
    let detail = format!("max_user_instances={instances}, max_user_watches={watches}");
    let mut low = Vec::new();
    if instances < LOW_INOTIFY_INSTANCES {
        low.push(format!(
            "max_user_instances={instances} is low: every worker and every waiting client uses one, \
             shared with editors and other tools (when it runs out workers fall back to polling)"
        ));
    }
    if watches < LOW_INOTIFY_WATCHES {
        low.push(format!("max_user_watches={watches} is low"));
    }
    if low.is_empty() {
        Check::ok("inotify", detail)
    } else {
        Check::warn(
            "inotify",
            low.join("; "),
            "sudo sysctl fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288 \
             (add them to /etc/sysctl.d/ to keep them)",
        )
    }
}
