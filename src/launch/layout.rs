//! Where each pane goes: the orchestrator across the top of the first window, workers
//! in a two-column grid below it, and workers beyond what fits in further windows.
//!
//! At 80x24 (a detached session's size) a worker pane must stay about 40 columns wide
//! for its log lines and a few rows tall, so a window holds at most [`PER_WINDOW`]
//! workers: the first window the orchestrator (top half) and workers 0-3 (two rows of
//! two), each further window `workers-K` the next four (two rows of two). With
//! `--dashboard` the dashboard needs the whole screen: it has the first window to
//! itself and every worker is in the windows after it.

use super::problem::Result;
use crate::layout::Slot;

use super::tmux::{exact, Tmux};

/// Workers per window.
pub const PER_WINDOW: usize = 4;

/// What a pane runs until the layout is done and it is respawned with its real command.
pub(super) const PLACEHOLDER: &str = "cat";

/// The slots of each window, in window order: the first window's (possibly none, with
/// the dashboard), then [`PER_WINDOW`] per further window.
pub fn plan(slots: &[Slot], dashboard: bool) -> Vec<Vec<Slot>> {
    let first = if dashboard {
        0
    } else {
        PER_WINDOW.min(slots.len())
    };
    let mut windows = vec![slots[..first].to_vec()];
    windows.extend(slots[first..].chunks(PER_WINDOW).map(<[Slot]>::to_vec));
    windows
}

/// The name of the window at `index` (0-based) after the first: `workers-2`, `workers-3`…
pub fn window_name(index: usize) -> String {
    format!("workers-{}", index + 1)
}

/// `first-last`, or one number.
pub fn slot_range(slots: &[Slot]) -> String {
    match (slots.first(), slots.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}-{b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    }
}

/// Split `pane` (which becomes the first worker's) into a grid of `slots.len()` panes,
/// two per row, rows equally tall; returns them in slot order (row by row, left first).
pub(super) fn grid(tmux: &Tmux, pane: &str, slots: &[Slot]) -> Result<Vec<String>> {
    let rows = slots.len().div_ceil(2);
    let mut row_panes = vec![pane.to_string()];
    for r in 1..rows {
        // Each split takes its share off the row above, so all end up equally tall.
        let percent = 100 * (rows - r) / (rows - r + 1);
        let above = row_panes[r - 1].clone();
        row_panes.push(split(tmux, &above, "-v", percent)?);
    }
    let mut panes = Vec::with_capacity(slots.len());
    for (r, left) in row_panes.into_iter().enumerate() {
        let has_right = 2 * r + 1 < slots.len();
        let right = if has_right {
            Some(split(tmux, &left, "-h", 50)?)
        } else {
            None
        };
        panes.push(left);
        panes.extend(right);
    }
    for (pane, slot) in panes.iter().zip(slots) {
        tmux.run(&["select-pane", "-t", pane, "-T", &format!("worker {slot}")])?;
    }
    Ok(panes)
}

/// Split `target` (`-v` below, `-h` to the right), giving the new pane `percent` of it.
pub(super) fn split(tmux: &Tmux, target: &str, dir_flag: &str, percent: usize) -> Result<String> {
    let percent = percent.to_string();
    let out = tmux.run(&[
        "split-window",
        "-d",
        dir_flag,
        "-p",
        &percent,
        "-t",
        target,
        "-P",
        "-F",
        "#{pane_id}",
        "--",
        PLACEHOLDER,
    ])?;
    Ok(out.trim().to_string())
}

/// A further window named `name` in `session`; its window and (only) pane ids.
pub(super) fn new_window(
    tmux: &Tmux,
    session: &str,
    name: &str,
    dir: &str,
) -> Result<(String, String)> {
    let target = format!("{}:", exact(session));
    let out = tmux.run(&[
        "new-window",
        "-d",
        "-t",
        &target,
        "-n",
        name,
        "-c",
        dir,
        "-P",
        "-F",
        "#{window_id} #{pane_id}",
        "--",
        PLACEHOLDER,
    ])?;
    let mut ids = out.split_whitespace().map(str::to_string);
    match (ids.next(), ids.next()) {
        (Some(w), Some(p)) => Ok((w, p)),
        _ => Err(crate::error::Error::io(
            "read the ids of",
            format!("tmux window {name}"),
            std::io::Error::other(format!("new-window printed {out:?}")),
        )
        .into()),
    }
}

/// The options every window of a session gets: worker panes stay when their worker
/// stops, showing why (`respawn-pane` restarts it), and each pane shows its title.
pub(super) fn window_options(tmux: &Tmux, window: &str) -> Result<()> {
    for (option, value) in [
        ("remain-on-exit", "on"),
        ("pane-border-status", "top"),
        ("pane-border-format", " #{pane_title} "),
    ] {
        tmux.run(&["set-option", "-w", "-t", window, option, value])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(n: u32) -> Vec<Slot> {
        (0..n).map(Slot).collect()
    }

    #[test]
    fn four_workers_share_the_first_window_and_four_each_further_one() {
        assert_eq!(plan(&slots(3), false), vec![slots(3)]);
        let eight = plan(&slots(8), false);
        assert_eq!(eight, vec![slots(4), (4..8).map(Slot).collect()]);
        assert_eq!(plan(&slots(9), false).len(), 3);
        // With the dashboard the first window is its own.
        assert_eq!(plan(&slots(3), true), vec![vec![], slots(3)]);
        assert_eq!(plan(&slots(5), true).len(), 3);
        assert_eq!(slot_range(&eight[1]), "4-7");
        assert_eq!(slot_range(&[Slot(3)]), "3");
        assert_eq!(window_name(1), "workers-2");
    }
}
