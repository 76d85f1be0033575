//! Polling that costs what it must: one `stat` per watched directory and file a tick,
//! fast after a change, slower while nothing changes.
//!
//! Polling is what network and FUSE filesystems get (no change events cross hosts), so
//! each `stat` asks the server (`statx` with `AT_STATX_FORCE_SYNC`: not the kernel's
//! attribute cache, which would hide another host's change for its timeout), and a
//! filesystem that keeps whole-second times (sshfs) is looked at again for a second
//! after each change: a second change within the same second leaves the stamp equal.
//!
//! A forced `stat` reaches the filesystem's client, not always its server: GlusterFS's
//! FUSE client answers it from its own metadata cache (md-cache, 1 s with volume
//! defaults), so another host's new entry showed up to a second late. A fresh read of
//! the directory does reach the server, and its first chunk carries `.` with the
//! directory's current attributes, which md-cache keeps: the `stat` right after is
//! fresh. (Measured on the harness's GlusterFS 10.3 mounts, a new entry made through one
//! client was seen through the other in 4 ms p50 this way, ~700 ms p50 / 1 s max by a
//! forced stat alone; a lookup of a missing name, an opendir alone, an `fstat`, a
//! getxattr, or a re-read of a directory kept open — fresh for 2,000 entries, not for
//! a few — did not do it.) So the directories a caller names as *listed* are read (one
//! `getdents`, whatever their size) before each `stat` on such a filesystem: a worker
//! names only the queue, never its slot directories — each read is a few requests to
//! the server (opendir, readdirp) where a stat answered by md-cache is none.

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::events::count_events;
use super::mode::OnChange;

/// After this long without a change the interval starts to grow.
const STAY_FAST_FOR: Duration = Duration::from_secs(2);

/// While idle, a poller stats about this many paths a second at most (a many-slot
/// worker watches thousands) — but never waits longer than [`slowest`] allows, nor,
/// watching a few, longer than [`IDLE_FLOOR`].
const IDLE_STATS_PER_SEC: f64 = 100.0;

/// The longest idle interval of a poller watching a few paths: what a change made
/// on another host may wait before it is looked for.
const IDLE_FLOOR: Duration = Duration::from_millis(200);

/// How long a stamp in whole seconds is looked at again after it was first seen (by
/// our clock): past the end of the second it names, with a margin.
const COARSE_RECHECK: Duration = Duration::from_millis(1100);

/// A file's identity and last change, as far as one `stat` tells. A directory's
/// changes with every entry created, removed or renamed in it.
type Stamp = Option<(i64, i64, i64, i64, u64, u64)>;

/// The stamp as the server has it now.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn stamp(path: &Path) -> Stamp {
    let st = crate::fsio::statx_from_server(path).ok()?;
    Some((
        st.stx_mtime.tv_sec,
        i64::from(st.stx_mtime.tv_nsec),
        st.stx_ctime.tv_sec,
        i64::from(st.stx_ctime.tv_nsec),
        st.stx_ino,
        st.stx_size,
    ))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn stamp(path: &Path) -> Stamp {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
        m.ino(),
        m.size(),
    ))
}

/// Whole seconds: both times without a fraction (sshfs; or a change exactly on a
/// second, which costs one needless second of looking again).
fn coarse(s: &Stamp) -> bool {
    matches!(*s, Some((_, 0, _, 0, ..)))
}

/// Whether a path whose stamp is `s`, first seen at `seen_at`, must be looked at again
/// although it has not changed: another change may have left it equal.
fn look_again(s: &Stamp, seen_at: Instant) -> bool {
    if coarse(s) {
        // By our own clock, not the server's: the second it names is over by then.
        return seen_at.elapsed() < COARSE_RECHECK;
    }
    too_recent(s)
}

/// A stamp this recent may be followed by another change within the same clock tick
/// of the filesystem, which would leave it equal: look at it again next time.
fn too_recent(s: &Stamp) -> bool {
    let Some((sec, nsec, ..)) = *s else {
        return false;
    };
    let Ok(now) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) else {
        return false;
    };
    let then = Duration::new(sec.max(0) as u64, nsec.clamp(0, 999_999_999) as u32);
    now.saturating_sub(then) < Duration::from_millis(50)
}

/// The slowest a poller of `paths` paths with this fastest interval gets: at most ten
/// times slower and at most a second, and no slower than [`IDLE_FLOOR`] unless that
/// would stat more than [`IDLE_STATS_PER_SEC`] (never faster than asked).
pub(super) fn slowest(fastest: Duration, paths: usize) -> Duration {
    let by_budget = Duration::from_secs_f64(paths as f64 / IDLE_STATS_PER_SEC);
    by_budget
        .clamp(IDLE_FLOOR, Duration::from_secs(1))
        .min(fastest * 10)
        .max(fastest)
}

/// How a path is looked at each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// One `stat`.
    Stat,
    /// A directory whose client answers even a forced `stat` from a cache of its own
    /// (GlusterFS): one chunk of it read first, which brings the client the directory's
    /// current attributes from the server. Whether it held an entry (a queued task)
    /// decides the [`Look::ReadWhileWaiting`] paths of the same tick.
    ReadThenStat,
    /// Such a directory whose news matters only while a task waits (the locks and
    /// pauses a queued task may wait for): read first while the last
    /// [`Look::ReadThenStat`] directory looked at held an entry, else only `stat`ed.
    ReadWhileWaiting,
}

