//! The dashboard's data: a snapshot of a root (slots, queue, totals, an output tail)
//! built from its files, with no terminal in sight.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::fsio::TASK_SIZE_LIMIT;
use crate::inspect::{self, SlotReport};
use crate::protocol::{parse_rfc3339, Outcome, Task, TaskId, TaskResult, WorkerState};
use crate::queue::{PendingTask, Queue};
use crate::{Root, Slot};

/// What a slot is doing, as the dashboard names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// No live worker holds the slot's gate.
    NoWorker,
    Idle,
    Working,
    /// Idle; its last task succeeded.
    Done,
    /// Idle; its last task did not succeed.
    Failed,
    /// Idle and paused (`conductor pause`): it takes no new task until resumed.
    Paused,
}

impl SlotState {
    #[cfg(test)]
    pub const ALL: [SlotState; 6] = [
        SlotState::NoWorker,
        SlotState::Idle,
        SlotState::Working,
        SlotState::Done,
        SlotState::Failed,
        SlotState::Paused,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SlotState::NoWorker => "no worker",
            SlotState::Idle => "idle",
            SlotState::Working => "working",
            SlotState::Done => "done",
            SlotState::Failed => "failed",
            SlotState::Paused => "paused",
        }
    }
}

/// One worker slot.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotRow {
    pub slot: Slot,
    pub state: SlotState,
    /// The task it runs, or last ran.
    pub task_id: Option<TaskId>,
    /// That task's prompt, whitespace folded (the view cuts it to fit).
    pub preview: Option<String>,
    /// Run time so far while working, else the last task's run time.
    pub elapsed: Option<Duration>,
    /// What the last task cost (claude preset), when it has ended.
    pub cost: Option<f64>,
    /// The agent preset running that task, or that ran it.
    pub agent: Option<String>,
    /// A task waiting in the slot's inbox.
    pub inbox: Option<TaskId>,
    /// The ended task's branch and diffstat, when it ran in a worktree of its own.
    pub worktree: Option<crate::protocol::WorktreeChange>,
    /// Where that branch stands (unmerged, conflicting, merged, discarded, unchanged).
    pub review: Option<crate::protocol::ReviewState>,
    /// What the ended task's agent was refused, as every view warns of it.
    pub refused: Option<String>,
    /// What the running task's agent asks a person to allow (`Bash: make deploy`):
    /// the slot shows `needs approval` until it is answered (`a` / `x`).
    pub approval: Option<String>,
}

/// One pending queue task.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub id: Option<TaskId>,
    /// The pending file's name (what identifies an entry dropped in by hand).
    pub name: String,
    pub priority: u8,
    pub key: Option<String>,
    pub preview: Option<String>,
    /// Why it does not run yet, in the words of `conductor queue`.
    pub waiting: String,
}

/// Counts over every result on the root.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub done: u32,
    /// Failed, timed out, interrupted or rejected.
    pub failed: u32,
    pub cancelled: u32,
    pub cost_usd: f64,
    /// Tasks that ended within the last hour.
    pub last_hour: u32,
}

/// What one screen shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub root: PathBuf,
    pub slots: Vec<SlotRow>,
    pub queue: Vec<QueueRow>,
    pub totals: Totals,
    /// What could not be read, in words (shown, never fatal).
    pub problems: Vec<String>,
}

/// The facts kept of one result file (results never change once written).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ended {
    outcome: Outcome,
    cost: Option<f64>,
    finished: Option<SystemTime>,
    duration: Option<Duration>,
}

impl Ended {
    fn of(r: &TaskResult) -> Ended {
        let outcome = r.outcome.unwrap_or(if r.success {
            Outcome::Success
        } else {
            Outcome::Failure
        });
        Ended {
            outcome,
            cost: r.cost_usd,
            finished: r.finished_at.as_deref().and_then(parse_rfc3339),
            duration: r.duration_ms.map(Duration::from_millis),
        }
    }
}

/// Builds snapshots, remembering what never changes (results, prompts) between them so
/// that a refresh reads only what is new.
#[derive(Debug, Default)]
pub struct Reader {
    results: HashMap<PathBuf, Ended>,
    prompts: HashMap<PathBuf, String>,
    /// The results directories' mtimes at the last listing, and what it found: while
    /// no directory changed, a refresh lists none of them again.
    listed: Option<(Vec<DirStamp>, Vec<Ended>)>,
    reviews: super::review_cache::ReviewCache,
}

/// A directory and its mtime (`None`: missing).
type DirStamp = (PathBuf, Option<SystemTime>);

