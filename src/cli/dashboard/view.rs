//! Drawing the dashboard with ratatui widgets: header with totals, slots, output tail,
//! queue with reasons, key line; or one task's whole output. No colours (bold and
//! reverse only), so it reads the same with `NO_COLOR` and on any palette.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::model::{QueueRow, SlotRow, SlotState, Snapshot, Totals};
use super::state::{Mode, Ui};
use crate::text::{fit, format_age};

/// Queue rows shown before the list scrolls.
const QUEUE_ROWS: usize = 4;
/// Width of the queue's WAITING column.
const WAIT_WIDTH: usize = 30;

/// (80 columns hold it: `?` shows the rest — a, x, D, r, R, p, P.)
const KEYS: &str = "↑↓/jk select · Enter output · d diff · m merge · c cancel · ? keys · q quit";

/// What `?` shows: every key, by mode.
const HELP: [&str; 21] = [
    "In the list",
    "  ↑ ↓  j k     select a worker or a queued task",
    "  g G  Home End  the first / the last",
    "  Enter        the selected task's whole output",
    "  d            its change: git diff of a --worktree task's branch",
    "  c            cancel the selected running or queued task (y/n)",
    "  a            approve what the selected task's agent asks (y/n)",
    "  x            deny it (y/n): the agent is told a person denied it",
    "  m            merge the worker's ended --worktree task (y/n)",
    "  D            discard its worktree and branch (y/n)",
    "  r            run the worker's ended task again, new id (y/n)",
    "  R            redo it on top of the current branch (y/n)",
    "  p            pause the selected worker, or resume it",
    "  P            pause everything, or resume it",
    "  ?            these keys",
    "  q  Esc  Ctrl-C  quit",
    "In the output",
    "  ↑ ↓  j k     scroll a line",
    "  PgUp PgDn  b Space  scroll a page",
    "  g G          top / end (follows new output)",
    "  Esc  q       back to the list",
];

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

fn reversed() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

/// Draw the whole screen. Records in `ui` how far the output view can scroll.
pub fn draw(frame: &mut Frame<'_>, ui: &mut Ui) {
    let area = frame.area();
    let [body, footer] = Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(area);
    if let Mode::Output { .. } = ui.mode {
        draw_output(frame, body, ui);
    } else {
        draw_list(frame, body, ui);
    }
    let line = match (&ui.mode, &ui.message) {
        (Mode::Confirm { what, .. }, _) => Line::styled(
            fit(&format!("Cancel task {what}? y/n"), width(area)),
            reversed(),
        ),
        (Mode::ConfirmAnswer { what, decision, .. }, _) => {
            let verb = match decision {
                crate::approval::Decision::Allow => "Approve",
                crate::approval::Decision::Deny => "Deny",
            };
            Line::styled(
                fit(&format!("{verb} task {what}? y/n"), width(area)),
                reversed(),
            )
        }
        (Mode::ConfirmAct { what, .. }, _) => {
            Line::styled(fit(&format!("{what} y/n"), width(area)), reversed())
        }
        (Mode::Output { .. }, _) => Line::raw(fit(
            "↑↓/jk scroll · PgUp/PgDn · g/G top/end · Esc back",
            width(area),
        )),
        // The answer first, the keys still after it.
        // (A paragraph cuts what does not fit at the edge.)
        (_, Some(m)) => Line::from(vec![
            Span::styled(fit(m, width(area)), bold()),
            Span::raw(" · ? keys · q quit"),
        ]),
        // Files that could not be read are worth more than the keys (in --help too).
        _ => match ui.snap.problems.first() {
            Some(p) => {
                let more = ui.snap.problems.len() - 1;
                let more = if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                };
                Line::styled(fit(&format!("! {p}{more}"), width(area)), bold())
            }
            None => match asking(ui) {
                Some(asks) => Line::styled(
                    fit(
                        &format!("needs approval: {asks} · a approve · x deny"),
                        width(area),
                    ),
                    bold(),
                ),
                None => Line::raw(fit(KEYS, width(area))),
            },
        },
    };
    frame.render_widget(Paragraph::new(line), footer);
    if ui.help {
        draw_help(frame, body);
    }
}