/// The stamp of `path`, looked at as `look` says; `waiting` is whether the last
/// [`Look::ReadThenStat`] directory held an entry (set here when `path` is one).
fn look_at(path: &Path, look: Look, waiting: &mut bool) -> Stamp {
    match look {
        Look::Stat => {}
        Look::ReadThenStat => *waiting = read_one_chunk(path),
        Look::ReadWhileWaiting => {
            if *waiting {
                read_one_chunk(path);
            }
        }
    }
    stamp(path)
}

/// Read `dir` as far as its first entry (one `getdents`, one FUSE READDIR, for all but
/// a directory of many dot-names): what refreshes the client's cached attributes is
/// the request reaching the server. Whether it holds an entry not named with a dot (a
/// temp file). A failure shows in the stat after (a directory gone), or not at all.
fn read_one_chunk(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
    })
}

pub(super) struct Poller {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// Look at `paths` (directories and files, each as its [`Look`] says) every
    /// `fastest`, slowing to [`slowest`] while nothing changes; `on_change(path)` for
    /// each that changed.
    pub(super) fn start(
        paths: Vec<(PathBuf, Look)>,
        fastest: Duration,
        on_change: OnChange,
    ) -> std::io::Result<Poller> {
        let (stop, stopped) = bounded(0);
        let thread = std::thread::Builder::new()
            .name("conductor-poll".into())
            .spawn(move || poll_loop(paths, fastest, on_change, stopped))?;
        Ok(Poller {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn poll_loop(
    paths: Vec<(PathBuf, Look)>,
    fastest: Duration,
    on_change: OnChange,
    stop: Receiver<()>,
) {
    let start = Instant::now();
    let mut waiting = false;
    // (stamp, when we first saw it)
    let mut seen: Vec<(Stamp, Instant)> = paths
        .iter()
        .map(|(p, look)| (look_at(p, *look, &mut waiting), start))
        .collect();
    let slowest = slowest(fastest, paths.len());
    let mut interval = fastest;
    let mut quiet = Duration::ZERO;
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let (mut changed, mut rechecked, mut last) = (0, 0, None);
        for ((path, look), (seen_stamp, seen_at)) in paths.iter().zip(seen.iter_mut()) {
            let now = look_at(path, *look, &mut waiting);
            if now != *seen_stamp {
                changed += 1;
                last = Some(path);
                *seen_stamp = now;
                *seen_at = Instant::now();
                on_change(Some(path));
            } else if look_again(&now, *seen_at) {
                rechecked += 1;
                on_change(Some(path));
            }
        }
        count_events(changed, last.map(PathBuf::as_path));
        if changed > 0 || rechecked > 0 {
            interval = fastest;
            quiet = Duration::ZERO;
        } else {
            quiet += interval;
            if quiet >= STAY_FAST_FOR {
                interval = (interval * 2).min(slowest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_bounded_both_ways() {
        let ms = Duration::from_millis;
        // A worker's few paths: another host's change waits at most 200 ms.
        assert_eq!(slowest(ms(100), 4), ms(200));
        // A thousand slots' worth: a second, as many stats a second as paths.
        assert_eq!(slowest(ms(100), 3000), Duration::from_secs(1));
        assert_eq!(slowest(ms(100), 50), ms(500));
        assert_eq!(slowest(ms(10), 4), ms(100));
        assert_eq!(slowest(Duration::from_secs(3), 4), Duration::from_secs(3));
    }

    #[test]
    fn a_whole_second_stamp_is_looked_at_again_until_its_second_is_over() {
        let whole = Some((1_000, 0, 1_000, 0, 7, 4096));
        assert!(look_again(&whole, Instant::now()));
        let long_ago = Instant::now() - Duration::from_secs(2);
        assert!(!look_again(&whole, long_ago));
        // Fine-grained and old: not again (a change would have changed it).
        let fine = Some((1_000, 5, 1_000, 5, 7, 4096));
        assert!(!look_again(&fine, Instant::now()));
        assert!(!look_again(&None, Instant::now()));
    }

    #[test]
    fn a_stamp_changes_when_an_entry_is_added_and_when_a_file_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let before = stamp(&d);
        std::fs::write(d.join("task.json"), "{}").unwrap();
        assert_ne!(before, stamp(&d));
        let f = d.join("task.json");
        let before = stamp(&f);
        std::fs::write(&f, "{\"prompt\":\"x\"}").unwrap();
        assert_ne!(before, stamp(&f));
        assert_eq!(stamp(&d.join("missing")), None);
    }

    #[test]
    fn a_directory_read_first_has_the_same_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        std::fs::write(d.join("a"), "").unwrap();
        let mut waiting = false;
        assert_eq!(look_at(&d, Look::ReadThenStat, &mut waiting), stamp(&d));
        assert!(waiting, "an entry was found");
        assert_eq!(look_at(&d, Look::ReadWhileWaiting, &mut waiting), stamp(&d));
        let missing = d.join("missing");
        assert_eq!(look_at(&missing, Look::ReadThenStat, &mut waiting), None);
        assert!(!waiting);
    }

    #[test]
    fn only_an_entry_without_a_dot_counts_as_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        assert!(!read_one_chunk(&d));
        std::fs::write(d.join(".tmp-1"), "").unwrap();
        assert!(!read_one_chunk(&d));
        std::fs::write(d.join("t1.json"), "").unwrap();
        assert!(read_one_chunk(&d));
    }
}
