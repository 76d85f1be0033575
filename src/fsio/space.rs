//! Free space on a filesystem, and the threshold below which a worker takes no task:
//! read by the worker's pickup and by `status` (a worker waiting for space to start).

use std::path::Path;

/// Below this much free space on the root's filesystem no new task is taken: a task
/// accepted now could not be finished (its status, record and result need room).
pub const MIN_FREE_FOR_PICKUP: u64 = 256 * 1024;

/// Free bytes for us on the filesystem holding `dir` (`None` when it cannot be told).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// `Some(problem)` while the filesystem holding `dir` is too full to take a task.
pub fn too_full_to_accept(dir: &Path) -> Option<String> {
    let free = free_bytes(dir)?;
    (free < MIN_FREE_FOR_PICKUP).then(|| {
        format!(
            "disk full: {free} bytes free on the filesystem of {} (need {MIN_FREE_FOR_PICKUP} \
             to take a task); pickup paused until space is freed",
            dir.display()
        )
    })
}
