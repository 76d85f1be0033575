//! Which pending task runs next: pending-file names and the run order, as pure functions.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::protocol::{Task, TaskId};

/// A waiting task's effective priority rises by one for every this much waiting, so
/// a low priority is never starved.
pub const AGING_STEP: Duration = Duration::from_secs(60);

pub(crate) const DEFAULT_PRIORITY: u8 = 5;
/// Separates the fields of a pending name; it can appear in neither a key nor an id.
const SEP: char = '~';

/// What a pending file's name says: `<9-priority>~<submit ns, 20 digits>~<key>~<id>.json`,
/// so that names sort by priority, then submit order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingName {
    pub priority: u8,
    /// Nanoseconds since the Unix epoch.
    pub submitted_ns: u64,
    pub key: Option<String>,
    pub id: TaskId,
}

impl PendingName {
    /// The name for `task` (already validated) queued under `id` at `at`.
    pub fn for_task(task: &Task, id: &TaskId, at: SystemTime) -> PendingName {
        let ns = at
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        PendingName {
            priority: task.priority.unwrap_or(DEFAULT_PRIORITY).min(9),
            submitted_ns: ns,
            key: task.key.clone(),
            id: id.clone(),
        }
    }

    pub fn file_name(&self) -> String {
        format!(
            "{}{SEP}{:020}{SEP}{}{SEP}{}.json",
            9 - self.priority.min(9),
            self.submitted_ns,
            self.key.as_deref().unwrap_or(""),
            self.id
        )
    }

    /// The inverse of [`PendingName::file_name`]; `None` for any other name (a file
    /// dropped in by hand).
    pub fn parse(name: &str) -> Option<PendingName> {
        let stem = name.strip_suffix(".json")?;
        let mut parts = stem.splitn(4, SEP);
        let inv = parts.next()?;
        let ns = parts.next()?;
        let key = parts.next()?;
        let id = parts.next()?;
        if inv.len() != 1 || !inv.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if ns.is_empty() || !ns.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let key = match key {
            "" => None,
            k => {
                TaskId::Text(k.to_string()).validate().ok()?;
                Some(k.to_string())
            }
        };
        Some(PendingName {
            priority: 9 - inv.parse::<u8>().ok()?,
            submitted_ns: ns.parse().ok()?,
            key,
            id: TaskId::parse(id).ok()?,
        })
    }

    pub fn submitted_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.submitted_ns)
    }
}

/// A pending entry as its file name describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTask {
    /// The task's id (`None`: the entry's name does not hold a valid one).
    pub id: Option<TaskId>,
    /// The priority it was submitted with (0 most urgent).
    pub priority: u8,
    /// Raised by waiting ([`AGING_STEP`]), at most 9.
    pub effective_priority: u8,
    /// Its key: tasks of one key run one at a time.
    pub key: Option<String>,
    /// When it was submitted.
    pub submitted_at: SystemTime,
    /// The pending entry's file.
    pub path: PathBuf,
    /// Why it is not running yet, when [`super::Queue::pending`] can tell.
    pub waiting: Option<String>,
    /// The tasks it waits for (its file's `after`), filled in by
    /// [`super::Queue::pending`]; a name-only scan leaves it empty.
    pub after: Vec<TaskId>,
}

/// `priority` raised by one per [`AGING_STEP`] waited since `submitted`, at most 9.
pub fn effective(priority: u8, submitted: SystemTime, now: SystemTime) -> u8 {
    let waited = now.duration_since(submitted).unwrap_or_default();
    let raise = (waited.as_secs() / AGING_STEP.as_secs()).min(9) as u8;
    priority.saturating_add(raise).min(9)
}

/// When `t`'s key last had a task start (never: the epoch).
fn served_of(served: &HashMap<String, SystemTime>, t: &PendingTask) -> SystemTime {
    t.key
        .as_ref()
        .and_then(|k| served.get(k).copied())
        .unwrap_or(UNIX_EPOCH)
}

/// The run order: highest effective priority at `now`; among equals the key served
/// least recently; then oldest; then by file name, so the order is total.
fn run_order(
    a: &PendingTask,
    b: &PendingTask,
    served: &HashMap<String, SystemTime>,
    now: SystemTime,
) -> Ordering {
    effective(b.priority, b.submitted_at, now)
        .cmp(&effective(a.priority, a.submitted_at, now))
        .then_with(|| served_of(served, a).cmp(&served_of(served, b)))
        .then_with(|| a.submitted_at.cmp(&b.submitted_at))
        .then_with(|| a.path.cmp(&b.path))
}

/// Sort `tasks` into run order at `now` (and refresh their effective priorities).
pub fn order(tasks: &mut [PendingTask], served: &HashMap<String, SystemTime>, now: SystemTime) {
    for t in tasks.iter_mut() {
        t.effective_priority = effective(t.priority, t.submitted_at, now);
    }
    tasks.sort_by(|a, b| run_order(a, b, served, now));
}

