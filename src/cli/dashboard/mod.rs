//! `conductor dashboard` (alias `top`): a full-screen view of a root, redrawn when its
//! files change: slots, the selected task's output tail, the queue and why each task
//! waits, totals; select, read a task's whole output, cancel, answer, merge, discard,
//! retry, redo on top, pause.
//!
//! `model` reads the root into a [`model::Snapshot`]; `state` is the screen state and
//! what keys do; `view` draws; `term` takes and gives back the terminal; this file is
//! the event loop that ties them to file events, keys and signals.

pub mod acts;
pub mod model;
mod review_cache;
pub mod state;
pub mod term;
pub mod view;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender};
use ratatui::crossterm::event::{self, Event, KeyEvent};

use crate::cli::usage::CliError;
use crate::fsio::TASK_SIZE_LIMIT;
use crate::tasks::{cancel_task, CancelTask};
use crate::watch::{DirWatcher, Interest, WatchMode};
use crate::{Root, Slot, Task, TaskId};

use model::{output_path, read_tail, Reader, SlotState};
use state::{Action, Mode, Selected, Ui};

use super::args::RootArg;
use super::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Keys: ↑/↓ or j/k select a worker or a queued task; Enter shows its whole output (the live \
log while it runs, else its last task's log; scroll with ↑/↓, PgUp/PgDn, g/G; Esc goes \
back); c cancels the selected running or queued task after a y/n question; a / x approve \
or deny what its agent asks (y/n). On the selected worker's ended task: d shows its diff, \
its row says where its branch stands ([unmerged +12 -3]: unmerged, conflicting, merged, \
discarded or unchanged), m merges its branch (y/n), D discards its worktree and branch \
(y/n), r runs it again under a new id (y/n), R redoes it on top of the current branch in a \
new worktree (y/n, as `conductor retry ID --rebase`); p pauses or resumes that worker, P everything. q or Ctrl-C quits.

The screen is redrawn when the root's files change (file events, or polling where events \
do not work), and every second for the elapsed times. The output pane shows the same \
file `conductor logs N -f` follows. TIME is how long the running task has run (else how \
long the last one ran), COST what the last task cost (claude preset). WAITING is why a \
queued task does not run yet, as `conductor queue` says it. Totals count every result on \
the root; N/h is how many tasks ended in the last hour.")]
pub struct Args {
    #[command(flatten)]
    pub root: RootArg,
}

/// The smallest gap between two re-reads of the root: a chatty agent writes its log many
/// times a second, and one redraw per 100 ms is all a person can read.
const MIN_GAP: Duration = Duration::from_millis(100);
/// Redraw at least this often, for the elapsed times.
const TICK: Duration = Duration::from_secs(1);
/// How much of a log the tail pane reads, and the output view.
const TAIL_BYTES: u64 = 64 * 1024;
const OUTPUT_BYTES: u64 = 4 * 1024 * 1024;
/// Most lines of a task's diff the output view holds.
const DIFF_LINES: usize = 100_000;
/// No slot selected, for the watcher's filter.
const NO_SLOT: u32 = u32::MAX;

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.root.client()?.root().clone();
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!(CliError::Usage(
            "the dashboard needs a terminal; `conductor status`, `conductor queue` and \
             `conductor tasks` print the same for scripts"
                .into()
        ));
    }
    // SIGTERM and SIGHUP (and SIGINT, should it arrive from outside) end us cleanly.
    let stop = super::args::interrupt_channel()?;
    let mut keys = KeyReader::spawn();
    let mut dash = Dashboard::new(root)?;
    let (mut term, guard) = term::enter()?;
    let ran = dash.run(&mut term, &keys.rx, &stop);
    // The reader must be gone before the tty is cooked again: a line the user types
    // after quitting belongs to the shell, and a reader still in `event::read` would
    // take it.
    keys.stop();
    drop(guard);
    ran?;
    Ok(exit::OK)
}

/// A key or a resize from the terminal.
enum Input {
    Key(KeyEvent),
    Resize,
}

