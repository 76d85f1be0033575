//! The dashboard's screen state and what each key does to it (no terminal, no files).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::model::{SlotRow, Snapshot};
use crate::TaskId;

/// What the screen shows besides the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Slots, output tail, queue.
    List,
    /// One task's whole output; `scroll` is the first line shown, `None` follows the end.
    Output {
        title: String,
        lines: Vec<String>,
        scroll: Option<usize>,
    },
    /// `c` was pressed: cancel `id` on `y`.
    Confirm { id: TaskId, what: String },
    /// `a` or `x` was pressed: answer `id`'s question with `decision` on `y`.
    ConfirmAnswer {
        id: TaskId,
        what: String,
        decision: crate::approval::Decision,
    },
    /// An act key was pressed (merge, discard, retry): do `act` on `y`; `what` is the
    /// question.
    ConfirmAct { act: super::acts::Act, what: String },
}

/// What the event loop must do after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Nothing,
    /// Redraw (the selection or the mode changed).
    Redraw,
    Quit,
    /// Read the selected item's whole output and show it ([`Ui::open_output`]).
    OpenOutput,
    /// Show the selected task's change (a `--worktree` task's `git diff`) in the
    /// output view.
    OpenDiff,
    Cancel(TaskId),
    /// Answer the question task `id`'s agent waits on.
    Answer(TaskId, crate::approval::Decision),
    /// Merge, discard, retry, pause or resume ([`super::acts`]).
    Act(super::acts::Act),
}

/// Which item is selected, kept by identity across snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pick {
    Slot(u32),
    Pending(String),
}

/// The whole screen state.
#[derive(Debug, Clone)]
pub struct Ui {
    pub snap: Snapshot,
    /// Index into the slots followed by the queue.
    pub selected: usize,
    /// The item a key selected (`None`: none yet, the first item is shown).
    pick: Option<Pick>,
    /// The selected slot's output tail, and what it is (live or the last task's).
    pub tail: Vec<String>,
    pub tail_title: String,
    pub mode: Mode,
    /// A one-line answer to the last action (a cancel's outcome, an error).
    pub message: Option<String>,
    /// The keys are shown (`?`), over the view, until the next key.
    pub help: bool,
    /// Set by the view: the largest useful scroll of the output mode at this size.
    pub output_max_scroll: usize,
    /// Set by the view: lines of output one page shows.
    pub output_page: usize,
}

