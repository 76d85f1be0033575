//! Doctor checks of whether workers get native file events: the watcher they would
//! use, the root's filesystem, and the inotify limits.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use crate::fs_kind;
use crate::layout::Root;
use crate::watch::{DirWatcher, Interest, WatchMode, WatcherKind};

use super::check::Check;

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

/// Watches one single-slot worker uses: its slot directory and the three shared ones,
/// and the nine directories its claim's check watches (`worker/dirs_watch.rs`).
const WATCHES_PER_SINGLE_SLOT_WORKER: u64 = 13;
/// inotify instances one single-slot worker uses: its events and its claim's check.
const INSTANCES_PER_SINGLE_SLOT_WORKER: u64 = 2;
/// Watches a many-slot worker uses besides one per slot.
const SHARED_WATCHES: u64 = 3;

/// How many slots these limits allow with native events: as single-slot workers (two
/// instances and 13 watches each) and as many-slot workers (one watch per slot).
pub(super) fn slots_allowed(instances: u64, watches: u64) -> String {
    let single =
        (instances / INSTANCES_PER_SINGLE_SLOT_WORKER).min(watches / WATCHES_PER_SINGLE_SLOT_WORKER);
    let many = watches.saturating_sub(SHARED_WATCHES).min(1024);
    format!(
        "enough for about {single} single-slot workers, or {many} slots in many-slot workers \
         (`conductor-worker 0-{} DIR`), shared with every other program of this user",
        many.saturating_sub(1)
    )
}

pub(super) fn check_inotify_limits() -> Check {
    let watches = read_proc_number("/proc/sys/fs/inotify/max_user_watches");
    let instances = read_proc_number("/proc/sys/fs/inotify/max_user_instances");
    let (Some(watches), Some(instances)) = (watches, instances) else {
        return Check::ok("inotify", "no inotify limits to check on this system");
    };
    let detail = format!(
        "max_user_instances={instances}, max_user_watches={watches}: {}",
        slots_allowed(instances, watches)
    );
    let mut low = Vec::new();
    if instances < LOW_INOTIFY_INSTANCES {
        low.push(format!(
            "max_user_instances={instances} is low: every single-slot worker and every waiting \
             client uses one, shared with editors and other tools (when it runs out workers fall \
             back to polling; a many-slot worker needs only one)"
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
            format!("{}; {detail}", low.join("; ")),
            "sudo sysctl fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288 \
             (add them to /etc/sysctl.d/ to keep them)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limits_allow_64_single_slot_workers_or_every_slot_in_one() {
        let said = slots_allowed(128, 65_536);
        assert!(said.contains("about 64 single-slot workers"), "{said}");
        assert!(said.contains("1024 slots in many-slot workers"), "{said}");
        let said = slots_allowed(1024, 400);
        assert!(said.contains("about 30 single-slot"), "{said}");
        assert!(said.contains("397 slots"), "{said}");
    }
}
