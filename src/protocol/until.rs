//! A task's `until` loop (`--until CMD`): the check run after each round, and what a result says of it.

use serde::{Deserialize, Serialize};


/// Rounds in all (the first run included) when `until.rounds` is left out.
pub const DEFAULT_ROUNDS: u32 = 3;
/// The most rounds a task may ask for.
pub const MAX_ROUNDS: u32 = 20;
/// The longest check command accepted, in bytes.
pub(super) const MAX_CHECK_BYTES: usize = 4096;

/// `until` in task.json: after its agent ends well, `check` runs (`sh -c`) in the task's
/// worktree (else its directory); while it fails, the same session goes on with the
/// check's output as its next prompt, for at most `rounds` rounds in all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Until {
    /// The check: a shell command (`sh -c`) run in the task's worktree, which passes when it exits 0.
    pub check: String,
    /// Rounds in all, the first included [default: [`DEFAULT_ROUNDS`]].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
}

impl Until {
    /// The bound of rounds.
    pub fn rounds(&self) -> u32 {
        self.rounds.unwrap_or(DEFAULT_ROUNDS)
    }
}

/// What a result says of the `until` loop (flattened into it: `rounds`, `check`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UntilReport {
    /// How many rounds the agent ran (1: the check passed after the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// The check's last verdict (absent: the check never ran, the agent failed first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckVerdict>,
}

/// One run of a task's check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckVerdict {
    /// The command, as the task gave it.
    pub command: String,
    /// Whether it exited 0.
    pub passed: bool,
    /// Its exit code (`None`: killed by a signal, or stopped at its time bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The end of its output (stdout and stderr together).
    #[serde(default)]
    pub output_tail: String,
}

/// `workers/<N>/until.json`: the loop's state of the slot's task in hand, rewritten after
/// each check, so recovery's result of a worker that died between rounds still says
/// how many rounds ran and how the last check went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UntilRecord {
    task_id: super::task_id::TaskId,
    #[serde(flatten)]
    report: UntilReport,
}

fn record_path(slot_dir: &std::path::Path) -> std::path::PathBuf {
    slot_dir.join("until.json")
}

/// Record the loop's state of task `id` in its slot (best effort: a log line if not).
pub(crate) fn write_record(slot_dir: &std::path::Path, id: &super::task_id::TaskId, report: &UntilReport) {
    let rec = UntilRecord {
        task_id: id.clone(),
        report: report.clone(),
    };
    let path = record_path(slot_dir);
    if let Err(e) = crate::fsio::write_json(&path, &rec, crate::fsio::Durability::Durable) {
        tracing::warn!("task {id}: recording its rounds: {e}");
    }
}

/// The loop's state of task `id` its slot recorded, if any.
pub(crate) fn read_record(slot_dir: &std::path::Path, id: &super::task_id::TaskId) -> UntilReport {
    std::fs::read(record_path(slot_dir))
        .ok()
        .and_then(|b| serde_json::from_slice::<UntilRecord>(&b).ok())
        .filter(|r| r.task_id.to_string() == id.to_string())
        .map(|r| r.report)
        .unwrap_or_default()
}

/// Forget the slot's record (its task's result tells of the loop now).
pub(crate) fn forget_record(slot_dir: &std::path::Path) {
    let _ = crate::fsio::remove_file_if_exists(&record_path(slot_dir));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Outcome, Task, TaskId, TaskResult};

    fn with_until(check: &str, rounds: Option<u32>) -> Task {
        let mut t = Task::new("p");
        t.until = Some(Until {
            check: check.into(),
            rounds,
        });
        t
    }

    #[test]
    fn until_needs_a_check_and_rounds_in_range() {
        assert!(with_until("cargo test", None).validate().is_ok());
        assert!(with_until("cargo test", Some(MAX_ROUNDS))
            .validate()
            .is_ok());
        let empty = with_until("  ", None).validate().unwrap_err();
        assert!(empty.contains("until.check is empty"), "{empty}");
        let zero = with_until("true", Some(0)).validate().unwrap_err();
        assert_eq!(zero, "until.rounds 0 is out of range 1-20");
        assert!(with_until("true", Some(MAX_ROUNDS + 1)).validate().is_err());
        assert_eq!(
            with_until("true", None).until.unwrap().rounds(),
            DEFAULT_ROUNDS
        );
    }

    #[test]
    fn a_result_says_rounds_and_check_at_its_top_level_and_reads_back() {
        let mut r = TaskResult::failed(TaskId::from("t"), Outcome::Failure, "x");
        assert!(!serde_json::to_string(&r).unwrap().contains("rounds"));
        r.until = UntilReport {
            rounds: Some(2),
            check: Some(CheckVerdict {
                command: "make".into(),
                passed: true,
                exit_code: Some(0),
                output_tail: "ok".into(),
            }),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["rounds"], 2);
        assert_eq!(v["check"]["exitCode"], 0);
        assert_eq!(v["check"]["outputTail"], "ok");
        let back: TaskResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
