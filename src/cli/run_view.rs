//! What `conductor run` shows: progress on stderr while it runs, then each result under
//! its prompt, and the totals.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::table::{self, fit_line};
use crate::orchestrator::Progress;
use crate::text::{format_took, prompt_preview, PREVIEW_CHARS};
use crate::{Root, Slot, TaskResult};

/// Each result under its prompt: a rule with the prompt's start, a line saying who ran
/// it, how it ended, how long it took and what it cost, why it failed if it did, then
/// its output.
pub fn render_results(prompts: &[String], results: &[TaskResult], width: Option<usize>) -> String {
    let n = results.len();
    let mut text = String::new();
    for (i, r) in results.iter().enumerate() {
        let prompt = prompts
            .get(i)
            .map(|p| prompt_preview(p, PREVIEW_CHARS))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "{}",
            fit_line(&format!("── [{}/{n}] {prompt}", i + 1), width)
        );
        let mut facts = Vec::new();
        if let Some(w) = r.worker {
            facts.push(format!("worker {w}"));
        }
        facts.push(format!("task {}", r.task_id));
        let mut how = r.outcome_label().to_string();
        if let Some(ms) = r.duration_ms {
            how.push_str(&format!(" in {}", format_took(ms)));
        }
        facts.push(how);
        if let Some(c) = r.cost_usd {
            facts.push(format!("${c:.4}"));
        }
        if let Some(t) = r.num_turns {
            facts.push(format!("{t} turns"));
        }
        let line = format!("   {}", facts.join(" · "));
        let _ = writeln!(text, "{}", fit_line(&line, width));
        if let Some(branch) = super::worktrees_repo::branch_line(r) {
            let _ = writeln!(text, "   {branch}");
        }
        // The reason is read whole: on its own line, never cut.
        if let Some(e) = &r.error {
            let _ = writeln!(text, "   {e}");
        }
        if let Some(w) = crate::protocol::denial::warning(&r.denials) {
            let _ = writeln!(text, "   warning: {w}");
        }
        if !r.output.is_empty() {
            text.push_str(&r.output);
            if !r.output.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    text
}

/// `4 task(s): 2 succeeded, 2 failed (1 TIMED OUT, 1 CANCELLED) · $0.0126 · 6 turns`:
/// the summary's start (the caller adds how long and on how many workers).
pub fn totals(results: &[TaskResult]) -> String {
    let failed: Vec<&TaskResult> = results.iter().filter(|r| !r.success).collect();
    let mut line = format!(
        "{} task(s): {} succeeded, {} failed",
        results.len(),
        results.len() - failed.len(),
        failed.len()
    );
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for r in &failed {
        let label = r.outcome_label();
        match kinds.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += 1,
            None => kinds.push((label, 1)),
        }
    }
    // Plain failures need no breakdown; anything else is named as what it was.
    if kinds.iter().any(|(l, _)| *l != "FAILED") {
        let parts: Vec<String> = kinds.iter().map(|(l, n)| format!("{n} {l}")).collect();
        line.push_str(&format!(" ({})", parts.join(", ")));
    }
    let costs: Vec<f64> = results.iter().filter_map(|r| r.cost_usd).collect();
    if !costs.is_empty() {
        line.push_str(&format!(" · ${:.4}", costs.iter().sum::<f64>()));
    }
    let turns: Vec<u64> = results.iter().filter_map(|r| r.num_turns).collect();
    if !turns.is_empty() {
        line.push_str(&format!(" · {} turns", turns.iter().sum::<u64>()));
    }
    line
}

/// The live display's terminal (stderr), with a switch: once `closing`, every line is
/// drawn blank. A spinner's tick racing the final clear then leaves an empty line, not a
/// stale spinner, and the cursor still moves as the display expects.
///
/// indicatif ends each line by padding it to the width it was told, counting on the
/// terminal to wrap at the margin. We tell it a width short of the margin
/// ([`ECHO_ROOM`]), so the padding would leave the cursor mid-row and the next line
/// would start there. Instead each line's padding becomes "clear to the end of the row",
/// and the next line starts on a new row: lines alternate content, padding
/// ([`Rows`] tracks which is which), and the cursor never reaches the margin.
#[derive(Debug)]
struct Screen {
    term: console::Term,
    closing: Arc<AtomicBool>,
    rows: std::sync::Mutex<Rows>,
}

/// Where the drawing is within a frame.
#[derive(Debug, Default)]
struct Rows {
    /// A line's content was written; its padding comes next.
    in_line: bool,
    /// A line ended: the next content starts on the row below.
    ended: bool,
}

/// Columns left free at the right of every line: a full-width line leaves the cursor at
/// the margin, where the `^C` a terminal echoes wraps onto a new line, and the display's
/// clear then starts a line too low and leaves its top line behind.
const ECHO_ROOM: u16 = 3;