/// What the selected task's agent asks a person to allow, if it asks.
fn asking(ui: &Ui) -> Option<&str> {
    match ui.selection()? {
        super::state::Selected::Slot(r) => r.approval.as_deref(),
        _ => None,
    }
}

/// The keys, in a box over the middle of the screen (any key closes it).
fn draw_help(frame: &mut Frame<'_>, area: Rect) {
    let w = HELP.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u16 + 4;
    let h = HELP.len() as u16 + 2;
    let box_area = Rect {
        x: area.x + area.width.saturating_sub(w) / 2,
        y: area.y + area.height.saturating_sub(h) / 2,
        width: w.min(area.width),
        height: h.min(area.height),
    };
    let inner = width(box_area).saturating_sub(2);
    let lines: Vec<Line> = HELP.iter().map(|l| Line::raw(fit(l, inner))).collect();
    frame.render_widget(ratatui::widgets::Clear, box_area);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" keys (any key closes) ")),
        box_area,
    );
}

fn width(r: Rect) -> usize {
    r.width as usize
}

fn draw_list(frame: &mut Frame<'_>, area: Rect, ui: &Ui) {
    let snap = &ui.snap;
    let h = area.height as usize;
    // Slots get up to two fifths of the screen, the queue up to QUEUE_ROWS rows, the
    // output tail what is left (at least 3 lines).
    let slot_rows = snap
        .slots
        .len()
        .clamp(1, (h * 2 / 5).saturating_sub(3).max(1));
    // The queue grows with the screen: up to a third of it (at least QUEUE_ROWS rows).
    let queue_rows = snap.queue.len().clamp(1, QUEUE_ROWS.max(h / 3));
    let [head, slots, tail, queue] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(slot_rows as u16 + 3),
        Constraint::Min(3),
        Constraint::Length(queue_rows as u16 + 2),
    ])
    .areas(area);
    draw_header(frame, head, snap);
    let n = snap.slots.len();
    let slot_sel = (ui.selected < n).then_some(ui.selected);
    let queue_sel = (ui.selected >= n).then(|| ui.selected - n);
    draw_slots(frame, slots, &snap.slots, slot_sel);
    draw_tail(frame, tail, ui);
    draw_queue(frame, queue, &snap.queue, queue_sel);
}

fn totals_text(t: &Totals, pending: usize) -> String {
    let mut s = format!("done {} · failed {}", t.done, t.failed);
    if t.cancelled > 0 {
        s.push_str(&format!(" · cancelled {}", t.cancelled));
    }
    if t.cost_usd > 0.0 {
        s.push_str(&format!(" · {}", cost(Some(t.cost_usd))));
    }
    s.push_str(&format!(" · {}/h · {pending} queued ", t.last_hour));
    s
}

fn draw_header(frame: &mut Frame<'_>, area: Rect, snap: &Snapshot) {
    // A space before the totals keeps them apart from a cut root path.
    let totals = format!(" {}", totals_text(&snap.totals, snap.queue.len()));
    let right = (totals.chars().count() as u16).min(area.width);
    let [left, right_area] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(right)]).areas(area);
    // A cut root keeps its end, the part that tells roots apart (not `/tmp…`).
    let lead = " conductor · ";
    let room = width(left).saturating_sub(lead.chars().count());
    let title = format!("{lead}{}", fit_end(&snap.root.display().to_string(), room));
    frame.render_widget(
        Paragraph::new(Line::styled(fit(&title, width(left)), bold())),
        left,
    );
    frame.render_widget(Paragraph::new(Line::raw(totals)), right_area);
}

/// `text` cut at its start to `max` characters, `…` marking the cut.
fn fit_end(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let tail: String = text.chars().skip(n - (max - 1)).collect();
    format!("…{tail}")
}

