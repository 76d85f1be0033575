//! One `run_all` under way: the tasks still to deliver, the task each slot has in hand
//! (and the one waiting behind it), delivery, collection and taking tasks back.

use std::collections::{HashMap, HashSet, VecDeque};

use super::results_watch::Look;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::layout::Slot;
use crate::protocol::{Outcome, Task, TaskId, TaskResult};

/// What happened, for progress displays. `index` is the task's position in the input.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Delivered to a worker's inbox; or, for a task kept waiting in a busy worker's
    /// inbox (a run whose workers tell it by pipe), when the task before it ended.
    Started {
        /// Its place in the list the run was given.
        index: usize,
        /// The worker that runs it.
        slot: Slot,
        /// Its id.
        id: &'a TaskId,
    },
    /// Its result arrived.
    Finished {
        /// Its place in the list the run was given.
        index: usize,
        /// The worker that ran it.
        slot: Slot,
        /// What it produced.
        result: &'a TaskResult,
    },
}

/// One [`Orchestrator::run_all`] under way: the tasks still to deliver, the task each
/// slot has in hand, and the results so far, by input position.
pub(super) struct Run {
    /// The root's task size limit, read once.
    limit: u64,
    pub(super) pending: VecDeque<(usize, Task)>,
    pub(super) outstanding: HashMap<Slot, (usize, TaskId)>,
    /// Workers that tell us when they start a task ([`Orchestrator::with_wake_pipes`]):
    /// a slot's next task waits in its inbox while its task runs, so the worker takes
    /// it the moment that one ends instead of after a round trip through this process
    /// (its result read, the next task written, the worker woken). Each slot holds at
    /// most one so; what still waits when the tasks run out goes to an idle slot.
    pub(super) waiting: HashMap<Slot, Waiting>,
    keep_filled: bool,
    /// Slots whose workers asked for their inbox back: none is filled again until the
    /// task in hand there ends.
    unfilled: HashSet<Slot>,
    results: Vec<Option<TaskResult>>,
}

/// A task delivered to a slot's inbox behind the one the slot has in hand.
pub(super) struct Waiting {
    index: usize,
    id: TaskId,
    /// As given to the run, to give to another slot should it still wait when one goes
    /// idle.
    task: Task,
}

impl Run {
    pub(super) fn new(tasks: Vec<Task>, limit: u64, keep_filled: bool) -> Run {
        Run {
            limit,
            results: vec![None; tasks.len()],
            pending: tasks.into_iter().enumerate().collect(),
            outstanding: HashMap::new(),
            waiting: HashMap::new(),
            keep_filled,
            unfilled: HashSet::new(),
        }
    }

