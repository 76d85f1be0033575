//! What `conductor run` shows: progress on stderr while it runs, then each result under
//! its prompt, and the totals.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::table::{self, fit_line};
use crate::inspect::{format_took, outcome_label, prompt_preview, PREVIEW_CHARS};
use crate::orchestrator::Progress;
use crate::{Slot, TaskResult};

/// Each result under its prompt: a rule with the prompt's start, a line saying who ran
/// it, how it ended, how long it took and what it cost, then its output.
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
        let mut how = outcome_label(r).to_string();
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
        let mut line = format!("   {}", facts.join(" · "));
        if let Some(e) = &r.error {
            line.push_str(&format!(": {e}"));
        }
        let _ = writeln!(text, "{}", fit_line(&line, width));
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
        let label = outcome_label(r);
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

/// Progress on stderr: live spinners on a terminal, plain lines otherwise.
pub struct Display {
    bars: Option<(MultiProgress, Vec<ProgressBar>, ProgressBar)>,
    slots: Vec<Slot>,
    previews: Vec<String>,
    failed: u64,
    started: Vec<Option<Instant>>,
}

impl Display {
    /// `quiet`: no live display (`--json`), only plain lines when not on a terminal.
    pub fn new(slots: &[Slot], prompts: &[String], quiet: bool) -> Display {
        let total = prompts.len();
        let live = std::io::stderr().is_terminal() && !quiet && table::color(true);
        let bars = live.then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
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
            (multi, per_worker, summary)
        });
        Display {
            bars,
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
    pub fn live(&self) -> Option<MultiProgress> {
        self.bars.as_ref().map(|(m, _, _)| m.clone())
    }

    fn bar(&self, slot: Slot) -> Option<&ProgressBar> {
        let (_, bars, _) = self.bars.as_ref()?;
        self.slots.iter().position(|s| *s == slot).map(|i| &bars[i])
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
                    Some(b) => b.set_message(format!("#{} {preview}", index + 1)),
                    None => eprintln!(
                        "[worker {slot}] #{} started: {preview} (task {id})",
                        index + 1
                    ),
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
                        if let Some(b) = self.bar(slot) {
                            b.set_message("idle");
                        }
                        summary.inc(1);
                        if self.failed > 0 {
                            summary.set_message(format!("({} not ok)", self.failed));
                        }
                    }
                    None => eprintln!(
                        "[worker {slot}] #{} {} in {took}: {}{}",
                        index + 1,
                        outcome_label(result),
                        self.preview(index),
                        result
                            .error
                            .as_deref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    ),
                }
            }
        }
    }

    /// Take the live display off the screen.
    pub fn finish(&mut self) {
        if let Some((multi, bars, summary)) = self.bars.take() {
            for b in bars {
                b.finish_and_clear();
            }
            summary.finish_and_clear();
            hide(&multi);
        }
    }
}

impl Drop for Display {
    /// Whatever way the run ends (an error, a panic), the spinners go with it.
    fn drop(&mut self) {
        self.finish();
    }
}

/// Clear the live display and draw nothing more: later updates go nowhere.
pub fn hide(multi: &MultiProgress) {
    let _ = multi.clear();
    multi.set_draw_target(ProgressDrawTarget::hidden());
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
        assert!(lines[4].contains("INTERRUPTED in 1.5s: why"), "{text}");
        assert_eq!(
            totals(&results),
            "2 task(s): 1 succeeded, 1 failed (1 INTERRUPTED) · $0.0100 · 2 turns"
        );
        let failed = vec![ended(Outcome::Failure, None)];
        assert_eq!(totals(&failed), "1 task(s): 0 succeeded, 1 failed");
    }
}
