//! A task's `after` (what must succeed first) and `dir` (where its agent runs): builders and checks.

use std::collections::HashSet;
use std::path::PathBuf;

use super::task::Task;
use super::task_id::TaskId;

/// Most dependencies one task may name: each costs a lookup on every queue scan.
pub const MAX_AFTER: usize = 64;

/// Ids as a person reads them: `a, b, c`.
pub fn id_list(ids: &[TaskId]) -> String {
    ids.iter()
        .map(TaskId::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Task {
    /// Run only after each of `ids` has succeeded (see [`Task::after`]).
    pub fn with_after(mut self, ids: impl IntoIterator<Item = impl Into<TaskId>>) -> Task {
        self.after = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Run the agent in `dir` (see [`Task::dir`]).
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Task {
        self.dir = Some(dir.into());
        self
    }

    /// The part of [`Task::validate`] about `after` and `dir`. Whether the dependencies
    /// exist and the directory is usable is checked where it can be: at submit and by
    /// the worker.
    pub(super) fn validate_after_and_dir(&self) -> Result<(), String> {
        if self.after.len() > MAX_AFTER {
            return Err(format!(
                "after lists {} tasks; at most {MAX_AFTER} are allowed",
                self.after.len()
            ));
        }
        let mut seen = HashSet::new();
        for dep in &self.after {
            dep.validate().map_err(|e| format!("after: {e}"))?;
            let text = dep.to_string();
            if self.id.as_ref().is_some_and(|id| id.to_string() == text) {
                return Err(format!("task {text} cannot wait for itself (after)"));
            }
            if !seen.insert(text) {
                return Err(format!("after names task {dep} twice"));
            }
        }
        match &self.dir {
            Some(d) if !d.is_absolute() => Err(format!(
                "dir {} is not an absolute path (the worker would not know what it is \
                 relative to)",
                d.display()
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_and_dir_are_checked_and_round_trip() {
        let t = Task::new("p")
            .with_id("c")
            .with_after(["a", "b"])
            .with_dir("/srv/project");
        t.validate().unwrap();
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["after"], serde_json::json!(["a", "b"]));
        assert_eq!(json["dir"], "/srv/project");
        let back: Task = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        let plain = serde_json::to_value(Task::new("p")).unwrap();
        assert!(plain.get("after").is_none() && plain.get("dir").is_none());

        let bad = |t: Task| t.validate().unwrap_err();
        assert!(bad(Task::new("p").with_id("a").with_after(["a"])).contains("itself"));
        assert!(bad(Task::new("p").with_after(["a", "a"])).contains("twice"));
        assert!(bad(Task::new("p").with_after(["../x"])).starts_with("after: "));
        assert!(bad(Task::new("p").with_dir("rel/dir")).contains("not an absolute path"));
        let many: Vec<TaskId> = (0..=MAX_AFTER)
            .map(|i| TaskId::Text(format!("t{i}")))
            .collect();
        assert!(bad(Task::new("p").with_after(many)).contains("at most"));
    }
}
