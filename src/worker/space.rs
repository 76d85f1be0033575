//! A full disk: pickup pauses, and a finished result waits in memory until it fits.
//!
//! ENOSPC and EDQUOT pass (someone frees space), unlike a bad file, so the worker
//! never dies of them: it says what is wrong in its log and status, retries with a
//! backoff, and publishes the result it holds once space returns. To make room for it,
//! a result that did not fit is shrunk (its inline output cut to head and tail, marked
//! `outputTruncated`); its exit code and error always survive.

use std::time::Duration;

use std::os::unix::fs::OpenOptionsExt;

use crate::layout::WorkerPaths;
use crate::protocol::{TaskId, TaskResult};

/// The first wait after a write failed for want of space; doubled up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Inline output kept, head and tail each, once a result did not fit on the disk.
const KEPT_WHEN_FULL: usize = 32 * 1024;

/// What is kept of a task's log (and raw stream), from its start, when its result did
/// not fit on the disk.
const LOG_KEPT_WHEN_FULL: u64 = 256 * 1024;

/// Cut the logs of task `id` (the live `output.log`/`output.jsonl`, or the kept
/// `tasks/<id>.log`/`.jsonl`) to their first [`LOG_KEPT_WHEN_FULL`] bytes, freeing their
/// blocks without writing anything new; says what was cut, `None` if nothing was.
pub(crate) fn trim_logs(paths: &WorkerPaths, id: &TaskId) -> Option<String> {
    let mut freed = 0u64;
    for path in [
        paths.output_log(),
        paths.output_stream(),
        paths.task_log(id),
        paths.task_stream(id),
    ] {
        let Ok(file) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len > LOG_KEPT_WHEN_FULL && file.set_len(LOG_KEPT_WHEN_FULL).is_ok() {
            freed += len - LOG_KEPT_WHEN_FULL;
        }
    }
    (freed > 0).then(|| {
        format!(
            "the disk was full: the log was cut to its first {} KiB ({freed} bytes dropped) to \
             publish the result",
            LOG_KEPT_WHEN_FULL / 1024
        )
    })
}

pub(crate) use crate::fsio::space::too_full_to_accept;

/// The next backoff after `current`.
pub(crate) fn next_backoff(current: Duration) -> Duration {
    (current * 2).min(MAX_BACKOFF)
}

/// Make a result small enough to fit where it did not: its inline output cut to its
/// head and tail with a marker between, stderr to its tail. The outcome, exit code,
/// signal and error are kept. `false` when there was nothing to cut.
pub(crate) fn shrink(r: &mut TaskResult) -> bool {
    let mut cut = false;
    // Room for the marker line, so a shrunk output is not cut again.
    if r.output.len() > 2 * KEPT_WHEN_FULL + 256 {
        let head = floor_char_boundary(&r.output, KEPT_WHEN_FULL);
        let tail = ceil_char_boundary(&r.output, r.output.len() - KEPT_WHEN_FULL);
        let dropped = tail - head;
        r.output = format!(
            "{}\n[conductor: {dropped} bytes of output cut here: the disk was full]\n{}",
            &r.output[..head],
            &r.output[tail..]
        );
        r.output_truncated = true;
        cut = true;
    }
    if let Some(err) = r.stderr.as_mut().filter(|e| e.len() > KEPT_WHEN_FULL) {
        let from = ceil_char_boundary(err, err.len() - KEPT_WHEN_FULL);
        *err = err[from..].to_string();
        cut = true;
    }
    cut
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, TaskId};

    #[test]
    fn shrinking_keeps_head_tail_and_the_verdict() {
        let mut r = TaskResult::failed(TaskId::from("d6"), Outcome::Success, "");
        r.success = true;
        r.error = None;
        r.exit_code = Some(0);
        r.output = format!(
            "{}{}{}",
            "h".repeat(40_000),
            "é".repeat(50_000),
            "t".repeat(40_000)
        );
        r.stderr = Some("e".repeat(100_000));
        assert!(shrink(&mut r));
        assert!(r.output.starts_with(&"h".repeat(KEPT_WHEN_FULL)));
        assert!(r.output.ends_with(&"t".repeat(KEPT_WHEN_FULL)));
        assert!(r.output.contains("cut here: the disk was full"));
        assert!(r.output.len() < 3 * KEPT_WHEN_FULL);
        assert!(r.output_truncated);
        assert_eq!(r.stderr.as_ref().map(String::len), Some(KEPT_WHEN_FULL));
        assert!(r.success);
        assert_eq!(r.exit_code, Some(0));
        assert!(!shrink(&mut r), "nothing left to cut");
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(next_backoff(FIRST_BACKOFF), Duration::from_millis(200));
        assert_eq!(next_backoff(Duration::from_secs(4)), MAX_BACKOFF);
    }
}