    /// Give every slot without a task of ours the next pending task, and, keeping
    /// inboxes filled, every slot whose worker took its task from its inbox the one
    /// after.
    pub(super) fn deliver(
        &mut self,
        client: &Client,
        slots: &[Slot],
        pipes: Option<&crate::pool::WakePipes>,
        on_progress: &mut impl FnMut(Progress<'_>),
    ) -> Result<()> {
        if self.keep_filled && self.pending.is_empty() {
            self.move_waiting_to_idle(client, slots)?;
        }
        // Slots without a task first: a task waits behind another only when none is idle.
        let (idle, busy): (Vec<Slot>, Vec<Slot>) = slots
            .iter()
            .partition(|s| !self.outstanding.contains_key(s));
        for slot in idle.into_iter().chain(busy) {
            let behind = self.outstanding.contains_key(&slot);
            if behind && !self.room_behind(client, slot) {
                continue;
            }
            let Some((index, task)) = self.pending.pop_front() else {
                break;
            };
            match client.write_task_checked(slot, &task, self.limit) {
                Ok(id) => {
                    if let Some(pipes) = pipes {
                        pipes.wake(slot);
                    }
                    if behind {
                        self.waiting.insert(slot, Waiting { index, id, task });
                        continue;
                    }
                    on_progress(Progress::Started {
                        index,
                        slot,
                        id: &id,
                    });
                    self.outstanding.insert(slot, (index, id));
                }
                // Someone else's task is waiting there: try another slot.
                Err(Error::InboxBusy { .. }) => self.pending.push_front((index, task)),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether busy `slot` may take the next task into its inbox now: inboxes are kept
    /// filled, there is a next task, the slot has none waiting and did not ask for its
    /// inbox back, and its worker took its task out of the inbox (the one place a task
    /// waits).
    fn room_behind(&self, client: &Client, slot: Slot) -> bool {
        self.keep_filled
            && !self.pending.is_empty()
            && !self.waiting.contains_key(&slot)
            && !self.unfilled.contains(&slot)
            && client.worker(slot).task().symlink_metadata().is_err()
    }

    /// Take the task waiting in `slot`'s inbox back out of it, undelivered (its index and
    /// the task as given); `None` when it is no longer there (its worker took it, or
    /// someone withdrew it: its result is read when the task before it ends).
    fn take_back_waiting(&mut self, client: &Client, slot: Slot) -> Result<Option<(usize, Task)>> {
        let Some(w) = self.waiting.get(&slot) else {
            return Ok(None);
        };
        if !crate::tasks::withdraw::take_back(client.root(), slot, &w.id)? {
            return Ok(None);
        }
        let w = self.waiting.remove(&slot).expect("waiting slot");
        Ok(Some((w.index, w.task)))
    }

    /// Take back the task waiting in each of `slots`' inbox: its worker must put the task
    /// it had in hand back there (stopped by a `pause --now`). The taken task is the next
    /// to deliver, elsewhere or there once the slot is free again.
    pub(super) fn give_inboxes_back(&mut self, client: &Client, slots: Vec<Slot>) -> Result<()> {
        for slot in slots {
            if !self.outstanding.contains_key(&slot) {
                continue;
            }
            self.unfilled.insert(slot);
            if let Some(taken) = self.take_back_waiting(client, slot)? {
                self.pending.push_front(taken);
            }
        }
        Ok(())
    }

    /// With nothing left to deliver, a task still waiting behind another slot's task
    /// goes to a slot that has none: a long task never holds up the one queued behind
    /// it while another worker idles.
    fn move_waiting_to_idle(&mut self, client: &Client, slots: &[Slot]) -> Result<()> {
        let mut idle = slots
            .iter()
            .filter(|s| !self.outstanding.contains_key(s))
            .count();
        // Only tasks whose id the run made: such a task goes out again under a new id,
        // so a worker that read it just before it was taken back (and registered its
        // id for its own slot, then found the inbox empty) leaves nothing in its way.
        let movable: Vec<Slot> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.task.id.is_none())
            .map(|(s, _)| *s)
            .collect();
        for from in movable {
            if idle == 0 {
                break;
            }
            if let Some(taken) = self.take_back_waiting(client, from)? {
                self.pending.push_back(taken);
                idle -= 1;
            }
        }
        Ok(())
    }

    /// Withdraw every outstanding task still in its slot's inbox (the rename that
    /// withdraws it and a worker's claim cannot both succeed); each gets its `cancelled`
    /// result there, which [`Run::collect`] takes in. One a worker claimed first gets
    /// its result from that worker.
    pub(super) fn withdraw_unclaimed(&self, client: &Client) -> Result<()> {
        let queued = self.waiting.iter().map(|(s, w)| (s, &w.id));
        for (slot, id) in self
            .outstanding
            .iter()
            .map(|(s, (_, id))| (s, id))
            .chain(queued)
        {
            // Only what is ours and still there: most were claimed long ago.
            let inbox = crate::inspect::read_task_file(&client.worker(*slot).task());
            if inbox.and_then(|f| f.task_id).as_ref() == Some(id) {
                crate::tasks::withdraw::withdraw_inbox(client.root(), *slot, id)?;
            }
        }
        Ok(())
    }

    /// Take in every result that has arrived in the slots `look` names, freeing its
    /// slot (or handing it the task waiting behind, whose result may be there too);
    /// how many arrived.
    pub(super) fn collect(
        &mut self,
        client: &Client,
        look: &Look,
        on_progress: &mut impl FnMut(Progress<'_>),
    ) -> Result<usize> {
        let mut arrived = 0;
        // Told by their workers' bytes, the slots are named once per result: the task
        // waiting behind one is looked for only if its slot is named again (its
        // result's byte), not at once (a failed open nearly always).
        let (mut candidates, told): (Vec<Slot>, bool) = match look {
            Look::All => (self.outstanding.keys().copied().collect(), false),
            Look::Slots { slots, told } => (slots.clone(), *told),
        };
        while !candidates.is_empty() {
            let mut next = Vec::new();
            for slot in candidates {
                let Some((index, id)) = self.outstanding.get(&slot) else {
                    continue;
                };
                let Some(result) = client.read_result_for(slot, id)? else {
                    continue;
                };
                let index = *index;
                self.outstanding.remove(&slot);
                self.unfilled.remove(&slot);
                arrived += 1;
                on_progress(Progress::Finished {
                    index,
                    slot,
                    result: &result,
                });
                self.results[index] = Some(result);
                if let Some(w) = self.waiting.remove(&slot) {
                    on_progress(Progress::Started {
                        index: w.index,
                        slot,
                        id: &w.id,
                    });
                    self.outstanding.insert(slot, (w.index, w.id));
                    if !told {
                        next.push(slot);
                    }
                }
            }
            candidates = next;
        }
        Ok(arrived)
    }

    /// Every task's result in input order; tasks never delivered come back cancelled.
    pub(super) fn into_results(mut self) -> Vec<TaskResult> {
        for (index, task) in self.pending {
            let id = task.id.unwrap_or_else(TaskId::generate);
            self.results[index] = Some(TaskResult::failed(
                id,
                Outcome::Cancelled,
                "cancelled before it was delivered",
            ));
        }
        self.results
            .into_iter()
            .map(|r| r.expect("every task has a result"))
            .collect()
    }
}
