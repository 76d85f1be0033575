//! Spend limits: a task's own (passed to its agent), a group's and the root's per day
//! (tasks held once the day's spend reaches them), and the day's spend ledger.
//!
//! The ledger is `spend/<YYYY-MM-DD>.jsonl` (the local date the task finished): a worker
//! appends one line per finished task that reported a cost (`{"taskId", "group",
//! "costUsd"}`), in a single `O_APPEND` write. Reading it is cheap however long the day
//! was: each process keeps a tally per file and reads only what was appended since its
//! last look. A task id seen twice (its result published again after a crash) counts
//! once. A file per day means no reset: a new day starts an empty file.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layout::Root;
use crate::preset::Preset;
use crate::protocol::TaskId;

pub use crate::protocol::check_usd;

/// `$0.0375`: enough digits for the cents of a cheap task.
pub fn usd(v: f64) -> String {
    if v >= 100.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

/// The agent's arguments with the task's own budget passed, where its CLI takes one
/// (Claude Code's `--max-budget-usd`). `None`: the preset has no such option.
pub fn agent_args(preset: Preset, args: &[String], max_usd: f64) -> Option<Vec<String>> {
    match preset {
        Preset::Claude => {
            let mut out = args.to_vec();
            out.extend(["--max-budget-usd".to_string(), format!("{max_usd}")]);
            Some(out)
        }
        _ => None,
    }
}

/// A line of the spend ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    task_id: TaskId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    cost_usd: f64,
}

/// Today's local date, `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let local = secs as i64 + crate::preset::local_offset_secs(secs);
    let days = local.div_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn ledger_file(root: &Root, day: &str) -> PathBuf {
    root.spend_dir().join(format!("{day}.jsonl"))
}

/// Add a finished task's cost to today's ledger. Failures are the caller's to log: a
/// lost line under-counts the day, it loses no work.
pub fn record(root: &Root, id: &TaskId, group: Option<&str>, cost_usd: f64) -> Result<()> {
    if !(cost_usd.is_finite() && cost_usd > 0.0) {
        return Ok(());
    }
    crate::fsio::ensure_dir(&root.spend_dir())?;
    let path = ledger_file(root, &today());
    let entry = Entry {
        task_id: id.clone(),
        group: group.map(str::to_string),
        cost_usd,
    };
    let mut line = serde_json::to_vec(&entry).expect("an entry serializes");
    line.push(b'\n');
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))?;
    // One write: appends of a line this short are not interleaved with another's.
    f.write_all(&line)
        .map_err(|e| Error::io("append to", &path, e))
}

/// What was spent on one day: in all, and per group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spend {
    pub total: f64,
    pub by_group: HashMap<String, f64>,
}

impl Spend {
    pub fn group(&self, name: &str) -> f64 {
        self.by_group.get(name).copied().unwrap_or(0.0)
    }
}

/// One process's reading of one ledger file.
#[derive(Default)]
struct Tally {
    ino: u64,
    read: u64,
    tasks: HashMap<String, (Option<String>, f64)>,
}

impl Tally {
    fn spend(&self) -> Spend {
        let mut s = Spend::default();
        for (group, cost) in self.tasks.values() {
            s.total += cost;
            if let Some(g) = group {
                *s.by_group.entry(g.clone()).or_default() += cost;
            }
        }
        s
    }

    /// Read what was appended since the last look (whole lines only).
    fn catch_up(&mut self, path: &Path) {
        let Ok(mut f) = fs::File::open(path) else {
            *self = Tally::default();
            return;
        };
        let Ok(meta) = f.metadata() else { return };
        if meta.ino() != self.ino || meta.len() < self.read {
            *self = Tally {
                ino: meta.ino(),
                ..Tally::default()
            };
        }
        let mut fresh = Vec::new();
        if f.seek(SeekFrom::Start(self.read)).is_err() || f.read_to_end(&mut fresh).is_err() {
            return;
        }
        let whole = fresh.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in fresh[..whole].split(|&b| b == b'\n') {
            if let Ok(e) = serde_json::from_slice::<Entry>(line) {
                self.tasks
                    .insert(e.task_id.to_string(), (e.group, e.cost_usd));
            }
        }
        self.read += whole as u64;
    }
}

