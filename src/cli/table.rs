//! Screens that fit: the output width, whether to colour, and tables cut to the width.
//!
//! Every human view (`status`, `queue`, `tasks`, `locks`, `doctor`, `run`) renders its
//! tables through [`Table`] and sizes its free text with [`width`] and [`fit_line`].
//!
//! The width is `COLUMNS` when it is set to a number, else the width of the terminal on
//! stdout, else **unbounded**: output going to a pipe or a file is never cut, so
//! `grep` and scripts see whole cells (set `COLUMNS` to cut it anyway).

use std::io::IsTerminal;

use comfy_table::{ColumnConstraint, ContentArrangement, Width};

/// Columns between two cells.
const GAP: usize = 2;
/// A column that gives way is cut to this width before any column is left out…
const COMFORT: usize = 32;
/// …and no narrower than this (or its header) when nothing is left to leave out.
const MIN_SHRUNK: usize = 16;

/// The width to fit stdout's lines into; `None` when unbounded (see the module doc).
pub fn width() -> Option<usize> {
    width_from(
        std::env::var("COLUMNS").ok().as_deref(),
        std::io::stdout().is_terminal(),
        || terminal_size::terminal_size_of(std::io::stdout()).map(|(w, _)| usize::from(w.0)),
    )
}

/// The width of stderr when it is a terminal (`None` otherwise): for what a command
/// says on stderr, and the worker's log lines, which a terminal would wrap.
pub fn stderr_width() -> Option<usize> {
    // Asked once: a worker logs two lines a task, and whether stderr is a terminal
    // does not change (its width may: that is asked each time).
    static TTY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*TTY.get_or_init(|| std::io::stderr().is_terminal()) {
        return None;
    }
    terminal_size::terminal_size_of(std::io::stderr())
        .map(|(w, _)| usize::from(w.0))
        .filter(|w| *w > 0)
}

/// The rule of [`width`], apart from the process's environment.
fn width_from(
    columns: Option<&str>,
    tty: bool,
    terminal: impl FnOnce() -> Option<usize>,
) -> Option<usize> {
    if let Some(n) = columns.and_then(|c| c.trim().parse::<usize>().ok()) {
        if n > 0 {
            return Some(n);
        }
    }
    if tty {
        return terminal().filter(|w| *w > 0);
    }
    None
}