/// A directory changed this recently may change again within the same mtime tick
/// (coarse timestamps): it is listed again rather than trusted.
const RACY: Duration = Duration::from_secs(1);

impl Reader {
    /// A snapshot of `root` as it is now.
    pub fn snapshot(&mut self, root: &Root) -> Snapshot {
        let mut problems = Vec::new();
        let reports = inspect::slot_reports(root, None).unwrap_or_else(|e| {
            problems.push(e.to_string());
            Vec::new()
        });
        let paused = crate::queue::pause::Paused::load(root);
        let slots = reports
            .iter()
            .map(|r| {
                let mut row = self.slot_row(root, r);
                if paused.slot(r.slot) && row.state != SlotState::Working {
                    row.state = SlotState::Paused;
                }
                row
            })
            .collect();
        let pending = Queue::new(root.clone()).pending().unwrap_or_else(|e| {
            problems.push(e.to_string());
            Vec::new()
        });
        let queue = pending.iter().map(|p| self.queue_row(p)).collect();
        let totals = self.totals(root, SystemTime::now());
        for r in &reports {
            problems.extend(r.problems.iter().cloned());
        }
        Snapshot {
            root: root.path().to_path_buf(),
            slots,
            queue,
            totals,
            problems,
        }
    }

    fn slot_row(&mut self, root: &Root, r: &SlotReport) -> SlotRow {
        let paths = root.worker(Slot(r.slot));
        let working = r.state == Some(WorkerState::Working);
        let ended = match (&r.task_id, working) {
            (Some(id), false) => self.ended(&paths.result_for(id)),
            _ => None,
        };
        let state = match (r.worker_live, r.state) {
            (false, _) => SlotState::NoWorker,
            (true, Some(WorkerState::Working)) => SlotState::Working,
            (true, _) => match ended.map(|e| e.outcome) {
                Some(Outcome::Success) => SlotState::Done,
                Some(_) => SlotState::Failed,
                None => SlotState::Idle,
            },
        };
        // The prompt: the task in hand, else the record of the last one run.
        let task_file = match (&r.task_id, working) {
            (_, true) => Some(paths.running()),
            (Some(id), false) => Some(paths.task_record(id)),
            (None, false) => None,
        };
        SlotRow {
            slot: Slot(r.slot),
            state,
            task_id: r.task_id.clone(),
            preview: task_file.and_then(|f| self.prompt(&f, working)),
            elapsed: if working {
                r.status_age
            } else {
                ended.and_then(|e| e.duration)
            },
            cost: ended.and_then(|e| e.cost),
            agent: r.agent.clone(),
            inbox: r.inbox.as_ref().and_then(|f| f.task_id.clone()),
            worktree: r.worktree.clone().filter(|_| ended.is_some()),
            review: r
                .worktree
                .as_ref()
                .filter(|_| ended.is_some())
                .map(|w| self.reviews.state(w)),
            refused: crate::protocol::denial::warning(&r.denials).filter(|_| ended.is_some()),
            approval: r.approval.as_ref().map(|q| q.summary()),
        }
    }

    fn queue_row(&mut self, p: &PendingTask) -> QueueRow {
        QueueRow {
            id: p.id.clone(),
            name: p
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            priority: p.effective_priority,
            key: p.key.clone(),
            preview: self.prompt(&p.path, false),
            waiting: p
                .waiting
                .clone()
                .unwrap_or_else(|| "ready: the next idle worker takes it".to_string()),
        }
    }

    /// The folded prompt of the task file at `path`. `running.json` is re-read each
    /// time (a new task replaces it); other task files are immutable and cached.
    fn prompt(&mut self, path: &Path, changes: bool) -> Option<String> {
        if !changes {
            if let Some(p) = self.prompts.get(path) {
                return Some(p.clone());
            }
        }
        let task = Task::read(path, TASK_SIZE_LIMIT).ok()??;
        let folded = crate::text::prompt_preview(&task.prompt, usize::MAX);
        if !changes {
            self.prompts.insert(path.to_path_buf(), folded.clone());
        }
        Some(folded)
    }

    /// The result at `path`, read once.
    fn ended(&mut self, path: &Path) -> Option<Ended> {
        if let Some(e) = self.results.get(path) {
            return Some(*e);
        }
        let r = TaskResult::read(path).ok()??;
        let e = Ended::of(&r);
        self.results.insert(path.to_path_buf(), e);
        Some(e)
    }