/// A running task's prompt, cut short when its agent's activity follows it on the row.
const SHORT_PREVIEW: usize = 24;

impl Screen {
    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cursor moved by itself: whatever row it is on is where the next line goes.
    fn moved(&self) {
        *self.rows() = Rows::default();
    }
}

impl TermLike for Screen {
    fn width(&self) -> u16 {
        self.term.size().1.saturating_sub(ECHO_ROOM).max(1)
    }
    fn height(&self) -> u16 {
        self.term.size().0
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.moved();
        self.term.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.moved();
        self.term.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.term.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.term.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.moved();
        if self.closing.load(Ordering::SeqCst) {
            self.term.clear_line()?;
            return self.term.write_line("");
        }
        self.term.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        if s == "\r" {
            self.moved();
            return self.term.write_str(s);
        }
        let mut rows = self.rows();
        if rows.in_line {
            // The padding: clear the rest of the row instead.
            rows.in_line = false;
            rows.ended = true;
            return self.term.write_str("\x1b[K");
        }
        if rows.ended {
            self.term.write_str("\r\n")?;
        }
        rows.in_line = true;
        rows.ended = false;
        if self.closing.load(Ordering::SeqCst) {
            return self.term.clear_line();
        }
        self.term.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.moved();
        self.term.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.term.flush()
    }
}

/// What an interrupt handler needs to take the live display off the screen ([`hide`]).
#[derive(Clone)]
pub struct Live {
    multi: MultiProgress,
    closing: Arc<AtomicBool>,
}

/// Clear the live display for good: from now on it draws blank lines at most, then
/// nothing.
pub fn hide(live: &Live) {
    live.closing.store(true, Ordering::SeqCst);
    let _ = live.multi.clear();
    live.multi.set_draw_target(ProgressDrawTarget::hidden());
}

/// While the live display runs, Ctrl-C must not make the terminal discard output not
/// yet shown (the default: a tty flushes its output queue when it sends SIGINT): a
/// frame cut short leaves the screen out of step with what the display believes it
/// drew, and a spinner line stays behind. `NOFLSH` is set, and the old mode restored.
struct KeepOutputAtInterrupt(Option<nix::libc::termios>);

impl KeepOutputAtInterrupt {
    fn set() -> KeepOutputAtInterrupt {
        use nix::libc;
        // SAFETY: tcgetattr/tcsetattr on stderr's descriptor with a termios we own.
        unsafe {
            let mut mode: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDERR_FILENO, &mut mode) != 0 {
                return KeepOutputAtInterrupt(None);
            }
            let old = mode;
            mode.c_lflag |= libc::NOFLSH;
            if libc::tcsetattr(libc::STDERR_FILENO, libc::TCSANOW, &mode) != 0 {
                return KeepOutputAtInterrupt(None);
            }
            KeepOutputAtInterrupt(Some(old))
        }
    }

    fn restore(&mut self) {
        if let Some(old) = self.0.take() {
            // SAFETY: as above; `old` is the mode read at `set`.
            unsafe {
                nix::libc::tcsetattr(nix::libc::STDERR_FILENO, nix::libc::TCSANOW, &old);
            }
        }
    }
}

/// The last line of a log worth showing as what its agent is doing now: its text or its
/// latest tool call (`› Bash ls`), not a tool's answer (`‹ …`) or a line of stderr.
pub fn activity(log: &str) -> Option<String> {
    log.lines().rev().find_map(|line| {
        let line: String = line
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let shown = line.trim();
        let skip = shown.is_empty() || line.starts_with("stderr│") || shown.starts_with('‹');
        (!skip).then(|| prompt_preview(shown, PREVIEW_CHARS))
    })
}

/// The end of a live log, at most its last 16 KiB.
fn log_tail(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)))
        .ok()?;
    let mut bytes = Vec::new();
    f.take(16 * 1024).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What each worker's row says: `#3 fix the flaky test` while its task runs (with the
/// agent's activity once there is some), `idle` otherwise. Shared with the thread that
/// follows the workers' live logs ([`follow_activity`]), so a row is only ever set under
/// its lock.
type WorkerRows = Arc<std::sync::Mutex<Vec<Option<(String, String)>>>>;

/// How often the rows pick up what the agents are doing: a display refresh.
const ACTIVITY_EVERY: Duration = Duration::from_millis(200);

