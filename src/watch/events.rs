//! How many raw events this process's watchers received, and the debug file that
//! tells it (`CONDUCTOR_DEBUG_WATCH_EVENTS`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Set to a file path, every process that watches writes there how many events its
/// watchers have received so far (a debugging and test aid: a read of a watched
/// directory must not count).
pub const ENV_DEBUG_WATCH_EVENTS: &str = "CONDUCTOR_DEBUG_WATCH_EVENTS";

static EVENTS_SEEN: AtomicU64 = AtomicU64::new(0);

/// How many raw events (native events, or changes a poller saw) this process's
/// watchers have received: each one woke a watcher thread.
pub fn events_seen() -> u64 {
    EVENTS_SEEN.load(Ordering::Relaxed)
}

/// Count `n` events, the last of them at `last`; written to the debug file if asked.
pub(super) fn count_events(n: u64, last: Option<&Path>) {
    if n == 0 {
        return;
    }
    EVENTS_SEEN.fetch_add(n, Ordering::Relaxed);
    if let Some(counter) = DebugCounter::get() {
        counter.note(last);
    }
}

/// The debug counter's file ([`ENV_DEBUG_WATCH_EVENTS`]), kept by a thread of its own
/// that writes at most every [`DebugCounter::EVERY`]: written on the watcher's thread
/// for every batch of events, it took 40 % of that thread in a 1,000-task burst of the
/// very worker a benchmark counted events of. The last count is always written,
/// at most that interval late.
struct DebugCounter {
    path: PathBuf,
    /// The last changed path not yet written, if any is waiting.
    waiting: Mutex<Option<Option<PathBuf>>>,
    woken: Condvar,
}

impl DebugCounter {
    const EVERY: Duration = Duration::from_millis(50);

    /// The process's counter, started on first use; `None` unless asked for.
    fn get() -> Option<&'static DebugCounter> {
        static COUNTER: OnceLock<Option<&'static DebugCounter>> = OnceLock::new();
        *COUNTER.get_or_init(|| {
            let path = PathBuf::from(std::env::var_os(ENV_DEBUG_WATCH_EVENTS)?);
            let counter: &'static DebugCounter = Box::leak(Box::new(DebugCounter {
                path,
                waiting: Mutex::new(None),
                woken: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("conductor-events".into())
                .spawn(move || counter.keep())
                .ok()?;
            Some(counter)
        })
    }

    fn note(&self, last: Option<&Path>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        *waiting = Some(last.map(Path::to_path_buf));
        self.woken.notify_one();
    }

    fn keep(&self) {
        loop {
            let last = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(last) = waiting.take() {
                        break last;
                    }
                    waiting = self.woken.wait(waiting).unwrap_or_else(|p| p.into_inner());
                }
            };
            self.write(last.as_deref());
            // Events meanwhile wait for the next write: one per interval at most.
            std::thread::sleep(Self::EVERY);
        }
    }

    fn write(&self, last: Option<&Path>) {
        let text = serde_json::json!({
            "pid": std::process::id(),
            "events": events_seen(),
            "last": last.map(|p| p.display().to_string()),
        });
        let text = format!("{text}\n");
        // Swapped with a second name of this process's own: a write must not make and
        // free a file each time.
        let Some(name) = self.path.file_name() else {
            return;
        };
        let next = format!(".{}.{}.next", name.to_string_lossy(), std::process::id());
        let _ = crate::fsio::write_swapped_via(&self.path, OsStr::new(&next), text.as_bytes());
    }
}