    /// Totals over every slot's `results/` (a queue task's result is linked there too,
    /// so each ran task counts once) plus queue tasks cancelled before they ran.
    fn totals(&mut self, root: &Root, now: SystemTime) -> Totals {
        let mut dirs: Vec<PathBuf> = root
            .slots()
            .unwrap_or_default()
            .into_iter()
            .map(|s| root.worker(s).results_dir())
            .collect();
        dirs.push(root.queue_results());
        let stamps: Vec<DirStamp> = dirs
            .iter()
            .map(|d| (d.clone(), fs::metadata(d).and_then(|m| m.modified()).ok()))
            .collect();
        let settled = stamps
            .iter()
            .all(|(_, m)| m.is_none_or(|m| now.duration_since(m).is_ok_and(|ago| ago >= RACY)));
        match &self.listed {
            Some((before, live)) if settled && *before == stamps => {
                return sum(live.iter(), now);
            }
            _ => {}
        }
        let mut seen_ids = std::collections::HashSet::new();
        let mut live = HashMap::new();
        for dir in dirs {
            for name in json_names(&dir) {
                // A queue result is a second link of a slot's: count the id once.
                if !seen_ids.insert(name.clone()) {
                    continue;
                }
                let path = dir.join(&name);
                if let Some(e) = self.ended(&path) {
                    live.insert(path, e);
                }
            }
        }
        // Collected results (gc) no longer count, nor stay cached.
        self.results.retain(|p, _| live.contains_key(p));
        let t = sum(live.values(), now);
        self.listed = Some((stamps, live.into_values().collect()));
        t
    }
}

/// The totals of these ended tasks at `now`.
fn sum<'a>(ended: impl Iterator<Item = &'a Ended>, now: SystemTime) -> Totals {
    let mut t = Totals::default();
    for e in ended {
        match e.outcome {
            Outcome::Success => t.done += 1,
            Outcome::Cancelled => t.cancelled += 1,
            _ => t.failed += 1,
        }
        t.cost_usd += e.cost.unwrap_or(0.0);
        let recent = e
            .finished
            .and_then(|f| now.duration_since(f).ok())
            .is_some_and(|ago| ago <= Duration::from_secs(3600));
        t.last_hour += u32::from(recent);
    }
    t
}

/// The `*.json` names in `dir` (none if it is missing), temp and hidden files left out.
fn json_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
        .collect()
}

/// Which log shows a slot's output: the live `output.log` while it works, else the
/// last task's `tasks/<id>.log`.
pub fn output_path(root: &Root, row: &SlotRow) -> Option<PathBuf> {
    let paths = root.worker(row.slot);
    match (&row.task_id, row.state) {
        (_, SlotState::Working) => Some(paths.output_log()),
        (Some(id), _) => Some(paths.task_log(id)),
        (None, _) => None,
    }
}

/// The last `max_bytes` of the file at `path` as printable lines (a line cut by the
/// start of the window is dropped); none when it is missing.
pub fn read_tail(path: &Path, max_bytes: u64) -> io::Result<Vec<String>> {
    let Some(mut f) = inspect::open_log(path).map_err(io::Error::other)? else {
        return Ok(Vec::new());
    };
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max_bytes);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(max_bytes).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<String> = text.lines().map(printable).collect();
    if start > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    Ok(lines)
}