/// The selected item.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Selected<'a> {
    Slot(&'a SlotRow),
    Queued(&'a super::model::QueueRow),
}

impl Ui {
    pub fn new(snap: Snapshot) -> Ui {
        let mut ui = Ui {
            snap: Snapshot::default(),
            selected: 0,
            pick: None,
            tail: Vec::new(),
            tail_title: String::new(),
            mode: Mode::List,
            message: None,
            help: false,
            output_max_scroll: 0,
            output_page: 1,
        };
        ui.set_snapshot(snap);
        ui
    }

    fn items(&self) -> usize {
        self.snap.slots.len() + self.snap.queue.len()
    }

    pub fn selection(&self) -> Option<Selected<'_>> {
        let n = self.snap.slots.len();
        if self.selected < n {
            Some(Selected::Slot(&self.snap.slots[self.selected]))
        } else {
            self.snap.queue.get(self.selected - n).map(Selected::Queued)
        }
    }

    /// Take a new snapshot, keeping the same item selected when it is still there.
    /// Until a key moves it, the selection is the first item, whatever appeared first:
    /// a dashboard opened while its workers start must not stick to the first worker
    /// that happened to be up (worker 1 while worker 0 was still starting).
    pub fn set_snapshot(&mut self, snap: Snapshot) {
        self.snap = snap;
        if self.pick.is_none() {
            self.selected = 0;
            return;
        }
        let found = self.pick.as_ref().and_then(|p| {
            let n = self.snap.slots.len();
            match p {
                Pick::Slot(s) => self.snap.slots.iter().position(|r| r.slot.0 == *s),
                Pick::Pending(name) => self
                    .snap
                    .queue
                    .iter()
                    .position(|q| &q.name == name)
                    .map(|i| i + n),
            }
        });
        self.selected = found.unwrap_or(self.selected.min(self.items().saturating_sub(1)));
        self.remember();
    }

    fn remember(&mut self) {
        self.pick = match self.selection() {
            Some(Selected::Slot(r)) => Some(Pick::Slot(r.slot.0)),
            Some(Selected::Queued(q)) => Some(Pick::Pending(q.name.clone())),
            None => None,
        };
    }

    /// The selected task's id and a few words of it, for the confirmation.
    fn cancel_target(&self) -> Option<(TaskId, String)> {
        let (id, preview) = match self.selection()? {
            Selected::Slot(r) if r.state == super::model::SlotState::Working => {
                (r.task_id.clone()?, r.preview.clone())
            }
            Selected::Slot(_) => return None,
            Selected::Queued(q) => (q.id.clone()?, q.preview.clone()),
        };
        let words = crate::text::prompt_preview(preview.as_deref().unwrap_or(""), 40);
        Some((id.clone(), format!("{id} ({words})")))
    }

    /// `a` / `x`: ask y/n before answering the selected task's question.
    fn ask_answer(&mut self, decision: crate::approval::Decision) -> Action {
        let target = match self.selection() {
            Some(Selected::Slot(r)) => r.approval.clone().zip(r.task_id.clone()),
            _ => None,
        };
        match target {
            Some((asks, id)) => {
                let what = format!("{id}'s {asks}");
                self.mode = Mode::ConfirmAnswer { id, what, decision };
            }
            None => {
                self.message = Some("nothing to answer: select a task that needs approval".into())
            }
        }
        Action::Redraw
    }

    /// Act key `c` ([`super::acts`]) on the selection: the y/n question for it, the act
    /// at once when it asks none, or why there is nothing to do.
    fn act_key(&mut self, c: char) -> Action {
        let row = match self.selection() {
            Some(Selected::Slot(r)) => Some(r),
            _ => None,
        };
        match super::acts::act_for(c, row) {
            Ok(act) => match act.question() {
                Some(what) => {
                    self.mode = Mode::ConfirmAct { act, what };
                    Action::Redraw
                }
                None => Action::Act(act),
            },
            Err(why) => {
                self.message = Some(why);
                Action::Redraw
            }
        }
    }

    /// Show `lines` as the whole output of `title`, following its end.
    pub fn open_output(&mut self, title: String, lines: Vec<String>) {
        self.mode = Mode::Output {
            title,
            lines,
            scroll: None,
        };
    }

    /// Show the output view from its first line (a diff reads from the top).
    pub fn scroll_to_top(&mut self) {
        if let Mode::Output { scroll, .. } = &mut self.mode {
            *scroll = Some(0);
        }
    }

    /// What `key` does.
    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        // Raw mode turns Ctrl-C into a key: it quits, from any mode.
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if self.help {
            // Any key closes the keys, and only that.
            self.help = false;
            return Action::Redraw;
        }
        let asking = matches!(
            self.mode,
            Mode::Confirm { .. } | Mode::ConfirmAnswer { .. } | Mode::ConfirmAct { .. }
        );
        if key.code == KeyCode::Char('?') && !asking {
            self.help = true;
            return Action::Redraw;
        }
        match &mut self.mode {
            Mode::List => self.list_key(key.code),
            Mode::Confirm { id, .. } => {
                let id = id.clone();
                self.mode = Mode::List;
                if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                    Action::Cancel(id)
                } else {
                    self.message = Some(format!("task {id} not cancelled"));
                    Action::Redraw
                }
            }
            Mode::ConfirmAnswer { id, decision, .. } => {
                let (id, decision) = (id.clone(), *decision);
                self.mode = Mode::List;
                if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                    Action::Answer(id, decision)
                } else {
                    self.message = Some(format!("task {id}'s question not answered"));
                    Action::Redraw
                }
            }
            Mode::ConfirmAct { act, .. } => {
                let act = act.clone();
                self.mode = Mode::List;
                if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                    Action::Act(act)
                } else {
                    self.message = Some("nothing done".into());
                    Action::Redraw
                }
            }
            Mode::Output { scroll, .. } => {
                let (max, page) = (self.output_max_scroll, self.output_page.max(1));
                let at = scroll.unwrap_or(max);
                let to = |n: usize| if n >= max { None } else { Some(n) };
                *scroll = match key.code {
                    KeyCode::Esc | KeyCode::Char('q') | KeyCode::Backspace => {
                        self.mode = Mode::List;
                        return Action::Redraw;
                    }
                    KeyCode::Up | KeyCode::Char('k') => to(at.saturating_sub(1)),
                    KeyCode::Down | KeyCode::Char('j') => to(at + 1),
                    KeyCode::PageUp | KeyCode::Char('b') => to(at.saturating_sub(page)),
                    KeyCode::PageDown | KeyCode::Char(' ') => to(at + page),
                    KeyCode::Home | KeyCode::Char('g') => to(0),
                    KeyCode::End | KeyCode::Char('G') => None,
                    _ => return Action::Nothing,
                };
                Action::Redraw
            }
        }
    }

    fn list_key(&mut self, code: KeyCode) -> Action {
        let last = self.items().saturating_sub(1);
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.selected = (self.selected + 1).min(last),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = last,
            KeyCode::Enter => return Action::OpenOutput,
            KeyCode::Char('d') => return Action::OpenDiff,
            KeyCode::Char('a') => return self.ask_answer(crate::approval::Decision::Allow),
            KeyCode::Char('x') => return self.ask_answer(crate::approval::Decision::Deny),
            KeyCode::Char(c) if super::acts::KEYS.contains(&c) => return self.act_key(c),
            KeyCode::Char('c') => {
                match self.cancel_target() {
                    Some((id, what)) => self.mode = Mode::Confirm { id, what },
                    None => {
                        self.message =
                            Some("nothing to cancel: select a running or queued task".into())
                    }
                }
                return Action::Redraw;
            }
            _ => return Action::Nothing,
        }
        self.message = None;
        self.remember();
        Action::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{QueueRow, SlotState};
    use super::*;
    use crate::Slot;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn slot(n: u32, state: SlotState, id: Option<&str>) -> SlotRow {
        SlotRow {
            slot: Slot(n),
            state,
            task_id: id.map(|i| TaskId::parse(i).unwrap()),
            preview: Some(format!("prompt {n}")),
            elapsed: None,
            cost: None,
            agent: None,
            inbox: None,
            worktree: None,
            refused: None,
            approval: None,
            review: None,
        }
    }

    fn queued(name: &str) -> QueueRow {
        QueueRow {
            id: Some(TaskId::parse(name).unwrap()),
            name: name.into(),
            priority: 5,
            key: None,
            preview: Some("later".into()),
            waiting: "no idle worker".into(),
        }
    }

    fn snap(slots: Vec<SlotRow>, queue: Vec<QueueRow>) -> Snapshot {
        Snapshot {
            slots,
            queue,
            ..Snapshot::default()
        }
    }

    #[test]
    fn selection_moves_and_follows_its_item_across_snapshots() {
        let mut ui = Ui::new(snap(
            vec![
                slot(0, SlotState::Idle, None),
                slot(1, SlotState::Idle, None),
            ],
            vec![queued("q1"), queued("q2")],
        ));
        ui.on_key(key(KeyCode::Down));
        ui.on_key(key(KeyCode::Char('j')));
        ui.on_key(key(KeyCode::Char('j')));
        assert!(matches!(ui.selection(), Some(Selected::Queued(q)) if q.name == "q2"));
        assert_eq!(ui.on_key(key(KeyCode::Down)), Action::Redraw);
        assert_eq!(ui.selected, 3, "stays on the last item");
        // q1 starts running: q2 moves up one place and stays selected.
        ui.set_snapshot(snap(
            vec![
                slot(0, SlotState::Idle, None),
                slot(1, SlotState::Idle, None),
            ],
            vec![queued("q2")],
        ));
        assert_eq!(ui.selected, 2);
        // q2 goes too: the selection stays in range.
        ui.set_snapshot(snap(vec![slot(0, SlotState::Idle, None)], vec![]));
        assert_eq!(ui.selected, 0);
        ui.on_key(key(KeyCode::Char('k')));
        assert_eq!(ui.selected, 0);
    }

    #[test]
    fn until_a_key_moves_it_the_selection_is_the_first_worker_whichever_started_first() {
        // Opened while the launch's workers start: none is up, then worker 1, then all.
        let mut ui = Ui::new(snap(vec![], vec![]));
        assert_eq!(ui.selection(), None);
        ui.set_snapshot(snap(vec![slot(1, SlotState::Idle, None)], vec![]));
        ui.set_snapshot(snap(
            vec![
                slot(0, SlotState::Idle, None),
                slot(1, SlotState::Idle, None),
            ],
            vec![],
        ));
        assert!(
            matches!(ui.selection(), Some(Selected::Slot(r)) if r.slot == Slot(0)),
            "{:?}",
            ui.selection()
        );
        // Once chosen, the choice is kept even when a worker appears above it.
        ui.on_key(key(KeyCode::Down));
        ui.set_snapshot(snap(
            vec![
                slot(0, SlotState::Idle, None),
                slot(1, SlotState::Idle, None),
                slot(2, SlotState::Idle, None),
            ],
            vec![],
        ));
        assert!(matches!(ui.selection(), Some(Selected::Slot(r)) if r.slot == Slot(1)));
    }

    #[test]
    fn cancel_asks_first_and_only_for_running_or_queued_tasks() {
        let mut ui = Ui::new(snap(
            vec![
                slot(0, SlotState::Done, Some("old")),
                slot(1, SlotState::Working, Some("t1")),
            ],
            vec![],
        ));
        assert_eq!(ui.on_key(key(KeyCode::Char('c'))), Action::Redraw);
        assert_eq!(ui.mode, Mode::List, "a finished task is not cancelled");
        assert!(ui.message.as_deref().unwrap().contains("nothing to cancel"));
        ui.on_key(key(KeyCode::Down));
        ui.on_key(key(KeyCode::Char('c')));
        assert!(matches!(&ui.mode, Mode::Confirm { what, .. } if what.contains("prompt 1")));
        assert_eq!(ui.on_key(key(KeyCode::Char('n'))), Action::Redraw);
        assert_eq!(ui.mode, Mode::List);
        ui.on_key(key(KeyCode::Char('c')));
        let id = TaskId::parse("t1").unwrap();
        assert_eq!(ui.on_key(key(KeyCode::Char('y'))), Action::Cancel(id));
    }

    #[test]
    fn approve_and_deny_ask_first_and_only_for_a_task_that_needs_approval() {
        use crate::approval::Decision;
        let mut asking = slot(1, SlotState::Working, Some("t1"));
        asking.approval = Some("Bash: make deploy".into());
        let mut ui = Ui::new(snap(
            vec![slot(0, SlotState::Working, Some("t0")), asking],
            vec![],
        ));
        assert_eq!(ui.on_key(key(KeyCode::Char('a'))), Action::Redraw);
        assert_eq!(ui.mode, Mode::List, "t0 asks nothing");
        assert!(ui.message.as_deref().unwrap().contains("nothing to answer"));
        ui.on_key(key(KeyCode::Down));
        ui.on_key(key(KeyCode::Char('x')));
        assert!(
            matches!(&ui.mode, Mode::ConfirmAnswer { what, decision: Decision::Deny, .. }
                if what.contains("Bash: make deploy"))
        );
        assert_eq!(ui.on_key(key(KeyCode::Char('n'))), Action::Redraw);
        assert_eq!(ui.mode, Mode::List);
        ui.on_key(key(KeyCode::Char('a')));
        let id = TaskId::parse("t1").unwrap();
        assert_eq!(
            ui.on_key(key(KeyCode::Char('y'))),
            Action::Answer(id, Decision::Allow)
        );
    }

    #[test]
    fn ctrl_c_quits_from_every_mode_and_esc_leaves_the_output() {
        let mut ui = Ui::new(snap(vec![slot(0, SlotState::Idle, None)], vec![]));
        ui.open_output("out".into(), vec!["a".into(); 100]);
        ui.output_max_scroll = 90;
        ui.output_page = 10;
        assert_eq!(ui.on_key(key(KeyCode::PageUp)), Action::Redraw);
        assert!(matches!(
            ui.mode,
            Mode::Output {
                scroll: Some(80),
                ..
            }
        ));
        ui.on_key(key(KeyCode::Char('G')));
        assert!(matches!(ui.mode, Mode::Output { scroll: None, .. }));
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(ui.on_key(ctrl_c), Action::Quit);
        assert_eq!(ui.on_key(key(KeyCode::Esc)), Action::Redraw);
        assert_eq!(ui.mode, Mode::List);
        assert_eq!(ui.on_key(key(KeyCode::Char('q'))), Action::Quit);
    }
}

