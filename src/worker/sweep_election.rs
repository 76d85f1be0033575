//! One sweep of abandoned slots per interval for the whole root, by whichever worker
//! finds it due: N workers no longer cost N sweeps of N slots.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

use crate::dirlock::LockOptions;
use crate::layout::{Root, Slot};
use crate::recovery;

/// The file whose flock admits one sweeping worker at a time and whose mtime says when
/// the root was last swept: `<root>/.locks/sweeper.lock`.
pub(crate) fn election_file(root: &Root) -> PathBuf {
    root.gates_dir().join("sweeper.lock")
}

/// Decides, each time a worker's rescan timer fires, whether this worker sweeps.
pub(crate) struct SweepElection {
    path: PathBuf,
    /// A sweep is due when the last one (by anyone) is at least this old.
    every: Duration,
}

impl SweepElection {
    pub fn new(root: &Root, rescan: Duration) -> SweepElection {
        SweepElection {
            path: election_file(root),
            // A little under the rescan interval: with workers ticking at random
            // phases the root is swept about once per interval, never much less often.
            every: rescan.mul_f64(0.75),
        }
    }

    /// Sweep every slot but `own` if no one has within the interval. The guarantee of
    /// one sweep per worker per interval becomes one per root per interval, as long as
    /// any worker is idle; a task whose worker died still ends within the same bound.
    pub fn sweep_if_due(&self, root: &Root, own: &[Slot], lock_opts: &LockOptions) -> bool {
        let Some(lock) = self.take() else {
            return false; // someone is sweeping right now
        };
        // A file just created (empty) has a fresh mtime but was never swept.
        let last = lock
            .metadata()
            .ok()
            .filter(|m| m.len() > 0)
            .and_then(|m| m.modified().ok());
        let due = last.is_none_or(|t| t.elapsed().map_or(true, |age| age >= self.every));
        if !due {
            return false;
        }
        let _ = lock.set_len(1);
        let _ = lock.set_modified(SystemTime::now());
        let Ok(slots) = root.slots() else {
            return false;
        };
        let others: Vec<Slot> = slots.into_iter().filter(|s| !own.contains(s)).collect();
        if let Some(&first) = own.first() {
            recovery::sweep_abandoned(root, &others, first, lock_opts);
        }
        true
    }

    /// The election's flock, without waiting; `None` while another worker holds it.
    fn take(&self) -> Option<Flock<File>> {
        let open = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&self.path)
        };
        let file = match open() {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::fsio::ensure_dir(self.path.parent()?).ok()?;
                open().ok()?
            }
            Err(e) => {
                tracing::debug!("sweep election lock {}: {e}", self.path.display());
                return None;
            }
        };
        Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sweep_per_interval_for_the_whole_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        crate::queue::init_root(&root).unwrap();
        let opts = crate::config::Config::default().lock_options();
        let (a, b) = (
            SweepElection::new(&root, Duration::from_secs(60)),
            SweepElection::new(&root, Duration::from_secs(60)),
        );
        assert!(a.sweep_if_due(&root, &[Slot(0)], &opts), "the first is due");
        assert!(!b.sweep_if_due(&root, &[Slot(1)], &opts), "swept just now");
        // While one holds the flock, nobody else sweeps, due or not.
        let held = a.take().expect("free");
        let old = SystemTime::now() - Duration::from_secs(3600);
        held.set_modified(old).unwrap();
        assert!(
            !b.sweep_if_due(&root, &[Slot(1)], &opts),
            "someone is sweeping"
        );
        drop(held);
        assert!(b.sweep_if_due(&root, &[Slot(1)], &opts), "due again");
    }
}