/// Terminal events arrive on a thread of their own, so the loop can wait on them, file
/// events and signals at once. The thread polls in short steps so that it can be told
/// to stop before the terminal is given back.
struct KeyReader {
    rx: Receiver<Input>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long the reader waits for input before it looks at its stop flag again.
const KEY_POLL: Duration = Duration::from_millis(50);

/// How long quitting waits for the reader to notice.
const READER_PATIENCE: Duration = Duration::from_millis(500);

impl KeyReader {
    fn spawn() -> KeyReader {
        let (tx, rx) = bounded(16);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                // A hung-up terminal (its window closed, its tmux server killed) reads
                // as endless end-of-file, and is no terminal any more to an ioctl.
                if !std::io::stdin().is_terminal() {
                    return;
                }
                match event::poll(KEY_POLL) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(_) => return,
                }
                let input = match event::read() {
                    Ok(Event::Key(k)) => Input::Key(k),
                    Ok(Event::Resize(..)) => Input::Resize,
                    Ok(_) => continue,
                    Err(_) => return,
                };
                if tx.send(input).is_err() {
                    return;
                }
            }
        });
        KeyReader {
            rx,
            stop,
            thread: Some(thread),
        }
    }

    /// Stop reading the terminal and wait until the thread has — at most
    /// [`READER_PATIENCE`]: on a hung-up terminal crossterm's poll can keep reading
    /// end-of-file without returning, and a dashboard waiting for it spun for ever
    /// after its tmux server was killed.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + READER_PATIENCE;
        // A reader blocked on a full channel wakes when the receiver goes; ours stays,
        // so drain what it may be trying to send.
        while let Some(thread) = self.thread.as_ref() {
            if thread.is_finished() {
                let _ = self.thread.take().map(JoinHandle::join);
                break;
            }
            if std::time::Instant::now() >= deadline {
                // Left behind: the process is about to exit.
                self.thread = None;
                break;
            }
            let _ = self.rx.recv_timeout(KEY_POLL);
        }
    }
}

impl Drop for KeyReader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the output view shows, so that a running task's log can be re-read as it grows.
#[derive(Debug, Clone, PartialEq)]
enum Shown {
    /// The task running on the slot: `output.log` until it ends, then its `tasks/<id>.log`.
    Live {
        slot: Slot,
        task: TaskId,
    },
    Fixed,
}

struct Dashboard {
    root: Root,
    reader: Reader,
    ui: Ui,
    shown: Shown,
    watcher: Option<(Vec<Slot>, DirWatcher)>,
    wake_tx: Sender<()>,
    wake: Receiver<()>,
    /// The selected slot, read by the watcher's filter: only its `output.log` wakes us.
    selected_slot: Arc<AtomicU32>,
}

impl Dashboard {
    fn new(root: Root) -> anyhow::Result<Dashboard> {
        let mut reader = Reader::default();
        let ui = Ui::new(reader.snapshot(&root));
        let (wake_tx, wake) = bounded(1);
        let mut dash = Dashboard {
            root,
            reader,
            ui,
            shown: Shown::Fixed,
            watcher: None,
            wake_tx,
            wake,
            selected_slot: Arc::new(AtomicU32::new(NO_SLOT)),
        };
        dash.after_refresh()?;
        Ok(dash)
    }

    fn run(
        &mut self,
        term: &mut term::Term,
        keys: &Receiver<Input>,
        stop: &Receiver<()>,
    ) -> anyhow::Result<()> {
        let mut dirty = false;
        let mut last = Instant::now();
        self.draw(term)?;
        loop {
            let wait = if dirty {
                MIN_GAP.saturating_sub(last.elapsed())
            } else {
                TICK
            };
            select! {
                recv(keys) -> input => match input {
                    Ok(Input::Key(k)) => match self.ui.on_key(k) {
                        Action::Quit => return Ok(()),
                        Action::Nothing => {}
                        Action::Redraw => { self.follow_selection(); self.load_tail(); self.draw(term)?; }
                        Action::OpenOutput => { self.open_output(); self.draw(term)?; }
                        Action::OpenDiff => { self.open_diff(); self.draw(term)?; }
                        Action::Cancel(id) => { self.cancel(&id); dirty = true; self.draw(term)?; }
                        Action::Answer(id, decision) => { self.answer(&id, decision); dirty = true; self.draw(term)?; }
                        Action::Act(act) => { self.ui.message = Some(acts::run(&self.root, &act)); dirty = true; self.draw(term)?; }
                    },
                    Ok(Input::Resize) => self.draw(term)?,
                    // The terminal is gone: nobody is left to look.
                    Err(_) => return Ok(()),
                },
                recv(self.wake) -> _ => dirty = true,
                recv(stop) -> _ => return Ok(()),
                default(wait) => dirty = true,
            }
            if dirty && last.elapsed() >= MIN_GAP {
                self.refresh()?;
                self.draw(term)?;
                last = Instant::now();
                dirty = false;
            }
        }
    }

    fn draw(&mut self, term: &mut term::Term) -> anyhow::Result<()> {
        term.draw(|f| view::draw(f, &mut self.ui))?;
        Ok(())
    }

    fn refresh(&mut self) -> anyhow::Result<()> {
        let snap = self.reader.snapshot(&self.root);
        self.ui.set_snapshot(snap);
        self.after_refresh()
    }

