//! Polling that costs what it must: one `stat` per watched directory and file a tick,
//! fast after a change, slower while nothing changes.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::{count_events, OnChange};

/// After this long without a change the interval starts to grow.
const STAY_FAST_FOR: Duration = Duration::from_secs(2);

/// A file's identity and last change, as far as one `stat` tells. A directory's
/// changes with every entry created, removed or renamed in it.
type Stamp = Option<(i64, i64, i64, i64, u64, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
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

/// The slowest a poller with this fastest interval gets: ten times slower, capped at
/// a second (never faster than asked).
pub(super) fn slowest(fastest: Duration) -> Duration {
    (fastest * 10).min(Duration::from_secs(1)).max(fastest)
}

pub(super) struct Poller {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// Stat `paths` (directories and files) every `fastest`, slowing to
    /// [`slowest`] while nothing changes; `on_change(path)` for each that changed.
    pub(super) fn start(
        paths: Vec<PathBuf>,
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

fn poll_loop(paths: Vec<PathBuf>, fastest: Duration, on_change: OnChange, stop: Receiver<()>) {
    let mut seen: Vec<Stamp> = paths.iter().map(stamp).collect();
    let mut interval = fastest;
    let mut quiet = Duration::ZERO;
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let (mut changed, mut last) = (0, None);
        for (path, seen_stamp) in paths.iter().zip(seen.iter_mut()) {
            let now = stamp(path);
            if now != *seen_stamp || too_recent(&now) {
                if now != *seen_stamp {
                    changed += 1;
                    last = Some(path);
                }
                *seen_stamp = now;
                on_change(Some(path));
            }
        }
        count_events(changed, last.map(PathBuf::as_path));
        if changed > 0 {
            interval = fastest;
            quiet = Duration::ZERO;
        } else {
            quiet += interval;
            if quiet >= STAY_FAST_FOR {
                interval = (interval * 2).min(slowest(fastest));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_bounded_both_ways() {
        assert_eq!(slowest(Duration::from_millis(100)), Duration::from_secs(1));
        assert_eq!(
            slowest(Duration::from_millis(10)),
            Duration::from_millis(100)
        );
        assert_eq!(slowest(Duration::from_secs(3)), Duration::from_secs(3));
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
}
