//! The review state of each worker's ended worktree task for the dashboard: read from git at most once per row per refresh, and only again when the branch's head or the repository's `HEAD` moved.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::protocol::{ReviewState, WorktreeChange};

/// How long the heads seen are trusted before git is asked again (the screen refreshes
/// every second: this keeps a row at one cheap `rev-parse` pair per interval).
const RECHECK: Duration = Duration::from_secs(3);

/// What a row's state was computed against: its repository, branch, the branch's head
/// and the repository's `HEAD`.
type Heads = (PathBuf, String, Option<String>, Option<String>);

#[derive(Debug, Default)]
pub struct ReviewCache {
    /// Per branch: the heads last seen, when they were read, and the state they gave.
    seen: HashMap<(PathBuf, String), (Heads, Instant, ReviewState)>,
}

impl ReviewCache {
    /// The review state of `change` (a worktree task's branch), from the cache while
    /// neither head moved.
    pub fn state(&mut self, change: &WorktreeChange) -> ReviewState {
        if !change.kept {
            return ReviewState::Unchanged;
        }
        let branch = (change.repo.clone(), change.branch.clone());
        if let Some((_, read, state)) = self.seen.get(&branch) {
            if read.elapsed() < RECHECK {
                return *state;
            }
        }
        let heads = heads_of(change);
        if let Some((was, read, state)) = self.seen.get_mut(&branch) {
            if *was == heads {
                *read = Instant::now();
                return *state;
            }
        }
        let state = crate::review::state_of(change);
        self.seen.insert(branch, (heads, Instant::now(), state));
        state
    }
}

/// The heads `change`'s state depends on, as git says them now.
fn heads_of(change: &WorktreeChange) -> Heads {
    let (tip, head) = match crate::worktree::Repo::of(&change.repo) {
        Ok(repo) => (
            repo.resolve(&change.branch).ok().flatten(),
            repo.resolve("HEAD").ok().flatten(),
        ),
        Err(_) => (None, None),
    };
    (change.repo.clone(), change.branch.clone(), tip, head)
}
