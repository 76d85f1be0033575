//! One word for each state across every view and filter, checked: the words `status`, `tasks`, `queue`, the dashboard and `--state` use, and no synonym among them.

#[cfg(test)]
mod tests {
    use crate::protocol::ReviewState;
    use crate::tasks::TaskState;
    use crate::WorkerState;

    /// Words a person reads as the same state: a view that uses two of one group (or two
    /// views one each) says one state two ways. `working` is the word: `status.json`'s
    /// and the MCP Tasks specification's.
    const SYNONYMS: &[&[&str]] = &[
        &[
            "working",
            "running",
            "busy",
            "active",
            "in progress",
            "started",
            "claimed",
        ],
        &["queued", "pending", "enqueued", "scheduled"],
        &[
            "done",
            "finished",
            "succeeded",
            "success",
            "completed",
            "ok",
        ],
        &["failed", "error", "errored", "failure"],
        &["cancelled", "canceled", "withdrawn", "aborted", "killed"],
        &["paused", "suspended", "on hold", "stopped"],
        &["timeout", "timed out", "expired"],
        &["no worker", "offline", "unserved", "dead"],
        &["unmerged", "open", "to review", "left"],
        &["unchanged", "empty", "no change"],
        &["discarded", "deleted", "dropped"],
        &["conflicting", "conflict", "conflicted"],
    ];

    /// Every state word a view shows, with the view that shows it.
    fn shown() -> Vec<(&'static str, String)> {
        let mut words = Vec::new();
        for t in TaskState::ALL {
            words.push(("tasks / --state", t.as_str().to_string()));
            let json = serde_json::to_value(t).unwrap();
            words.push(("tasks --json", json.as_str().unwrap().to_string()));
        }
        let slot_states = [
            WorkerState::Idle,
            WorkerState::Working,
            WorkerState::Done,
            WorkerState::Error,
        ];
        for s in slot_states {
            for (rejected, asking) in [(false, false), (true, false), (false, true)] {
                let word = crate::cli::status::slot_word(s, rejected, asking);
                words.push(("status", word));
            }
        }
        words.push(("status / queue", "paused".to_string()));
        for s in crate::cli::dashboard::model::SlotState::ALL {
            words.push(("dashboard", s.label().to_string()));
        }
        for r in ReviewState::ALL {
            words.push(("review", r.as_str().to_string()));
        }
        words
    }

    #[test]
    fn every_view_says_each_state_in_one_word() {
        let shown = shown();
        for group in SYNONYMS {
            let used: Vec<&(&str, String)> = shown
                .iter()
                .filter(|(_, w)| group.contains(&w.as_str()))
                .collect();
            let mut distinct: Vec<&str> = used.iter().map(|(_, w)| w.as_str()).collect();
            distinct.sort();
            distinct.dedup();
            assert!(
                distinct.len() <= 1,
                "one state, several words: {used:?} (pick one, take the others as aliases)"
            );
        }
    }

    #[test]
    fn the_old_words_are_taken_in_filters() {
        assert_eq!("running".parse::<TaskState>(), Ok(TaskState::Running));
        assert_eq!("working".parse::<TaskState>(), Ok(TaskState::Running));
        assert_eq!(
            "needs-approval".parse::<TaskState>(),
            Ok(TaskState::NeedsApproval)
        );
        let err = "runing".parse::<TaskState>().unwrap_err();
        assert!(err.contains("did you mean \"running\""), "{err}");
    }

    /// The word check itself catches a drift (it is no test that cannot fail).
    #[test]
    fn a_synonym_is_caught() {
        let drifted = ["working", "running"];
        let caught = SYNONYMS
            .iter()
            .any(|g| drifted.iter().filter(|w| g.contains(w)).count() > 1);
        assert!(caught);
    }
}