/// Until `stop` goes, put each busy worker's latest activity (from its `output.log`) on
/// its row.
fn follow_activity(
    root: Root,
    slots: Vec<Slot>,
    bars: Vec<ProgressBar>,
    rows: WorkerRows,
    stop: crossbeam_channel::Receiver<()>,
) {
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stop.recv_timeout(ACTIVITY_EVERY)
    {
        for (i, slot) in slots.iter().enumerate() {
            let busy = rows.lock().unwrap_or_else(|e| e.into_inner())[i].is_some();
            if !busy {
                continue;
            }
            let doing = log_tail(&root.worker(*slot).output_log())
                .as_deref()
                .and_then(activity);
            let rows = rows.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some((_, short)), Some(doing)) = (&rows[i], doing) {
                bars[i].set_message(format!("{short} {doing}"));
            }
        }
    }
}

/// One plain progress line on stderr in one write: `eprintln!` writes each piece of its
/// format on its own (stderr is unbuffered), ~10 writes a line, two lines a task.
fn say(mut line: String) {
    use std::io::Write;
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Progress on stderr: live spinners on a terminal, plain lines otherwise.
pub struct Display {
    bars: Option<(MultiProgress, Vec<ProgressBar>, ProgressBar)>,
    rows: WorkerRows,
    follower: Option<(crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>)>,
    closing: Arc<AtomicBool>,
    tty_mode: KeepOutputAtInterrupt,
    slots: Vec<Slot>,
    previews: Vec<String>,
    failed: u64,
    started: Vec<Option<Instant>>,
}

impl Display {
    /// `quiet`: no live display (`--json`), only plain lines when not on a terminal.
    /// `root`: where the workers' live logs are, for the agents' activity.
    pub fn new(slots: &[Slot], prompts: &[String], quiet: bool, root: &Root) -> Display {
        let total = prompts.len();
        let live = std::io::stderr().is_terminal() && !quiet && table::color(true);
        let closing = Arc::new(AtomicBool::new(false));
        let screen = Screen {
            term: console::Term::stderr(),
            closing: closing.clone(),
            rows: Default::default(),
        };
        let tty_mode = if live {
            KeepOutputAtInterrupt::set()
        } else {
            KeepOutputAtInterrupt(None)
        };
        let bars = live.then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::term_like_with_hz(
                Box::new(screen),
                20,
            ));
            let style = ProgressStyle::with_template("{spinner} {prefix:>9} {wide_msg}")
                .expect("valid template");
            let per_worker: Vec<ProgressBar> = slots
                .iter()
                .map(|s| {
                    let b = multi.add(
                        ProgressBar::new_spinner()
                            .with_style(style.clone())
                            .with_prefix(format!("worker {s}"))
                            .with_message("idle"),
                    );
                    b.enable_steady_tick(Duration::from_millis(120));
                    b
                })
                .collect();
            let summary = multi.add(
                ProgressBar::new(total as u64).with_style(
                    ProgressStyle::with_template(
                        "[{elapsed_precise}] {bar:30} {pos}/{len} done {msg}",
                    )
                    .expect("valid template"),
                ),
            );
            // Shown from the start (and its clock kept going), not only once a task ends.
            summary.enable_steady_tick(Duration::from_millis(500));
            (multi, per_worker, summary)
        });
        let rows: WorkerRows = Arc::new(std::sync::Mutex::new(vec![None; slots.len()]));
        let follower = bars.as_ref().map(|(_, per_worker, _)| {
            let (tx, rx) = crossbeam_channel::bounded(0);
            let (root, slots, bars, rows) = (
                root.clone(),
                slots.to_vec(),
                per_worker.clone(),
                rows.clone(),
            );
            let handle = std::thread::spawn(move || follow_activity(root, slots, bars, rows, rx));
            (tx, handle)
        });
        Display {
            bars,
            rows,
            follower,
            closing,
            tty_mode,
            slots: slots.to_vec(),
            previews: prompts
                .iter()
                .map(|p| prompt_preview(p, PREVIEW_CHARS))
                .collect(),
            failed: 0,
            started: vec![None; total],
        }
    }

    /// What an interrupt handler hides at once ([`hide`]), so no spinner line is
    /// left on the screen while the run winds down or after it.
    pub fn live(&self) -> Option<Live> {
        self.bars.as_ref().map(|(m, _, _)| Live {
            multi: m.clone(),
            closing: self.closing.clone(),
        })
    }

    fn bar(&self, slot: Slot) -> Option<&ProgressBar> {
        let (_, bars, _) = self.bars.as_ref()?;
        self.slots.iter().position(|s| *s == slot).map(|i| &bars[i])
    }

    /// Set worker `slot`'s row: its task's prompt (full and short), or idle.
    fn set_row(&self, slot: Slot, row: Option<(String, String)>) {
        let Some(i) = self.slots.iter().position(|s| *s == slot) else {
            return;
        };
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = self.bar(slot) {
            b.set_message(
                row.as_ref()
                    .map_or("idle".to_string(), |(full, _)| full.clone()),
            );
        }
        rows[i] = row;
    }

    fn preview(&self, index: usize) -> &str {
        self.previews.get(index).map(String::as_str).unwrap_or("")
    }

    pub fn progress(&mut self, p: Progress<'_>) {
        match p {
            Progress::Started { index, slot, id } => {
                if let Some(s) = self.started.get_mut(index) {
                    *s = Some(Instant::now());
                }
                let preview = self.preview(index).to_string();
                match self.bar(slot) {
                    Some(_) => {
                        let short = prompt_preview(&preview, SHORT_PREVIEW);
                        self.set_row(
                            slot,
                            Some((
                                format!("#{} {preview}", index + 1),
                                format!("#{} {short}", index + 1),
                            )),
                        );
                    }
                    None => say(format!(
                        "[worker {slot}] #{} started: {preview} (task {id})",
                        index + 1
                    )),
                }
            }
            Progress::Finished {
                index,
                slot,
                result,
            } => {
                if !result.success {
                    self.failed += 1;
                }
                let took = self
                    .started
                    .get(index)
                    .copied()
                    .flatten()
                    .map(|t| format_took(t.elapsed().as_millis() as u64))
                    .unwrap_or_else(|| "-".to_string());
                match &self.bars {
                    Some((_, _, summary)) => {
                        self.set_row(slot, None);
                        summary.inc(1);
                        if self.failed > 0 {
                            summary.set_message(format!("({} not ok)", self.failed));
                        }
                    }
                    None => say(format!(
                        "[worker {slot}] #{} {} in {took}: {}{}",
                        index + 1,
                        result.outcome_label(),
                        self.preview(index),
                        result
                            .error
                            .as_deref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    )),
                }
            }
        }
    }

    /// Take the live display off the screen.
    pub fn finish(&mut self) {
        if let Some((stop, handle)) = self.follower.take() {
            drop(stop);
            let _ = handle.join();
        }
        if let Some((multi, bars, summary)) = self.bars.take() {
            for b in bars {
                b.finish_and_clear();
            }
            summary.finish_and_clear();
            hide(&Live {
                multi,
                closing: self.closing.clone(),
            });
        }
        self.tty_mode.restore();
    }
}