#[cfg(test)]
mod act_tests {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::super::acts::Act;
    use super::super::model::{SlotRow, SlotState, Snapshot};
    use super::*;
    use crate::Slot;

    fn ui(state: SlotState) -> Ui {
        let row = SlotRow {
            slot: Slot(3),
            state,
            task_id: Some(TaskId::from("t1")),
            preview: None,
            elapsed: None,
            cost: None,
            agent: None,
            inbox: None,
            worktree: None,
            refused: None,
            approval: None,
            review: None,
        };
        Ui::new(Snapshot {
            slots: vec![row],
            ..Snapshot::default()
        })
    }

    fn press(ui: &mut Ui, c: char) -> Action {
        ui.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    #[test]
    fn acts_that_destroy_or_spend_ask_first_and_anything_but_y_does_nothing() {
        let mut ui = ui(SlotState::Done);
        assert_eq!(press(&mut ui, 'r'), Action::Redraw);
        assert!(
            matches!(&ui.mode, Mode::ConfirmAct { act: Act::Retry(id), what }
            if id.to_string() == "t1" && what == "Run task t1 again under a new id?")
        );
        assert_eq!(press(&mut ui, 'n'), Action::Redraw);
        assert_eq!(ui.mode, Mode::List);
        assert_eq!(ui.message.as_deref(), Some("nothing done"));
        press(&mut ui, 'r');
        assert_eq!(
            press(&mut ui, 'y'),
            Action::Act(Act::Retry(TaskId::from("t1")))
        );
        // Pausing asks nothing.
        assert_eq!(press(&mut ui, 'p'), Action::Act(Act::Pause(Some(Slot(3)))));
        assert_eq!(press(&mut ui, 'P'), Action::Act(Act::Pause(None)));
    }

    #[test]
    fn acts_with_nothing_to_act_on_say_why() {
        let mut ui = ui(SlotState::Done);
        press(&mut ui, 'm');
        assert_eq!(ui.mode, Mode::List);
        let why = ui.message.clone().unwrap();
        assert!(why.contains("ran in no worktree of its own"), "{why}");
        let mut ui = self::ui(SlotState::Working);
        press(&mut ui, 'D');
        let why = ui.message.clone().unwrap();
        assert_eq!(why, "worker 3 has no ended task to review");
        press(&mut ui, 'r');
        assert_eq!(
            ui.message.as_deref(),
            Some("worker 3 has no ended task to retry")
        );
    }
}
