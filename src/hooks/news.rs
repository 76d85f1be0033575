//! What happened on a root since a watcher's last look: tasks that finished, questions waiting for a person, budgets spent (`wait --any`).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::SystemTime;

use super::Event;
use crate::layout::{Root, Slot};
use crate::protocol::{parse_rfc3339, TaskResult};

/// One thing worth waking for.
#[derive(Debug, Clone, PartialEq)]
pub enum News {
    /// A task ended on `slot` (its result is out).
    Finished(Slot, Box<TaskResult>),
    /// A task needs approval, or a budget is spent.
    Told(Event),
}

/// What a watcher has seen: each slot's `result.json` (by inode) when it started, the
/// budget marks of today it knew of, the questions it told of.
#[derive(Debug, Default)]
pub struct Seen {
    results: HashMap<u32, (u64, u64)>,
    marks: HashSet<PathBuf>,
    questions: HashSet<String>,
}

fn result_inode(root: &Root, slot: Slot) -> Option<(u64, u64)> {
    let m = std::fs::metadata(root.worker(slot).result()).ok()?;
    Some((m.dev(), m.ino()))
}

impl Seen {
    /// Everything on `root` now counts as seen except waiting questions: a question
    /// asked before the watch began still waits for a person.
    pub fn now(root: &Root) -> Seen {
        let mut seen = Seen::default();
        for slot in root.slots().unwrap_or_default() {
            if let Some(ino) = result_inode(root, slot) {
                seen.results.insert(slot.0, ino);
            }
        }
        seen.marks = super::budget::marks_today(root)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        seen
    }

    /// Only what happened after `t` is news: a slot's result that finished after it
    /// (even before the watch began), a question asked after it, a budget spent after
    /// it. A time that cannot be read counts as before `t`: an unreadable stamp must
    /// not wake a poller again and again.
    pub fn since(root: &Root, t: SystemTime) -> Seen {
        let after = |stamp: Option<&str>| stamp.and_then(parse_rfc3339).is_some_and(|s| s > t);
        let mut seen = Seen::default();
        for slot in root.slots().unwrap_or_default() {
            let Some(ino) = result_inode(root, slot) else {
                continue;
            };
            let r = TaskResult::read(&root.worker(slot).result()).ok().flatten();
            let finished = r.as_ref().and_then(|r| r.finished_at.as_deref());
            if !after(finished.or(r.as_ref().map(|r| r.timestamp.as_str()))) {
                seen.results.insert(slot.0, ino);
            }
        }
        for e in super::approval::waiting(root) {
            if let Event::NeedsApproval {
                question_id,
                asked_at,
                ..
            } = &e
            {
                if !after(Some(asked_at)) {
                    seen.questions.insert(question_id.clone());
                }
            }
        }
        for (path, e) in super::budget::marks_today(root) {
            if let Event::BudgetReached { at, .. } = &e {
                if !after(Some(at)) {
                    seen.marks.insert(path);
                }
            }
        }
        seen
    }

    /// What is new since the last look (each told once), results first.
    pub fn news(&mut self, root: &Root) -> Vec<News> {
        let mut out = Vec::new();
        for slot in root.slots().unwrap_or_default() {
            let Some(ino) = result_inode(root, slot) else {
                continue;
            };
            if self.results.get(&slot.0) == Some(&ino) {
                continue;
            }
            if let Ok(Some(r)) = TaskResult::read(&root.worker(slot).result()) {
                self.results.insert(slot.0, ino);
                out.push(News::Finished(slot, Box::new(r)));
            }
        }
        for e in super::approval::waiting(root) {
            if let Event::NeedsApproval { question_id, .. } = &e {
                if self.questions.insert(question_id.clone()) {
                    out.push(News::Told(e));
                }
            }
        }
        for (path, e) in super::budget::marks_today(root) {
            if self.marks.insert(path) {
                out.push(News::Told(e));
            }
        }
        out
    }

    /// The directories whose changes may bring news (those that exist).
    pub fn dirs(root: &Root) -> Vec<PathBuf> {
        let mut dirs = vec![root.path().join("workers"), root.spend_dir()];
        dirs.extend(
            root.slots()
                .unwrap_or_default()
                .into_iter()
                .map(|s| root.worker(s).dir),
        );
        dirs.retain(|d| d.is_dir());
        dirs
    }
}