fn elapsed(d: Option<std::time::Duration>) -> String {
    d.map(|d| {
        let s = d.as_secs();
        if s < 3600 {
            format!("{}:{:02}", s / 60, s % 60)
        } else {
            format_age(d)
        }
    })
    .unwrap_or_else(|| "-".into())
}

/// A cost in dollars, to four decimals as everywhere else (`status`, `tasks`, `run`):
/// a short task costs a fraction of a cent.
fn cost(c: Option<f64>) -> String {
    match c {
        Some(c) => format!("${c:.4}"),
        None => "-".into(),
    }
}

fn slot_cells(r: &SlotRow, task_width: usize) -> Row<'static> {
    let mut task = match (&r.preview, &r.task_id) {
        (Some(p), _) => p.clone(),
        (None, Some(id)) => id.to_string(),
        (None, None) => String::new(),
    };
    match (r.worktree.as_ref().filter(|w| w.kept), r.review) {
        (Some(w), Some(review)) => {
            task = format!("[{review} +{} -{}] {task}", w.insertions, w.deletions)
        }
        (Some(w), None) => task = format!("[+{} -{}] {task}", w.insertions, w.deletions),
        (None, Some(review)) => task = format!("[{review}] {task}"),
        (None, None) => {}
    }
    if r.refused.is_some() {
        task = format!("[refused] {task}");
    }
    if let Some(asks) = &r.approval {
        task = format!("needs approval · {asks}");
    }
    if r.inbox.is_some() {
        task = format!("[+1 in inbox] {task}");
    }
    let state = Cell::from(r.state.label());
    let state = if r.state == SlotState::Working {
        state.style(bold())
    } else {
        state
    };
    Row::new(vec![
        Cell::from(r.slot.to_string()),
        state,
        Cell::from(elapsed(r.elapsed)),
        Cell::from(cost(r.cost)),
        Cell::from(fit(r.agent.as_deref().unwrap_or("-"), 7)),
        Cell::from(fit(&task, task_width)),
    ])
}

fn draw_slots(frame: &mut Frame<'_>, area: Rect, slots: &[SlotRow], selected: Option<usize>) {
    // Marker 2, SLOT 4, STATE 9, TIME 6, COST 7, AGENT 7, five gaps: the rest is the prompt.
    let task_width = width(area).saturating_sub(2 + 2 + 4 + 9 + 6 + 7 + 7 + 5);
    // More than fit: the last row says how many are not shown (unless the selection
    // has scrolled down to them), as in the queue.
    let fit_rows = (area.height as usize).saturating_sub(3);
    let hidden = slots.len().saturating_sub(fit_rows);
    let cut = hidden > 0 && selected.is_none_or(|s| s + 1 < fit_rows);
    let shown = if cut {
        fit_rows.saturating_sub(1)
    } else {
        slots.len()
    };
    let mut rows: Vec<Row> = slots[..shown]
        .iter()
        .map(|r| slot_cells(r, task_width))
        .collect();
    if cut {
        let more = format!("+{} more (↓ to see them)", slots.len() - shown);
        // In the widest column (the narrow ones would cut it).
        let mut cells = vec![Cell::from(""); 5];
        cells.push(Cell::from(more));
        rows.push(Row::new(cells));
    }
    let empty = rows.is_empty();
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(9),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Fill(1),
        ],
    )
    .header(Row::new(["SLOT", "STATE", "TIME", "COST", "AGENT", "TASK"]).style(bold()))
    .row_highlight_style(reversed())
    .highlight_symbol("> ")
    .highlight_spacing(ratatui::widgets::HighlightSpacing::Always)
    .block(Block::bordered().title(" workers "));
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        let inner = Rect {
            y: area.y + 2,
            height: 1,
            ..area.inner(ratatui::layout::Margin::new(2, 0))
        };
        let hint = "no worker slots: `conductor init` makes them";
        frame.render_widget(Paragraph::new(fit(hint, width(inner))), inner);
    }
}