/// Which of `pending` runs next: the first in run order whose key is not busy.
/// `busy_keys` holds keys with a running task (ignore it when keys are not serialized).
pub fn next_to_run(
    pending: &[PendingTask],
    served: &HashMap<String, SystemTime>,
    busy_keys: &HashSet<String>,
    now: SystemTime,
) -> Option<usize> {
    pending
        .iter()
        .enumerate()
        .filter(|(_, t)| t.key.as_ref().is_none_or(|k| !busy_keys.contains(k)))
        .min_by(|(_, a), (_, b)| run_order(a, b, served, now))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(name: &str, priority: u8, key: Option<&str>, submitted: SystemTime) -> PendingTask {
        PendingTask {
            id: Some(TaskId::from(name)),
            priority,
            effective_priority: priority,
            key: key.map(String::from),
            submitted_at: submitted,
            path: PathBuf::from(name),
            waiting: None,
            after: Vec::new(),
        }
    }

    fn name_of(ps: &[PendingTask], i: Option<usize>) -> Option<String> {
        i.map(|i| ps[i].path.display().to_string())
    }

    #[test]
    fn names_sort_by_priority_then_submit_order_and_parse_back() {
        let make = |p, ns, key: Option<&str>, id: &str| PendingName {
            priority: p,
            submitted_ns: ns,
            key: key.map(String::from),
            id: TaskId::from(id),
        };
        let a = make(9, 5, Some("alice"), "t-1");
        let b = make(5, 1, None, "t-2");
        let c = make(5, 2, Some("bob"), "t-3");
        let mut names = vec![c.file_name(), b.file_name(), a.file_name()];
        names.sort();
        assert_eq!(names, vec![a.file_name(), b.file_name(), c.file_name()]);
        assert_eq!(a.file_name(), format!("0~{:020}~alice~t-1.json", 5));
        for n in [a, b, c] {
            assert_eq!(PendingName::parse(&n.file_name()), Some(n));
        }
        for bad in [
            "random.json",
            "0~1~~x",
            "10~1~~x.json",
            "+1~1~~x.json",
            "1~-5~~x.json",
            "1~5~a b~x.json",
            "1~5~~../x.json",
        ] {
            assert_eq!(PendingName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn waiting_raises_priority_up_to_nine() {
        let now = SystemTime::now();
        assert_eq!(effective(5, now, now), 5);
        assert_eq!(effective(5, now - AGING_STEP * 2, now), 7);
        assert_eq!(effective(5, now - AGING_STEP * 100, now), 9);
    }

    #[test]
    fn the_highest_priority_runs_first_unless_its_key_is_busy() {
        let now = SystemTime::now();
        let ps = vec![
            pending("low", 2, None, now),
            pending("high", 8, Some("alice"), now),
            pending("mid", 5, Some("bob"), now),
        ];
        let served = HashMap::new();
        let none = HashSet::new();
        assert_eq!(
            name_of(&ps, next_to_run(&ps, &served, &none, now)).as_deref(),
            Some("high")
        );
        let alice: HashSet<String> = ["alice".to_string()].into();
        assert_eq!(
            name_of(&ps, next_to_run(&ps, &served, &alice, now)).as_deref(),
            Some("mid")
        );
        let both: HashSet<String> = ["alice".to_string(), "bob".to_string()].into();
        assert_eq!(
            name_of(&ps, next_to_run(&ps, &served, &both, now)).as_deref(),
            Some("low")
        );
        assert_eq!(next_to_run(&[], &served, &none, now), None);
    }

    #[test]
    fn an_old_low_priority_task_overtakes_a_fresh_higher_one() {
        let now = SystemTime::now();
        let ps = vec![
            pending("fresh", 6, None, now),
            pending("old", 2, None, now - AGING_STEP * 5),
        ];
        let (served, none) = (HashMap::new(), HashSet::new());
        assert_eq!(
            name_of(&ps, next_to_run(&ps, &served, &none, now)).as_deref(),
            Some("old")
        );
    }

    #[test]
    fn among_equals_the_key_served_least_recently_goes_first_then_the_oldest() {
        let now = SystemTime::now();
        let earlier = now - Duration::from_secs(1);
        let mut ps = vec![
            pending("a1", 5, Some("a"), earlier),
            pending("b1", 5, Some("b"), now),
            pending("a2", 5, Some("a"), now),
        ];
        // Key a ran a moment ago, b never: b goes first though a1 is older.
        let served: HashMap<String, SystemTime> = [("a".to_string(), now)].into();
        order(&mut ps, &served, now);
        let names: Vec<String> = ps.iter().map(|p| p.path.display().to_string()).collect();
        assert_eq!(names, ["b1", "a1", "a2"]);
        let first = next_to_run(&ps, &served, &HashSet::new(), now);
        assert_eq!(name_of(&ps, first).as_deref(), Some("b1"));
    }
}
