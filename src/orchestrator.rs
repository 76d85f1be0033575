//! Orchestration patterns over worker slots: fan-out/fan-in and sequential pipelines.

mod results_watch;
mod run;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, never, Receiver};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::gate;
use crate::layout::Slot;
use crate::protocol::{Task, TaskId, TaskResult};
use crate::watch::{DirWatcher, InlineWatcher, OnChange, ReadySignal, WatchMode};
use results_watch::{Arrivals, Look, ResultsWatch, Woke};
pub use run::Progress;
use run::Run;

/// How often outstanding tasks are re-checked without an event, and dead workers noticed
/// (the default of [`Orchestrator::with_recheck`]). A safety net only: no task that is
/// ready to run ever waits for it.
pub const RECHECK: Duration = Duration::from_millis(500);

/// Whether `stop` has fired: a message, or its sender gone.
fn stop_requested(stop: &Receiver<()>) -> bool {
    matches!(
        stop.try_recv(),
        Ok(()) | Err(crossbeam_channel::TryRecvError::Disconnected)
    )
}

/// Fans tasks out over a set of worker slots and collects the results.
///
/// Each slot gets one task at a time, so every worker is used and a slow task never
/// holds others up behind it. Workers that tell when they start a task (see
/// [`Orchestrator::with_wake_pipes`]) also get the next one in their inbox while they
/// run one; should it still wait there when nothing else is left, it moves to an idle
/// slot (under a new id, unless it came with one of its own: then it stays). Results
/// come back in input order.
#[derive(Debug)]
pub struct Orchestrator {
    client: Client,
    slots: Vec<Slot>,
    watch: WatchMode,
    stop: Receiver<()>,
    recheck: Duration,
    /// The workers were started by us and tell us through these, woken through them too
    /// ([`crate::pool::WorkerPool::spawn_woken`]) or watching their files
    /// ([`crate::pool::WorkerPool::spawn_told`]).
    pipes: Option<crate::pool::WakePipes>,
    /// With `pipes`: put a busy slot's next task in its inbox (see [`Orchestrator::keep_inboxes_filled`]).
    keep_filled: bool,
}

impl Orchestrator {
    /// Use `slots` (each must have a running worker) on `client`'s root.
    pub fn new(client: Client, slots: Vec<Slot>) -> Orchestrator {
        Orchestrator {
            client,
            slots,
            watch: WatchMode::Auto,
            stop: never(),
            recheck: RECHECK,
            pipes: None,
            keep_filled: true,
        }
    }

    /// Wake the workers through `pipes` after each delivery, and learn of their results
    /// and of each task's start from them, instead of by file events: for workers this
    /// process started with [`crate::pool::WorkerPool::spawn_woken`], or with
    /// [`crate::pool::WorkerPool::spawn_told`] (no waking ends: they watch their inboxes)
    /// (`run_all` only). Told of a start, the run puts the slot's next task in its inbox.
    pub(crate) fn with_wake_pipes(mut self, pipes: crate::pool::WakePipes) -> Orchestrator {
        self.pipes = Some(pipes);
        self
    }

    /// Whether a run woken through pipes puts a busy slot's next task in its inbox
    /// (default: yes). `conductor run` says no for the claude and codex presets: their
    /// tasks take minutes (the round trip saved is nothing), and a usage limit sends
    /// their stopped tasks back to the inbox (the worker would first have to ask for it,
    /// as after a `pause --now`).
    pub fn keep_inboxes_filled(mut self, yes: bool) -> Orchestrator {
        self.keep_filled = yes;
        self
    }

    /// Re-check outstanding tasks and workers' liveness this often without an event
    /// (default [`RECHECK`]).
    pub fn with_recheck(mut self, every: Duration) -> Orchestrator {
        self.recheck = every;
        self
    }

    /// Wake by polling (filesystems without change events).
    pub fn with_watch_mode(mut self, mode: WatchMode) -> Orchestrator {
        self.watch = mode;
        self
    }