    /// Keep the watcher on the current slots, the tail on the selection, and a live
    /// output view up to date.
    fn after_refresh(&mut self) -> anyhow::Result<()> {
        let slots: Vec<Slot> = self.ui.snap.slots.iter().map(|r| r.slot).collect();
        if self.watcher.as_ref().map(|(s, _)| s) != Some(&slots) {
            let w = watch(&self.root, &slots, &self.selected_slot, &self.wake_tx)?;
            self.watcher = Some((slots, w));
        }
        self.follow_selection();
        self.load_tail();
        if let (Mode::Output { lines, .. }, Shown::Live { slot, task }) =
            (&mut self.ui.mode, &self.shown)
        {
            let paths = self.root.worker(*slot);
            // At its end the log moves to tasks/<id>.log (and a fresh output.log, soon
            // another task's, takes its place): from then on that is the whole of it.
            let ended = paths.task_log(task);
            if ended.exists() {
                *lines = read_tail(&ended, OUTPUT_BYTES).unwrap_or_default();
                self.shown = Shown::Fixed;
            } else {
                *lines = read_tail(&paths.output_log(), OUTPUT_BYTES).unwrap_or_default();
            }
        }
        Ok(())
    }

    fn follow_selection(&self) {
        let slot = match self.ui.selection() {
            Some(Selected::Slot(r)) => r.slot.0,
            _ => NO_SLOT,
        };
        self.selected_slot.store(slot, Ordering::Relaxed);
    }

    /// The tail pane: the selected slot's log, or a queued task's prompt and reason.
    fn load_tail(&mut self) {
        let (title, lines) = match self.ui.selection() {
            Some(Selected::Slot(r)) => {
                let title = match (r.state, &r.task_id) {
                    (SlotState::Working, _) => format!("worker {} · live output", r.slot),
                    (state, Some(id)) => format!(
                        "worker {} · last task {} ({})",
                        r.slot,
                        super::target::handle_of(id),
                        state.label()
                    ),
                    (_, None) => format!("worker {} · no task yet", r.slot),
                };
                let title = match &r.worktree {
                    Some(w) => format!("{title} · {} (d: diff)", super::tasks::branch_cell(w)),
                    None => title,
                };
                let mut lines = output_path(&self.root, r)
                    .and_then(|p| read_tail(&p, TAIL_BYTES).ok())
                    .unwrap_or_default();
                if let Some(w) = &r.refused {
                    lines.push(format!("warning: {w}"));
                }
                (title, lines)
            }
            Some(Selected::Queued(q)) => {
                let mut lines = vec![format!("waiting: {}", q.waiting), String::new()];
                lines.extend(self.pending_prompt(&q.name));
                let shown =
                    q.id.as_ref()
                        .map_or(q.name.clone(), super::target::handle_of);
                (format!("queued task {shown}"), lines)
            }
            None => ("nothing selected".to_string(), Vec::new()),
        };
        self.ui.tail_title = title;
        self.ui.tail = lines;
    }

    fn pending_prompt(&self, name: &str) -> Vec<String> {
        let path = self.root.queue_pending().join(name);
        match Task::read(&path, TASK_SIZE_LIMIT) {
            Ok(Some(t)) => t.prompt.lines().map(model::printable).collect(),
            _ => vec!["(its file is gone or unreadable)".to_string()],
        }
    }

    fn open_output(&mut self) {
        let (title, shown, lines) = match self.ui.selection() {
            Some(Selected::Slot(r)) => {
                let Some(path) = output_path(&self.root, r) else {
                    self.ui.message = Some(format!("worker {} has run no task yet", r.slot));
                    return;
                };
                let what = r
                    .task_id
                    .as_ref()
                    .map(|i| format!("task {}", super::target::handle_of(i)))
                    .unwrap_or_default();
                let title = format!(
                    "worker {} · {what} · {}",
                    r.slot,
                    r.preview.as_deref().unwrap_or("")
                );
                let lines = read_tail(&path, OUTPUT_BYTES).unwrap_or_default();
                let shown = match (&r.task_id, r.state) {
                    (Some(task), SlotState::Working) => Shown::Live {
                        slot: r.slot,
                        task: task.clone(),
                    },
                    _ => Shown::Fixed,
                };
                (title, shown, lines)
            }
            Some(Selected::Queued(q)) => {
                let name = q.name.clone();
                (
                    format!("queued task {name} (not started)"),
                    Shown::Fixed,
                    self.pending_prompt(&name),
                )
            }
            None => return,
        };
        self.shown = shown;
        self.ui.open_output(title, lines);
    }