static TALLIES: Mutex<Option<HashMap<PathBuf, Tally>>> = Mutex::new(None);

/// Today's spend on `root`.
pub fn spent_today(root: &Root) -> Spend {
    let path = ledger_file(root, &today());
    let mut all = TALLIES.lock().unwrap_or_else(|p| p.into_inner());
    let map = all.get_or_insert_with(HashMap::new);
    // Yesterday's files are done with: keep only this one.
    map.retain(|p, _| p == &path);
    let tally = map.entry(path.clone()).or_default();
    tally.catch_up(&path);
    tally.spend()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::queue::budgets::hold_reason;

    #[test]
    fn the_ledger_sums_the_day_per_group_counts_a_task_once_and_reads_only_what_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(spent_today(&root), Spend::default());
        record(&root, &TaskId::from("a"), Some("g"), 0.25).unwrap();
        record(&root, &TaskId::from("b"), None, 0.5).unwrap();
        record(&root, &TaskId::from("z"), None, 0.0).unwrap();
        let s = spent_today(&root);
        assert_eq!((s.total, s.group("g"), s.group("h")), (0.75, 0.25, 0.0));
        // A result told twice counts once; a later line adds to the tally.
        record(&root, &TaskId::from("a"), Some("g"), 0.25).unwrap();
        record(&root, &TaskId::from("c"), Some("g"), 1.0).unwrap();
        let s = spent_today(&root);
        assert_eq!((s.total, s.group("g")), (1.75, 1.25));
        // A half-written line waits for its end.
        let path = ledger_file(&root, &today());
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"taskId":"d","costUsd":"#).unwrap();
        assert_eq!(spent_today(&root).total, 1.75);
        f.write_all(b"2.0}\n").unwrap();
        assert_eq!(spent_today(&root).total, 3.75);
    }

    #[test]
    fn a_spent_root_or_group_budget_holds_its_tasks_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        crate::queue::init_root(&root).unwrap();
        crate::queue::groups::add(&root, "g", 1).unwrap();
        let mut config = Config::default();
        assert_eq!(hold_reason(&root, &config, Some("g")), None);
        record(&root, &TaskId::from("a"), Some("g"), 0.02).unwrap();
        config.daily_budget_usd = Some(0.01);
        let why = hold_reason(&root, &config, None).unwrap();
        assert!(
            why.starts_with("daily budget spent ($0.0200 of $0.0100"),
            "{why}"
        );
        config.daily_budget_usd = Some(1.0);
        assert_eq!(hold_reason(&root, &config, Some("g")), None);
        crate::queue::groups::set_budget(&root, "g", Some(0.02)).unwrap();
        let why = hold_reason(&root, &config, Some("g")).unwrap();
        assert!(why.starts_with("group g's daily budget spent"), "{why}");
        assert_eq!(hold_reason(&root, &config, None), None);
    }

    #[test]
    fn only_claude_code_is_given_the_tasks_cap() {
        let args = vec!["-p".to_string()];
        assert_eq!(
            agent_args(Preset::Claude, &args, 0.5).unwrap(),
            ["-p", "--max-budget-usd", "0.5"]
        );
        for p in [Preset::Codex, Preset::Gemini, Preset::Command] {
            assert_eq!(agent_args(p, &args, 0.5), None, "{p}");
        }
    }

    #[test]
    fn the_date_is_a_calendar_date() {
        let d = today();
        assert_eq!(d.len(), 10, "{d}");
        assert!(d.starts_with("20"), "{d}");
        assert!(check_usd("x", Some(0.0)).is_err());
        assert!(check_usd("x", Some(f64::NAN)).is_err());
        assert!(check_usd("x", Some(0.01)).is_ok());
    }
}
