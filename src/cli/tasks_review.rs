//! `conductor tasks --review` / `--review-state`: worktree tasks by where their change stands (unmerged, conflicting, merged, discarded, unchanged), read from git.

use crate::review::{self, ReviewState};
use crate::tasks::{ListOptions, TaskSummary};

/// The states `--review` stands for: what is left to merge or discard.
pub const LEFT: [ReviewState; 2] = [ReviewState::Unmerged, ReviewState::Conflicting];

/// Parse one review state for `--review-state`.
pub fn parse(s: &str) -> Result<ReviewState, String> {
    let s = s.trim();
    ReviewState::parse(s).ok_or_else(|| {
        let all: Vec<&str> = ReviewState::ALL.iter().map(|r| r.as_str()).collect();
        format!("{s:?} is no review state (one of: {})", all.join(", "))
    })
}

/// The review states asked for: `--review-state`'s, else [`LEFT`] with `--review`,
/// else none (no filter).
pub fn wanted(review: bool, states: &[ReviewState]) -> Vec<ReviewState> {
    if !states.is_empty() {
        states.to_vec()
    } else if review {
        LEFT.to_vec()
    } else {
        Vec::new()
    }
}

/// The tasks `opts` lists, each worktree task with its review state, only those in
/// the review states asked for (see [`wanted`]).
pub fn list(
    client: &crate::Client,
    opts: &ListOptions,
    review: bool,
    states: &[ReviewState],
) -> crate::Result<Vec<TaskSummary>> {
    let wanted = wanted(review, states);
    // Filtered after listing: the limit counts the tasks that pass.
    let all = ListOptions {
        limit: None,
        ..opts.clone()
    };
    let tasks = client.list_tasks(if wanted.is_empty() { opts } else { &all })?;
    Ok(annotate_and_filter(tasks, &wanted, opts.limit))
}

/// Read each worktree task's review state from git, then keep only the tasks in
/// `wanted` (all when empty), at most `limit` of them.
pub fn annotate_and_filter(
    mut tasks: Vec<TaskSummary>,
    wanted: &[ReviewState],
    limit: Option<usize>,
) -> Vec<TaskSummary> {
    if !wanted.is_empty() {
        tasks.retain(|t| t.worktree.is_some());
    }
    review::annotate(&mut tasks);
    if !wanted.is_empty() {
        tasks.retain(|t| t.review.is_some_and(|r| wanted.contains(&r)));
    }
    if let Some(n) = limit {
        tasks.truncate(n);
    }
    tasks
}

/// The BRANCH cell (`branch`, as `tasks` shows it) with the task's review state and,
/// for an `--until` task, its check: `conductor/t1 +3 -1 in 2 files · unmerged · check
/// passed (2 rounds)`.
pub fn cell(task: &TaskSummary, branch: String) -> String {
    let check = task.until.check.as_ref().map(|c| {
        let rounds = task.until.rounds.unwrap_or(1);
        let verdict = if c.passed { "passed" } else { "failed" };
        let s = if rounds == 1 { "" } else { "s" };
        format!(" · check {verdict} ({rounds} round{s})")
    });
    match (&task.worktree, task.review) {
        (Some(w), Some(r)) if w.kept => format!("{branch} · {r}{}", check.unwrap_or_default()),
        _ => branch,
    }
}