    /// The selected slot's last task's change, `git diff --stat --patch BASE...BRANCH`
    /// in its repository, in the output view (scrolled from the top).
    fn open_diff(&mut self) {
        let Some(Selected::Slot(r)) = self.ui.selection() else {
            self.ui.message = Some("select a worker whose last task ran in a worktree".into());
            return;
        };
        let (worktree, id) = (r.worktree.clone(), r.task_id.clone());
        let (working, slot) = (r.state == SlotState::Working, r.slot);
        let (w, id) = match (worktree, id) {
            (Some(w), Some(id)) => (w, id),
            (_, Some(id)) if working => {
                self.ui.message = Some(format!(
                    "task {id} is running: its change is there when it ends"
                ));
                return;
            }
            (_, Some(id)) => {
                self.ui.message = Some(format!(
                    "task {id} ran in no worktree of its own (--worktree): no branch to diff"
                ));
                return;
            }
            (_, None) => {
                self.ui.message = Some(format!("worker {slot} has run no task yet"));
                return;
            }
        };
        if !w.kept {
            self.ui.message = Some(format!(
                "task {id} changed nothing: its branch {} was removed",
                w.branch
            ));
            return;
        }
        let diff = crate::worktree::diff_range(&w).and_then(|range| {
            crate::worktree::git(
                &w.repo,
                &[
                    "diff",
                    "--no-color",
                    "--no-ext-diff",
                    "--stat",
                    "--patch",
                    &range,
                ],
            )
        });
        match diff {
            Ok(text) => {
                let mut lines: Vec<String> = text.lines().map(model::printable).collect();
                lines.truncate(DIFF_LINES);
                let title = format!(
                    "task {id} · {} · {}",
                    super::tasks::branch_cell(&w),
                    w.repo.display()
                );
                self.shown = Shown::Fixed;
                self.ui.open_output(title, lines);
                self.ui.scroll_to_top();
            }
            Err(e) => self.ui.message = Some(format!("cannot show task {id}'s diff: {e}")),
        }
    }

    fn cancel(&mut self, id: &TaskId) {
        self.ui.message = Some(match cancel_task(&self.root, id) {
            Ok(CancelTask::Withdrawn { .. }) => format!("cancelled task {id} (it had not started)"),
            Ok(CancelTask::Requested { slot }) => {
                format!("cancel requested: worker {slot} stops task {id}")
            }
            Ok(CancelTask::NoLiveWorker { slot }) => {
                format!("task {id} is on worker {slot}, but no live worker serves it")
            }
            Ok(CancelTask::Finished { state }) => {
                format!("task {id} had already ended ({})", state.as_str())
            }
            Err(e) => format!("cannot cancel task {id}: {e}"),
        });
    }

    /// `a` / `x` confirmed: answer task `id`'s question.
    fn answer(&mut self, id: &TaskId, decision: crate::approval::Decision) {
        use crate::approval::Decision;
        let reason = (decision == Decision::Deny)
            .then(|| "a person denied this tool call (conductor dashboard)".to_string());
        self.ui.message = Some(
            match crate::approval::answer(&self.root, id, decision, reason, "dashboard") {
                Ok(q) if decision == Decision::Allow => {
                    format!("approved task {id}'s {}", q.summary())
                }
                Ok(q) => format!("denied task {id}'s {}", q.summary()),
                Err(e) => format!("cannot answer: {e}"),
            },
        );
    }
}

/// Watch what the dashboard shows: the slot directories (status, running, inbox,
/// results, and the selected slot's `output.log`), the list of slots, and the queue.
fn watch(
    root: &Root,
    slots: &[Slot],
    selected: &Arc<AtomicU32>,
    wake: &Sender<()>,
) -> anyhow::Result<DirWatcher> {
    let mut dirs = vec![
        root.workers_dir(),
        root.queue_pending(),
        root.queue_results(),
    ];
    dirs.extend(slots.iter().map(|s| root.worker(*s).dir));
    dirs.extend(slots.iter().map(|s| root.worker(*s).results_dir()));
    dirs.retain(|d| d.is_dir());
    if dirs.is_empty() {
        dirs.push(root.path().to_path_buf());
    }
    let selected = Arc::clone(selected);
    let interest: Interest = Arc::new(move |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "output.log" {
            let slot = p
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str());
            return slot.and_then(|s| s.parse::<u32>().ok())
                == Some(selected.load(Ordering::Relaxed));
        }
        // Temp files are followed by the rename that matters.
        !name.ends_with(".tmp")
    });
    Ok(DirWatcher::new(
        &dirs,
        WatchMode::Auto,
        interest,
        wake.clone(),
    )?)
}