fn draw_tail(frame: &mut Frame<'_>, area: Rect, ui: &Ui) {
    let inner_w = width(area).saturating_sub(2).max(1);
    let inner_h = (area.height as usize).saturating_sub(2);
    let wrapped = wrap(&ui.tail, inner_w);
    let start = wrapped.len().saturating_sub(inner_h);
    let lines: Vec<Line> = wrapped[start..]
        .iter()
        .map(|l| Line::raw(l.clone()))
        .collect();
    let title = fit(&format!(" {} ", ui.tail_title), inner_w);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

fn queue_cells(q: &QueueRow, task_width: usize, wait_width: usize) -> Row<'static> {
    let what = q
        .preview
        .clone()
        .or_else(|| q.id.as_ref().map(|i| i.to_string()))
        .unwrap_or_else(|| q.name.clone());
    let what = match &q.key {
        Some(k) => format!("[{k}] {what}"),
        None => what,
    };
    Row::new(vec![
        Cell::from(q.priority.to_string()),
        Cell::from(fit(&what, task_width)),
        Cell::from(fit(&q.waiting, wait_width)),
    ])
}

fn draw_queue(frame: &mut Frame<'_>, area: Rect, queue: &[QueueRow], selected: Option<usize>) {
    let title = format!(" queue: {} pending ", queue.len());
    let block = Block::bordered().title(title);
    if queue.is_empty() {
        let text = "empty (`conductor submit PROMPT` adds to it)";
        let inner = width(area).saturating_sub(2);
        frame.render_widget(Paragraph::new(fit(text, inner)).block(block), area);
        return;
    }
    // Marker 2, PRI 1, WAITING (as wide as the longest reason, up to WAIT_WIDTH), two
    // gaps: the rest is the prompt.
    let wait_width = queue
        .iter()
        .map(|q| q.waiting.chars().count())
        .max()
        .unwrap_or(0)
        .min(WAIT_WIDTH);
    let task_width = width(area).saturating_sub(2 + 2 + 1 + wait_width + 2);
    // More than fit: the last row says how many are not shown (unless the selection
    // has scrolled down to them).
    let fit_rows = (area.height as usize).saturating_sub(2);
    let hidden = queue.len().saturating_sub(fit_rows);
    let cut = hidden > 0 && selected.is_none_or(|s| s + 1 < fit_rows);
    let shown = if cut {
        fit_rows.saturating_sub(1)
    } else {
        queue.len()
    };
    let mut rows: Vec<Row> = queue[..shown]
        .iter()
        .map(|q| queue_cells(q, task_width, wait_width))
        .collect();
    if cut {
        rows.push(Row::new(vec![
            Cell::from(""),
            Cell::from(format!("+{} more (↓ to see them)", queue.len() - shown)),
            Cell::from(""),
        ]));
    }
    let table = Table::new(
        rows,
        [
            Constraint::Length(1),
            Constraint::Fill(1),
            Constraint::Length(wait_width as u16),
        ],
    )
    .row_highlight_style(reversed())
    .highlight_symbol("> ")
    .highlight_spacing(ratatui::widgets::HighlightSpacing::Always)
    .block(block);
    let mut state = TableState::default().with_selected(selected);
    frame.render_stateful_widget(table, area, &mut state);
}

fn draw_output(frame: &mut Frame<'_>, area: Rect, ui: &mut Ui) {
    let Mode::Output {
        title,
        lines,
        scroll,
    } = &ui.mode
    else {
        return;
    };
    let inner_w = width(area).saturating_sub(2).max(1);
    let page = (area.height as usize).saturating_sub(2).max(1);
    let wrapped = wrap(lines, inner_w);
    let max = wrapped.len().saturating_sub(page);
    let top = scroll.unwrap_or(max).min(max);
    let end = (top + page).min(wrapped.len());
    let shown: Vec<Line> = wrapped[top..end]
        .iter()
        .map(|l| Line::raw(l.clone()))
        .collect();
    let place = if wrapped.is_empty() {
        "no output".to_string()
    } else {
        format!("lines {}-{end} of {}", top + 1, wrapped.len())
    };
    let block = Block::bordered()
        .title(Span::styled(fit(&format!(" {title} "), inner_w), bold()))
        .title_bottom(format!(" {place} "));
    frame.render_widget(Paragraph::new(shown).block(block), area);
    ui.output_max_scroll = max;
    ui.output_page = page;
}