/// Whether to write colour or other terminal escapes to stderr (`true`) or stdout:
/// only to a terminal, and never when `NO_COLOR` is set to anything non-empty
/// (<https://no-color.org>) or `TERM=dumb`.
pub fn color(stderr: bool) -> bool {
    let tty = if stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    tty && color_allowed(
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

fn color_allowed(no_color: Option<&std::ffi::OsStr>, term: Option<&std::ffi::OsStr>) -> bool {
    no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// `line` cut to `width` characters (`…` marks the cut); unbounded: as it is.
pub fn fit_line(line: &str, width: Option<usize>) -> String {
    match width {
        Some(w) => crate::text::fit(line, w),
        None => line.to_string(),
    }
}

/// What a column does when the table is wider than the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// Always whole (ids of slots, states, short numbers).
    Keep,
    /// Cut first, with `…` (a prompt preview, a reason).
    Shrink,
    /// Left out when the table is too wide and the column is empty (`-` everywhere),
    /// else when cutting is not enough, the rightmost first.
    Drop,
}

/// A plain table (no borders, two spaces between columns, one line per row) with
/// note lines under rows, fitted to a width.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    kinds: Vec<Col>,
    rows: Vec<(Vec<String>, Vec<String>)>,
    wrap: bool,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Col)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            kinds: columns.iter().map(|(_, k)| *k).collect(),
            rows: Vec::new(),
            wrap: false,
        }
    }

    /// Wrap what does not fit over more lines instead of cutting it (for text that
    /// must be read whole, like `doctor`'s fixes). Such a table takes no notes.
    pub fn wrap(&mut self) -> &mut Table {
        self.wrap = true;
        self
    }

    /// Add a row (cells beyond the columns are ignored, missing ones are empty).
    pub fn row(&mut self, cells: Vec<String>) -> &mut Table {
        self.rows.push((cells, Vec::new()));
        self
    }

    /// Add a line printed under the last row, indented (flags, a second detail).
    pub fn note(&mut self, line: String) -> &mut Table {
        debug_assert!(
            !self.wrap,
            "a wrapped table's rows span lines: notes cannot follow them"
        );
        if let Some((_, notes)) = self.rows.last_mut() {
            notes.push(line);
        }
        self
    }

    /// The table as text, every line at most `width` characters (`None`: unbounded).
    pub fn render(&self, width: Option<usize>) -> String {
        let widths = self.layout(width);
        let mut table = comfy_table::Table::new();
        table
            .load_preset(comfy_table::presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_truncation_indicator("…")
            .set_header(self.headers.clone());
        let one_line = |cells: &[String]| {
            let mut row = comfy_table::Row::from(
                (0..self.headers.len())
                    .map(|i| cells.get(i).map(|c| one_line(c)).unwrap_or_default()),
            );
            if !self.wrap {
                row.max_height(1);
            }
            row
        };
        for (cells, _) in &self.rows {
            table.add_row(one_line(cells));
        }
        let last_shown = widths.iter().rposition(Option::is_some);
        for (i, w) in widths.iter().enumerate() {
            let column = table.column_mut(i).expect("a column per header");
            match w {
                None => {
                    column.set_constraint(ColumnConstraint::Hidden);
                }
                Some(w) => {
                    let pad = if Some(i) == last_shown { 0 } else { GAP };
                    column.set_padding((0, pad as u16));
                    column.set_constraint(ColumnConstraint::Absolute(Width::Fixed(
                        (w + pad).min(usize::from(u16::MAX)) as u16,
                    )));
                }
            }
        }
        let mut out = String::new();
        let mut lines = table.lines();
        if let Some(header) = lines.next() {
            push_line(&mut out, &header, width);
        }
        if self.wrap {
            for line in lines {
                push_line(&mut out, &line, width);
            }
            return out;
        }
        for ((_, notes), line) in self.rows.iter().zip(lines) {
            push_line(&mut out, &line, width);
            for n in notes {
                push_line(&mut out, &format!("      {n}"), width);
            }
        }
        out
    }

    /// Each column's width, `None` for a left-out column.
    fn layout(&self, width: Option<usize>) -> Vec<Option<usize>> {
        let natural: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|(cells, _)| cells.get(i))
                    .map(|c| one_line(c).chars().count())
                    .chain([self.headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let Some(limit) = width else {
            return natural.into_iter().map(Some).collect();
        };
        // Too wide: first leave out the columns that may go and say nothing here.
        let mut hidden: Vec<bool> = (0..natural.len())
            .map(|i| {
                total(&natural.iter().map(|w| Some(*w)).collect::<Vec<_>>()) > limit
                    && self.kinds[i] == Col::Drop
                    && self
                        .rows
                        .iter()
                        .all(|(cells, _)| cells.get(i).is_none_or(|c| c.is_empty() || c == "-"))
            })
            .collect();
        loop {
            let widths = self.shrink(&natural, &hidden, limit, COMFORT);
            if total(&widths) <= limit {
                return widths;
            }
            // Cutting was not enough: leave out the rightmost column that may go.
            match (0..natural.len())
                .rev()
                .find(|i| !hidden[*i] && self.kinds[*i] == Col::Drop)
            {
                Some(i) => hidden[i] = true,
                // Nothing left to leave out: cut deeper; what still does not fit is cut
                // at the width when printed.
                None => return self.shrink(&natural, &hidden, limit, MIN_SHRUNK),
            }
        }
    }

    /// The widths with the `Shrink` columns cut (each down to `floor`, or its header) to
    /// fit `limit`.
    fn shrink(
        &self,
        natural: &[usize],
        hidden: &[bool],
        limit: usize,
        floor: usize,
    ) -> Vec<Option<usize>> {
        let mut widths: Vec<Option<usize>> = natural
            .iter()
            .zip(hidden)
            .map(|(w, h)| (!h).then_some(*w))
            .collect();
        let mut over = total(&widths).saturating_sub(limit);
        for (i, w) in widths.iter_mut().enumerate() {
            if over == 0 {
                break;
            }
            if let (Some(w), Col::Shrink) = (w.as_mut(), self.kinds[i]) {
                let floor = floor.max(self.headers[i].chars().count()).min(*w);
                let cut = over.min(*w - floor);
                *w -= cut;
                over -= cut;
            }
        }
        widths
    }
}

/// The width a row of these columns takes.
fn total(widths: &[Option<usize>]) -> usize {
    let shown: Vec<usize> = widths.iter().flatten().copied().collect();
    shown.iter().sum::<usize>() + GAP * shown.len().saturating_sub(1)
}

/// A cell on one line: line breaks and tabs become spaces.
fn one_line(cell: &str) -> String {
    if cell.contains(['\n', '\r', '\t']) {
        cell.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        cell.to_string()
    }
}

fn push_line(out: &mut String, line: &str, width: Option<usize>) {
    out.push_str(&fit_line(line.trim_end(), width));
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new(&[
            ("SLOT", Col::Keep),
            ("STATE", Col::Keep),
            ("PROMPT", Col::Shrink),
            ("AGENT", Col::Drop),
            ("LOCK", Col::Drop),
        ]);
        t.row(vec![
            "0".into(),
            "working".into(),
            "refactor the\nparser so that every error names the file and the line".into(),
            "4242".into(),
            "4240".into(),
        ]);
        t.note("! stale lock: holder pid 4240 is gone".into());
        t.row(vec!["1".into(), "idle".into(), "-".into()]);
        t
    }

    #[test]
    fn unbounded_tables_are_whole_and_aligned() {
        let out = sample().render(None);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[0].starts_with("SLOT  STATE    PROMPT"), "{out}");
        assert!(lines[1].contains("every error names the file and the line  4242   4240"));
        assert!(lines[2].starts_with("      ! stale lock"), "{out}");
        assert!(lines[3].starts_with("1     idle     -"), "{out}");
    }

    #[test]
    fn narrow_tables_cut_the_prompt_then_drop_columns_and_never_exceed_the_width() {
        for width in [20, 40, 60, 80, 200] {
            let out = sample().render(Some(width));
            for line in out.lines() {
                assert!(line.chars().count() <= width, "{width}: {line:?}\n{out}");
            }
            assert_eq!(out.lines().count(), 4, "{out}");
        }
        let at60 = sample().render(Some(60));
        assert!(at60.contains('…'), "{at60}");
        assert!(at60.contains("AGENT"), "{at60}");
        let at30 = sample().render(Some(30));
        assert!(!at30.contains("LOCK"), "{at30}");
    }

    #[test]
    fn width_comes_from_columns_then_the_terminal_else_unbounded() {
        assert_eq!(width_from(Some("60"), false, || Some(100)), Some(60));
        assert_eq!(width_from(Some("x"), true, || Some(100)), Some(100));
        assert_eq!(width_from(None, true, || Some(100)), Some(100));
        assert_eq!(width_from(None, false, || Some(100)), None);
        assert_eq!(width_from(Some("0"), false, || None), None);
    }

    #[test]
    fn no_color_and_dumb_terminals_turn_escapes_off() {
        use std::ffi::OsStr;
        assert!(color_allowed(None, Some(OsStr::new("xterm"))));
        assert!(color_allowed(Some(OsStr::new("")), None));
        assert!(!color_allowed(Some(OsStr::new("1")), None));
        assert!(!color_allowed(None, Some(OsStr::new("dumb"))));
    }
}
