//! The orchestrator's watch of the slots' `results/` (or of its workers' pipe): which
//! slots a result appeared in (`Arrivals`), and what ended a wait (`Woke`).

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use crossbeam_channel::{select, Receiver};

use crate::layout::Slot;
use crate::watch::{DirWatcher, InlineWatcher, ReadySignal, Waited};

/// The orchestrator's watch of the slots' `results/`: read by its own thread where
/// events are native (the kernel wakes it directly when a result appears, not a reader
/// thread that then hands it a wake-up), else by a watcher's thread.
pub(super) enum ResultsWatch {
    Inline(InlineWatcher),
    Thread(#[allow(dead_code)] DirWatcher),
}

/// What ended a wait of [`Orchestrator::run_all`].
pub(super) enum Woke {
    /// A result's name appeared.
    Arrived,
    /// The stop channel fired.
    Stop,
    /// The recheck interval passed without either.
    Recheck,
}

/// Which slots [`Run::collect`] looks at.
pub(super) enum Look {
    All,
    /// A slot once for each result said to be there (`told`: by its worker's byte, one
    /// each, so a slot named once holds no second result to look for), or at least once
    /// (a file event: events of one slot are folded).
    Slots {
        slots: Vec<Slot>,
        told: bool,
    },
}

/// The slots whose `results/` a name appeared in since the orchestrator last asked.
/// Looking only there, not for every outstanding task's result on every wake-up, saves
/// the orchestrator a failed `open` per other slot each time. Woken workers also ask
/// here for their inbox back ([`crate::pool::slot_wanting_inbox`]).
#[derive(Default)]
pub(super) struct Arrivals(Mutex<Seen>);

#[derive(Default)]
struct Seen {
    all: bool,
    slots: Vec<Slot>,
    /// A file event named a slot (it may hold more results than it is named for).
    evented: bool,
    inbox_wanted: Vec<Slot>,
}

impl Arrivals {
    /// Note a change at `path` (`None`: anything may have changed) in one of `dirs`,
    /// the `results/` of `slots` in order; whether it is worth a wake-up. Noted before
    /// the wake-up is sent, so a wake-up always finds its slot here.
    pub(super) fn note(&self, path: Option<&Path>, dirs: &[std::path::PathBuf], slots: &[Slot]) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = path else {
            seen.all = true;
            return true;
        };
        // A result is published by a link of its final name: the temporary file made
        // before it (a dot-name) says nothing yet.
        if path
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
        {
            return false;
        }
        match dirs.iter().position(|d| Some(d.as_path()) == path.parent()) {
            Some(i) if !seen.slots.contains(&slots[i]) => {
                seen.slots.push(slots[i]);
                seen.evented = true;
            }
            Some(_) => {}
            // A watched directory itself, or a path we cannot place: look everywhere.
            None => seen.all = true,
        }
        true
    }

    /// Note what woken workers said: the bytes read from their pipe (a result in a
    /// slot, a start, an inbox asked back; anything else: look everywhere).
    pub(super) fn note_bytes(&self, bytes: &[u8]) {
        use crate::pool::News;
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for &byte in bytes {
            match crate::pool::news_of(byte) {
                News::Started => {}
                // Once per byte: a second result in one slot is looked for only when
                // its byte says it is there.
                News::ResultIn(slot) => seen.slots.push(slot),
                News::Anything => seen.all = true,
                News::InboxWanted(slot) if !seen.inbox_wanted.contains(&slot) => {
                    seen.inbox_wanted.push(slot)
                }
                News::InboxWanted(_) => {}
            }
        }
    }

    /// What was noted since the last call, forgotten now.
    pub(super) fn take(&self) -> Look {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let slots = std::mem::take(&mut seen.slots);
        let evented = std::mem::take(&mut seen.evented);
        if std::mem::take(&mut seen.all) {
            Look::All
        } else {
            Look::Slots {
                slots,
                told: !evented,
            }
        }
    }

    /// The slots whose workers asked for their inbox back since the last call.
    pub(super) fn take_inbox_wanted(&self) -> Vec<Slot> {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut seen.inbox_wanted)
    }
}

impl ResultsWatch {
    /// Wait until `recheck_at` for a result's name to appear (`wake`) or for `stop`
    /// (`stop_signal`, its descriptor, when read inline). The recheck comes at its time
    /// however busy the pipe or the watch is (`Woke::Recheck` once due, news or not): a
    /// result nobody told of (a `cancel` of a task waiting in an inbox) is found then,
    /// and a dead worker seen.
    pub(super) fn wait(
        &self,
        wake: &Receiver<()>,
        stop: &Receiver<()>,
        stop_signal: Option<&ReadySignal>,
        recheck_at: Instant,
    ) -> Woke {
        let recheck = recheck_at.saturating_duration_since(Instant::now());
        if recheck.is_zero() {
            return Woke::Recheck;
        }
        match self {
            ResultsWatch::Inline(w) => match w.wait_for_wake(wake, stop_signal, recheck) {
                Waited::Wake => Woke::Arrived,
                Waited::Stop => Woke::Stop,
                Waited::Timeout => Woke::Recheck,
            },
            ResultsWatch::Thread(_) => select! {
                recv(wake) -> _ => Woke::Arrived,
                recv(stop) -> _ => Woke::Stop,
                default(recheck) => Woke::Recheck,
            },
        }
    }
}