/// `lines` cut into pieces of at most `width` characters (an empty line stays one line).
pub fn wrap(lines: &[String], width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines {
        let chars: Vec<char> = line.chars().collect();
        if chars.is_empty() {
            out.push(String::new());
        }
        for piece in chars.chunks(width.max(1)) {
            out.push(piece.iter().collect());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Slot, TaskId};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use std::time::Duration;

    fn screen(ui: &mut Ui, w: u16, h: u16) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, ui)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect())
            .collect()
    }

    fn sample() -> Snapshot {
        let slot = |n: u32, state, prompt: &str, elapsed: u64| SlotRow {
            slot: Slot(n),
            state,
            task_id: Some(TaskId::parse(&format!("t{n}")).unwrap()),
            preview: Some(prompt.to_string()),
            elapsed: Some(Duration::from_secs(elapsed)),
            cost: (state == SlotState::Done).then_some(0.25),
            agent: match n {
                0 => Some("claude".to_string()),
                1 => Some("codex".to_string()),
                _ => None,
            },
            inbox: None,
            worktree: None,
            refused: None,
            approval: None,
            review: None,
        };
        Snapshot {
            root: "/tmp/root".into(),
            slots: vec![
                slot(
                    0,
                    SlotState::Working,
                    "refactor the parser into modules",
                    62,
                ),
                slot(1, SlotState::Done, "write the changelog", 5),
                slot(2, SlotState::Idle, "", 0),
            ],
            queue: vec![QueueRow {
                id: Some(TaskId::parse("q1").unwrap()),
                name: "q1".into(),
                priority: 5,
                key: Some("repo".into()),
                preview: Some("add tests for the lexer ".repeat(5)),
                waiting: "waiting for t0".into(),
            }],
            totals: Totals {
                done: 3,
                failed: 1,
                cancelled: 0,
                cost_usd: 0.5,
                last_hour: 4,
            },
            problems: vec![],
        }
    }

    #[test]
    fn the_list_fits_80x24_with_prompts_times_costs_tail_and_reasons() {
        let mut ui = Ui::new(sample());
        ui.tail = (1..=30).map(|i| format!("tick {i}")).collect();
        ui.tail_title = "worker 0 · live output".into();
        let lines = screen(&mut ui, 80, 24);
        let all = lines.join("\n");
        for want in [
            "done 3 · failed 1 · $0.5000 · 4/h · 1 queued",
            "> 0    working   1:02   -       claude  refactor",
            "refactor the parser into modules",
            "done      0:05   $0.2500 codex   write the changelog",
            "worker 0 · live output",
            "tick 30",
            "[repo] add tests for the lexer",
            "waiting for t0",
            "q quit",
        ] {
            assert!(all.contains(want), "{want:?} missing from\n{all}");
        }
        assert!(!all.contains("tick 1\n"), "only the tail fits:\n{all}");
        // The long prompt was cut with a mark, not wrapped.
        assert!(all.contains('…'), "{all}");
    }

    #[test]
    fn a_task_that_needs_approval_says_what_it_asks_and_the_keys_that_answer() {
        let mut snap = sample();
        snap.slots[0].approval = Some("Bash: make deploy".into());
        let mut ui = Ui::new(snap);
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(all.contains("needs approval · Bash: make deploy"), "{all}");
        assert!(
            all.contains("needs approval: Bash: make deploy · a approve · x deny"),
            "{all}"
        );
        ui.on_key(ratatui::crossterm::event::KeyEvent::new(
            ratatui::crossterm::event::KeyCode::Char('x'),
            ratatui::crossterm::event::KeyModifiers::NONE,
        ));
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(
            all.contains("Deny task t0's Bash: make deploy? y/n"),
            "{all}"
        );
    }

    #[test]
    fn eight_slots_and_a_long_queue_still_fit_80x24() {
        let mut snap = sample();
        snap.slots = (0..8)
            .map(|n| SlotRow {
                slot: Slot(n),
                ..snap.slots[2].clone()
            })
            .collect();
        snap.queue = vec![snap.queue[0].clone(); 9];
        let mut ui = Ui::new(snap);
        ui.selected = 12;
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(all.contains("queue: 9 pending"), "{all}");
        assert!(all.contains("q quit"), "the key line stays: {all}");
        assert!(
            all.contains("> 5 "),
            "the selected queue row is shown: {all}"
        );
    }

    /// Issue 36: the workers box hid slots without saying so, and the header cut a
    /// long root to `/tmp…`.
    #[test]
    fn hidden_slots_are_counted_and_a_long_root_keeps_its_end() {
        let mut snap = sample();
        snap.slots = (0..12)
            .map(|n| SlotRow {
                slot: Slot(n),
                ..snap.slots[2].clone()
            })
            .collect();
        snap.root = "/tmp/conductor-test-Xq3zP1/a-rather-long-root-name".into();
        let mut ui = Ui::new(snap);
        let all = screen(&mut ui, 80, 24).join("\n");
        let more = all
            .lines()
            .find(|l| l.contains(" more (↓ to see them)"))
            .unwrap_or_else(|| panic!("no +N more row:\n{all}"));
        let shown = (0..12)
            .filter(|n| all.lines().any(|l| l.starts_with(&format!("│  {n} "))))
            .count();
        assert!(
            more.contains(&format!("+{} more", 12 - shown)),
            "{shown} shown:\n{all}"
        );
        let head = all.lines().next().unwrap_or_default();
        assert!(
            head.contains("…") && head.contains("long-root-name "),
            "{head}"
        );
        assert_eq!(fit_end("/tmp/abc", 5), "…/abc");
        assert_eq!(fit_end("/tmp", 5), "/tmp");
    }

    #[test]
    fn the_output_view_scrolls_within_its_lines() {
        let mut ui = Ui::new(sample());
        let lines: Vec<String> = (1..=100).map(|i| format!("line {i}")).collect();
        ui.open_output("task t0".into(), lines);
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(
            all.contains("line 100") && !all.contains("line 78\n"),
            "{all}"
        );
        assert!(all.contains("lines 80-100 of 100"), "{all}");
        assert_eq!(ui.output_max_scroll, 79);
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        ui.on_key(KeyEvent::new(KeyCode::Char('g'), KeyModifiers::NONE));
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(
            all.contains("line 1 ") && all.contains("lines 1-21 of 100"),
            "{all}"
        );
    }

    #[test]
    fn tiny_terminals_draw_without_panicking_and_problems_are_shown() {
        let mut snap = sample();
        snap.problems = vec!["cannot read status.json".into(), "another".into()];
        let mut ui = Ui::new(snap);
        for (w, h) in [(1, 1), (10, 3), (20, 5), (40, 12)] {
            screen(&mut ui, w, h);
        }
        let all = screen(&mut ui, 80, 24).join("\n");
        assert!(all.contains("! cannot read status.json (+1 more)"), "{all}");
        ui.open_output("t".into(), vec!["x".repeat(500)]);
        for (w, h) in [(1, 1), (3, 2), (20, 5)] {
            screen(&mut ui, w, h);
        }
    }

    #[test]
    fn costs_keep_four_decimals_as_everywhere_else() {
        assert_eq!(cost(Some(0.0042)), "$0.0042");
        assert_eq!(cost(Some(0.0123)), "$0.0123");
        assert_eq!(cost(Some(1.5)), "$1.5000");
        assert_eq!(cost(Some(0.0)), "$0.0000");
        assert_eq!(cost(None), "-");
    }

    #[test]
    fn wrap_cuts_long_lines_and_keeps_empty_ones() {
        let got = wrap(&["abcdef".into(), String::new()], 4);
        assert_eq!(got, ["abcd", "ef", ""]);
    }
}