    /// When `stop` fires (or its sender is dropped), deliver nothing more: tasks a worker
    /// already claimed still get their results (a stopping worker writes `interrupted`),
    /// a task still in its inbox is withdrawn, and it and the tasks never delivered come
    /// back `cancelled` without having run.
    pub fn with_stop(mut self, stop: Receiver<()>) -> Orchestrator {
        self.stop = stop;
        self
    }

    /// The client it delivers with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Run every task; returns their results in input order.
    pub fn run_all(
        &self,
        tasks: Vec<Task>,
        mut on_progress: impl FnMut(Progress<'_>),
    ) -> Result<Vec<TaskResult>> {
        if self.slots.is_empty() {
            return Err(Error::NoSlots {
                purpose: "to run tasks on",
            });
        }
        let limit = self.check_before_run()?;
        let (watcher, wake, arrived) = self.watch_results()?;
        // Read inline, the watcher is waited on with the stop channel as a descriptor
        // (dropped once it fired: it stays readable).
        let mut stop_signal = match &watcher {
            ResultsWatch::Inline(_) => {
                Some(ReadySignal::of(&self.stop, self.client.root().path())?)
            }
            ResultsWatch::Thread(_) => None,
        };
        let mut run = Run::new(tasks, limit, self.pipes.is_some() && self.keep_filled);
        // Which slots' results to look for: all at first, then those a result's name
        // appeared for (every outstanding one again after events were lost, on the
        // recheck, and once stopping).
        let mut look = Look::All;
        // Fires once; then `never`: a stop whose sender is gone would be ready on every
        // select, and the loop would spin without ever reaching the recheck (seen: a
        // `conductor run` at a full core after Ctrl-C, waiting for a task no one held).
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let mut recheck_at = Instant::now() + self.recheck;
        loop {
            if !stopping && stop_requested(&stop) {
                (stopping, stop) = (true, never());
            }
            run.give_inboxes_back(&self.client, arrived.take_inbox_wanted())?;
            if stopping {
                // A task delivered but not yet claimed would wait in its inbox for a
                // worker that is stopping too: take it back, answered `cancelled`.
                run.withdraw_unclaimed(&self.client)?;
            } else {
                run.deliver(
                    &self.client,
                    &self.slots,
                    self.pipes.as_ref(),
                    &mut on_progress,
                )?;
            }
            let freed = run.collect(&self.client, &look, &mut on_progress)?;
            if run.outstanding.is_empty() && (run.pending.is_empty() || stopping) {
                break;
            }
            // A slot freed just now takes its next task at once: its result's event may
            // already have been consumed (both slots finishing in one pass), and waiting
            // for the next one would put the recheck timer on a ready task's path.
            if freed > 0 && !stopping && (!run.pending.is_empty() || !run.waiting.is_empty()) {
                look = arrived.take();
                continue;
            }
            let woke = watcher.wait(&wake, &stop, stop_signal.as_ref(), recheck_at);
            match woke {
                Woke::Arrived => look = arrived.take(),
                Woke::Stop => {
                    (stopping, stop) = (true, never());
                    stop_signal = None;
                    look = Look::All;
                }
                Woke::Recheck => {
                    self.check_workers_alive(&run.outstanding)?;
                    look = Look::All;
                    recheck_at = Instant::now() + self.recheck;
                }
            }
            if stopping {
                look = Look::All;
            }
        }
        Ok(run.into_results())
    }

    /// The checks write_task makes before every delivery, made once for the run: the
    /// slots' directories (each worker re-checks its own before every claim) and the
    /// root's task size limit, returned.
    fn check_before_run(&self) -> Result<u64> {
        for &slot in &self.slots {
            crate::trust::verify_for_slot(self.client.root(), slot)?;
        }
        Ok(crate::Config::load(&self.client.root().config_file())?.max_task_bytes())
    }

    /// A worker that died with our task in hand will never answer: say so instead of
    /// waiting forever. (`conductor recover` then gives the task its result.)
    fn check_workers_alive(&self, outstanding: &HashMap<Slot, (usize, TaskId)>) -> Result<()> {
        for (slot, (_, id)) in outstanding {
            let w = self.client.worker(*slot);
            if gate::probe(&w.worker_gate())?.is_none()
                && self.client.read_result_for(*slot, id)?.is_none()
            {
                return Err(Error::WorkerGone {
                    slot: slot.0,
                    task: id.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Run tasks one after another, each built from the previous result (`None` for the
    /// first), stopping at the first failure. Returns the results of the stages that ran.
    pub fn run_pipeline<F>(
        &self,
        stages: Vec<F>,
        mut on_progress: impl FnMut(Progress<'_>),
    ) -> Result<Vec<TaskResult>>
    where
        F: FnOnce(Option<&TaskResult>) -> Task,
    {
        let mut done: Vec<TaskResult> = Vec::new();
        for (index, stage) in stages.into_iter().enumerate() {
            let task = stage(done.last());
            let mut result = self.run_all(vec![task], |p| {
                on_progress(match p {
                    Progress::Started { slot, id, .. } => Progress::Started { index, slot, id },
                    Progress::Finished { slot, result, .. } => Progress::Finished {
                        index,
                        slot,
                        result,
                    },
                })
            })?;
            let r = result.pop().expect("one result per task");
            let ok = r.success;
            done.push(r);
            if !ok {
                break;
            }
        }
        Ok(done)
    }
}

impl Orchestrator {
    /// Watch every slot's `results/`: the receiver wakes when a result's name appears
    /// there, and [`Arrivals`] says in which slots.
    fn watch_results(&self) -> Result<(ResultsWatch, Receiver<()>, Arc<Arrivals>)> {
        let dirs: Vec<_> = self
            .slots
            .iter()
            .map(|s| {
                let w = self.client.worker(*s);
                crate::fsio::ensure_dir(&w.results_dir()).map(|()| w.results_dir())
            })
            .collect::<Result<_>>()?;
        let (tx, wake) = bounded(1);
        let pipe_tx = tx.clone();
        let arrived = Arc::new(Arrivals::default());
        let (told, slots, watched) = (arrived.clone(), self.slots.clone(), dirs.clone());
        let on_change: OnChange = Arc::new(move |path: Option<&Path>| {
            if told.note(path, &watched, &slots) {
                // A full channel already holds a pending wake-up: nothing is lost.
                let _ = tx.try_send(());
            }
        });
        #[cfg(target_os = "linux")]
        if let Some(told) = self.pipes.as_ref().and_then(|p| p.told.as_ref()) {
            let told = told.try_clone().map_err(|e| {
                Error::io("read the workers' pipe for", self.client.root().path(), e)
            })?;
            // Every worker gone: the recheck finds out whose task is left (as it does
            // for a worker that died without a word).
            let (said, wake_tx) = (arrived.clone(), pipe_tx);
            let on_bytes = Box::new(move |bytes: &[u8]| {
                said.note_bytes(bytes);
                // Every byte is news (a start frees an inbox to fill).
                let _ = wake_tx.try_send(());
                false
            });
            let inline =
                InlineWatcher::from_pipe_reading_bytes(told, on_bytes, on_change, Box::new(|| {}))
                    .map_err(|e| {
                        Error::io("read the workers' pipe for", self.client.root().path(), e)
                    })?;
            return Ok((ResultsWatch::Inline(inline), wake, arrived));
        }
        let watcher = match InlineWatcher::published(&dirs, self.watch, on_change.clone())? {
            Some(inline) => ResultsWatch::Inline(inline),
            None => ResultsWatch::Thread(DirWatcher::published(&dirs, self.watch, on_change)?),
        };
        Ok((watcher, wake, arrived))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Root;
    use crate::protocol::Outcome;
    use crossbeam_channel::bounded;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::thread::JoinHandle;
    use std::time::Instant;

    /// A woken run on a fresh root whose workers the test plays: it claims, tells and
    /// answers.
    struct FakeWorkers {
        _dir: tempfile::TempDir,
        client: Client,
        told: std::fs::File,
        /// The workers' ends of the wake pipes, held open while the run lasts.
        _woken: Vec<OwnedFd>,
    }

    type Running = JoinHandle<Result<Vec<TaskResult>>>;

    const BOUND: Duration = Duration::from_secs(10);

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < BOUND, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    impl FakeWorkers {
        /// `run_all` of `prompts` over `slots` on its own thread, stopped by `stop`
        /// if given; the recheck far off, so only the test's words move it.
        fn run(
            slots: &[Slot],
            prompts: &[&str],
            stop: Option<Receiver<()>>,
        ) -> (FakeWorkers, Running) {
            let dir = tempfile::tempdir().unwrap();
            let client = Client::new(Root::new(dir.path()));
            let (told_r, told_w) = nix::unistd::pipe().unwrap();
            let mut wake = Vec::new();
            let mut woken = Vec::new();
            for &slot in slots {
                client.create_worker(slot).unwrap();
                let (r, w) = nix::unistd::pipe().unwrap();
                wake.push((slot, std::fs::File::from(w)));
                woken.push(r);
            }
            let pipes = crate::pool::WakePipes {
                told: Some(told_r),
                wake,
                alive: None,
            };
            let mut orch = Orchestrator::new(client.clone(), slots.to_vec())
                .with_wake_pipes(pipes)
                .with_recheck(Duration::from_secs(60));
            if let Some(stop) = stop {
                orch = orch.with_stop(stop);
            }
            let tasks: Vec<Task> = prompts.iter().map(|p| Task::new(*p)).collect();
            let running = std::thread::spawn(move || orch.run_all(tasks, |_| {}));
            let fake = FakeWorkers {
                _dir: dir,
                client,
                told: std::fs::File::from(told_w),
                _woken: woken,
            };
            (fake, running)
        }

        fn inbox(&self, slot: Slot) -> Option<TaskId> {
            crate::inspect::read_task_file(&self.client.worker(slot).task()).and_then(|f| f.task_id)
        }

        /// The task that comes to wait in `slot`'s inbox (`what` it is, for a timeout).
        fn waiting(&self, slot: Slot, what: &str) -> TaskId {
            wait_until(what, || self.inbox(slot).is_some());
            self.inbox(slot).unwrap()
        }

        /// Take the task in `slot`'s inbox, as a worker's claim does.
        fn claim(&self, slot: Slot) -> TaskId {
            let w = self.client.worker(slot);
            wait_until(&format!("worker {slot} has a task"), || w.task().exists());
            let id = self.inbox(slot).expect("a task with an id");
            std::fs::rename(w.task(), w.running()).unwrap();
            id
        }

        fn tell(&self) {
            // The run may have ended (its end of the pipe closed).
            let _ = (&self.told).write_all(b"r");
        }

        fn finish(&self, slot: Slot, id: &TaskId) {
            let w = self.client.worker(slot);
            let mut r = TaskResult::failed(id.clone(), Outcome::Success, "");
            r.success = true;
            r.output = format!("ran on {slot}");
            crate::fsio::write_json(&w.result_for(id), &r, crate::fsio::Durability::Atomic)
                .unwrap();
            let _ = std::fs::remove_file(w.running());
            self.tell();
        }
    }

    #[test]
    fn a_woken_run_keeps_the_next_task_in_a_busy_slots_inbox() {
        let slot = Slot(0);
        let (fake, run) = FakeWorkers::run(&[slot], &["a", "b", "c"], None);
        let first = fake.claim(slot);
        fake.tell();
        // While the first runs, the second waits in the inbox; the third is not sent.
        let second = fake.waiting(slot, "the second task waits in the inbox");
        assert_ne!(second, first);
        fake.finish(slot, &first);
        let second_claimed = fake.claim(slot);
        assert_eq!(second_claimed, second);
        fake.tell();
        fake.waiting(slot, "the third task waits in the inbox");
        fake.finish(slot, &second);
        let third = fake.claim(slot);
        fake.finish(slot, &third);
        let results = run.join().unwrap().unwrap();
        let ids: Vec<_> = results.iter().map(|r| r.task_id.clone()).collect();
        assert_eq!(ids, [first, second, third]);
        assert!(results.iter().all(|r| r.success));
    }

    #[test]
    fn a_stopped_run_takes_back_the_task_waiting_behind_and_answers_it_cancelled() {
        let slot = Slot(0);
        let (stop, stopped) = bounded(1);
        let (fake, run) = FakeWorkers::run(&[slot], &["a", "b", "c"], Some(stopped));
        let first = fake.claim(slot);
        fake.tell();
        fake.waiting(slot, "the second task waits in the inbox");
        stop.send(()).unwrap();
        wait_until("the waiting task withdrawn", || fake.inbox(slot).is_none());
        fake.finish(slot, &first);
        let results = run.join().unwrap().unwrap();
        assert!(results[0].success);
        for r in &results[1..] {
            assert_eq!(r.outcome, Some(Outcome::Cancelled), "{r:?}");
        }
    }

    #[test]
    fn a_worker_asking_for_its_inbox_back_gets_it_and_the_task_there_runs_later() {
        let slot = Slot(0);
        let (fake, run) = FakeWorkers::run(&[slot], &["a", "b"], None);
        let first = fake.claim(slot);
        fake.tell();
        let behind = fake.waiting(slot, "the second task waits in the inbox");
        // Stopped by a `pause --now`, the first must go back where the second waits.
        let ask = crate::pool::inbox_wanted_byte(slot).unwrap();
        (&fake.told).write_all(&[ask]).unwrap();
        // Its id given back too (after the rename that emptied the inbox).
        wait_until("the inbox given back", || {
            fake.inbox(slot).is_none()
                && crate::ids::lookup(fake.client.root(), &behind)
                    .unwrap()
                    .is_none()
        });
        let w = fake.client.worker(slot);
        std::fs::rename(w.running(), w.task()).unwrap();
        // Resumed: the first runs again and ends; then the second comes.
        assert_eq!(fake.claim(slot), first);
        fake.tell();
        fake.finish(slot, &first);
        let second = fake.claim(slot);
        fake.finish(slot, &second);
        let results = run.join().unwrap().unwrap();
        assert_eq!(results[0].task_id, first);
        assert_eq!(results[1].task_id, second);
        assert!(results.iter().all(|r| r.success));
    }

    #[test]
    fn a_task_waiting_behind_a_long_one_goes_to_the_slot_that_is_idle() {
        let (a, b) = (Slot(0), Slot(1));
        let (fake, run) = FakeWorkers::run(&[a, b], &["long", "short", "queued"], None);
        // Both take their first task; then the third waits behind the first slot's.
        let long = fake.claim(a);
        let short = fake.claim(b);
        fake.tell();
        let queued = fake.waiting(a, "the third task waits behind the long one");
        // The other slot ends its task while the long one runs on: it gets the third,
        // under a new id (the old one given back).
        fake.finish(b, &short);
        fake.waiting(b, "the third task moves to the idle slot");
        assert_eq!(fake.inbox(a), None, "taken out of the busy slot's inbox");
        let moved = fake.claim(b);
        assert_ne!(moved, queued);
        let root = fake.client.root();
        assert_eq!(crate::ids::lookup(root, &queued).unwrap(), None);
        assert_eq!(
            crate::ids::lookup(root, &moved).unwrap(),
            Some(crate::ids::Place::Worker(b)),
        );
        fake.finish(b, &moved);
        fake.finish(a, &long);
        let results = run.join().unwrap().unwrap();
        assert_eq!(results[2].task_id, moved);
        assert_eq!(results[2].output, "ran on 1");
        assert!(results.iter().all(|r| r.success));
    }
}
