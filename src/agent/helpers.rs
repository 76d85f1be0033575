//! The threads that serve a running agent (output readers, the exit waiter), kept for the next.
//!
//! Every task needs three: one per output pipe and one waiting for the leader's exit.
//! Making and ending them per task (a 2 MiB stack mapped, guarded and unmapped, the
//! thread's setup and exit) was about a sixth of a worker's CPU on short tasks, so a
//! finished helper waits [`KEEP_IDLE`] for another job before it ends.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};

/// How long an idle helper waits for another job before its thread ends.
const KEEP_IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Helpers {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    /// Helpers committed to taking the next job: a job is only sent after one of them
    /// was reserved (this count decremented), so every sent job has a taker.
    idle: AtomicUsize,
}

fn helpers() -> &'static Helpers {
    static HELPERS: OnceLock<Helpers> = OnceLock::new();
    HELPERS.get_or_init(|| {
        let (jobs, queue) = unbounded();
        Helpers {
            jobs,
            queue,
            idle: AtomicUsize::new(0),
        }
    })
}

/// Decrement `count` if it is above zero; whether it was.
fn take_one(count: &AtomicUsize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

/// Run `job` on an idle helper, or on a new one (thread `agent-helper`) if none is idle.
/// Fails only when a new thread cannot be made.
pub(super) fn run(job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    run_on(helpers(), job)
}

fn run_on(h: &'static Helpers, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    if take_one(&h.idle) {
        // The receiver lives in the same static: sending cannot fail.
        let _ = h.jobs.send(Box::new(job));
        return Ok(());
    }
    std::thread::Builder::new()
        .name("agent-helper".into())
        .spawn(move || {
            job();
            serve(h);
        })
        .map(drop)
}

/// An idle helper's life: take jobs until none came for [`KEEP_IDLE`].
fn serve(h: &'static Helpers) {
    loop {
        h.idle.fetch_add(1, Ordering::AcqRel);
        loop {
            match h.queue.recv_timeout(KEEP_IDLE) {
                Ok(job) => {
                    job();
                    break;
                }
                // Leave only if no job was meant for us: a job reserved a helper when
                // it decremented the count; if we cannot decrement it, one is on its
                // way and some helper — we, if no other — must take it.
                Err(RecvTimeoutError::Timeout) if take_one(&h.idle) => return,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A pool of the test's own: agent tests in this process use the shared one.
    fn own_pool() -> &'static Helpers {
        let (jobs, queue) = unbounded();
        Box::leak(Box::new(Helpers {
            jobs,
            queue,
            idle: AtomicUsize::new(0),
        }))
    }

    #[test]
    fn every_job_runs_and_helpers_are_reused() {
        let pool = own_pool();
        let (done_tx, done) = unbounded();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..20 {
            for _ in 0..3 {
                let tx = done_tx.clone();
                run_on(pool, move || {
                    let _ = tx.send(std::thread::current().id());
                })
                .unwrap();
            }
            for _ in 0..3 {
                threads.insert(
                    done.recv_timeout(Duration::from_secs(10))
                        .expect("a job ran"),
                );
            }
            // Every helper made so far is back waiting before the next round.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while pool.idle.load(Ordering::Acquire) < threads.len() {
                assert!(std::time::Instant::now() < deadline, "helpers never idle");
                std::thread::yield_now();
            }
        }
        assert!(
            threads.len() <= 3,
            "60 jobs in rounds of three took {} threads: helpers are not reused",
            threads.len()
        );
    }

    #[test]
    fn jobs_that_block_each_get_a_helper() {
        // Three jobs that each wait for the last one: with fewer helpers than jobs
        // this would never end.
        let pool = own_pool();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        for _ in 0..3 {
            let b = Arc::clone(&barrier);
            run_on(pool, move || {
                b.wait();
            })
            .unwrap();
        }
        let (tx, rx) = unbounded();
        std::thread::spawn(move || {
            barrier.wait();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("all three jobs ran at once");
    }
}