/// `line` without escape sequences or control characters (an agent's colours must not
/// reach the terminal the dashboard draws on); tabs become spaces.
pub fn printable(line: &str) -> String {
    crate::text::without_escapes(line).replace('\t', "    ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rfc3339;
    use crate::Client;

    fn result(id: &str, outcome: Outcome, cost: Option<f64>, finished: SystemTime) -> String {
        let mut r = serde_json::json!({
            "taskId": id, "output": "", "success": outcome == Outcome::Success,
            "error": null, "timestamp": rfc3339(finished), "outcome": outcome,
            "finishedAt": rfc3339(finished), "durationMs": 1500,
        });
        if let Some(c) = cost {
            r["costUsd"] = c.into();
        }
        r.to_string()
    }

    #[test]
    fn totals_count_each_result_once_and_follow_gc() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("r"));
        let client = Client::new(root.clone());
        client.init_queue().unwrap();
        client.create_worker(Slot(0)).unwrap();
        let now = SystemTime::now();
        let old = now - Duration::from_secs(7200);
        let res = root.worker(Slot(0)).results_dir();
        fs::create_dir_all(&res).unwrap();
        fs::write(
            res.join("a.json"),
            result("a", Outcome::Success, Some(0.25), now),
        )
        .unwrap();
        fs::write(res.join("b.json"), result("b", Outcome::Timeout, None, old)).unwrap();
        // The queue's link of a: not counted twice. A cancelled pending task: counted.
        fs::create_dir_all(root.queue_results()).unwrap();
        fs::hard_link(res.join("a.json"), root.queue_results().join("a.json")).unwrap();
        let c = result("c", Outcome::Cancelled, None, now);
        fs::write(root.queue_results().join("c.json"), c).unwrap();

        let mut reader = Reader::default();
        let t = reader.totals(&root, now);
        assert_eq!((t.done, t.failed, t.cancelled, t.last_hour), (1, 1, 1, 2));
        assert!((t.cost_usd - 0.25).abs() < 1e-9);

        fs::remove_file(res.join("a.json")).unwrap();
        fs::remove_file(root.queue_results().join("a.json")).unwrap();
        let t = reader.totals(&root, now);
        assert_eq!((t.done, t.failed, t.cost_usd), (0, 1, 0.0));

        // Settled directories are not listed again, but a new result changes its
        // directory's mtime, which is seen.
        let later = SystemTime::now() + Duration::from_secs(5);
        assert_eq!(reader.totals(&root, later).failed, 1);
        assert_eq!(reader.totals(&root, later).failed, 1);
        fs::write(res.join("d.json"), result("d", Outcome::Failure, None, now)).unwrap();
        assert_eq!(reader.totals(&root, later).failed, 2);
    }

    #[test]
    fn a_slot_shows_its_running_prompt_then_its_last_result() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("r"));
        let client = Client::new(root.clone());
        client.init_queue().unwrap();
        client.create_worker(Slot(0)).unwrap();
        let w = root.worker(Slot(0));
        let task = Task::new("fix   the\nbug").with_id("t1");
        fs::write(w.running(), serde_json::to_vec(&task).unwrap()).unwrap();
        let mut reader = Reader::default();
        let working = SlotReport {
            state: Some(WorkerState::Working),
            task_id: Some(TaskId::parse("t1").unwrap()),
            worker_live: true,
            status_age: Some(Duration::from_secs(62)),
            ..inspect::slot_report(&root, Slot(0), &inspect::lock_options(&root)).unwrap()
        };
        let row = reader.slot_row(&root, &working);
        assert_eq!(row.state, SlotState::Working);
        assert_eq!(row.preview.as_deref(), Some("fix the bug"));
        assert_eq!(row.elapsed, Some(Duration::from_secs(62)));
        assert_eq!(output_path(&root, &row), Some(w.output_log()));

        // Ended: the record and the result tell the rest.
        fs::create_dir_all(w.tasks_dir()).unwrap();
        fs::rename(w.running(), w.task_record(row.task_id.as_ref().unwrap())).unwrap();
        fs::create_dir_all(w.results_dir()).unwrap();
        let mut r: serde_json::Value = serde_json::from_str(&result(
            "t1",
            Outcome::Failure,
            Some(0.5),
            SystemTime::now(),
        ))
        .unwrap();
        r["denials"] = serde_json::json!([{"tool": "Bash", "input": "rm x"}]);
        fs::write(w.results_dir().join("t1.json"), r.to_string()).unwrap();
        let ended = SlotReport {
            state: Some(WorkerState::Error),
            // As `inspect::slot_report` reads it from the result.
            denials: serde_json::from_value(r["denials"].clone()).unwrap(),
            ..working
        };
        let row = reader.slot_row(&root, &ended);
        assert_eq!(row.state, SlotState::Failed);
        assert_eq!(row.preview.as_deref(), Some("fix the bug"));
        assert_eq!(row.elapsed, Some(Duration::from_millis(1500)));
        assert_eq!(row.cost, Some(0.5));
        assert_eq!(
            row.refused.as_deref(),
            Some("the agent was refused 1 tool call: Bash(rm x)")
        );
        let no_worker = SlotReport {
            worker_live: false,
            ..ended
        };
        assert_eq!(
            reader.slot_row(&root, &no_worker).state,
            SlotState::NoWorker
        );
    }

    #[test]
    fn tails_are_printable_and_start_on_a_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        fs::write(
            &log,
            "first line\n\u{1b}[31mred\u{1b}[0m\tcell\u{7}\nlast\n",
        )
        .unwrap();
        assert_eq!(
            read_tail(&log, 1000).unwrap(),
            ["first line", "red    cell", "last"]
        );
        // A window starting mid-line drops the cut line.
        assert_eq!(read_tail(&log, 8).unwrap(), ["last"]);
        assert!(read_tail(&dir.path().join("missing"), 10)
            .unwrap()
            .is_empty());
    }
}