impl Drop for Display {
    /// Whatever way the run ends (an error, a panic), the spinners go with it.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, TaskId};

    fn ended(outcome: Outcome, cost: Option<f64>) -> TaskResult {
        let mut r = TaskResult::failed(TaskId::from("t1"), outcome, "why");
        if outcome == Outcome::Success {
            r.success = true;
            r.error = None;
            r.output = "the answer".into();
        }
        r.cost_usd = cost;
        r.num_turns = cost.map(|_| 2);
        r.duration_ms = Some(1500);
        r.worker = Some(0);
        r
    }

    #[test]
    fn results_come_under_their_prompts_named_as_they_ended() {
        let prompts = vec!["fix the\nflaky test".to_string(), "second".to_string()];
        let results = vec![
            ended(Outcome::Success, Some(0.01)),
            ended(Outcome::Interrupted, None),
        ];
        let text = render_results(&prompts, &results, Some(60));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "── [1/2] fix the flaky test", "{text}");
        assert_eq!(
            lines[1], "   worker 0 · task t1 · ok in 1.5s · $0.0100 · 2 turns",
            "{text}"
        );
        assert_eq!(lines[2], "the answer");
        assert_eq!(lines[3], "── [2/2] second");
        assert!(lines[4].ends_with("INTERRUPTED in 1.5s"), "{text}");
        assert_eq!(lines[5], "   why");
        assert_eq!(
            totals(&results),
            "2 task(s): 1 succeeded, 1 failed (1 INTERRUPTED) · $0.0100 · 2 turns"
        );
        let failed = vec![ended(Outcome::Failure, None)];
        assert_eq!(totals(&failed), "1 task(s): 0 succeeded, 1 failed");
    }

    #[test]
    fn a_result_whose_agent_was_refused_says_so_under_its_line() {
        let mut r = ended(Outcome::Success, None);
        r.denials = vec![crate::protocol::Denial {
            tool: "Bash".into(),
            input: "rm x".into(),
            reason: None,
        }];
        let text = render_results(&["p".to_string()], &[r], Some(80));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2], "   warning: the agent was refused 1 tool call: Bash(rm x)",
            "{text}"
        );
    }

    #[test]
    fn the_activity_is_the_agents_latest_text_or_tool_call() {
        let log = "· session s · claude\nI will look.\n› Bash ls -la\n  ‹ total 8 (+3 lines)\nstderr│ warn\n\n";
        assert_eq!(activity(log).as_deref(), Some("› Bash ls -la"));
        assert_eq!(activity("plain\tline\n").as_deref(), Some("plain line"));
        assert_eq!(activity("stderr│ only\n"), None);
        assert_eq!(activity(""), None);
    }
}
