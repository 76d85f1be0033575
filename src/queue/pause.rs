//! Pauses: `paused/<what>` stops new pickups of what it names, root-wide.
//!
//! One file per pause in force — `paused/all`, `paused/slot-<N>`, `paused/key-<K>`,
//! `paused/group-<G>` — holding `{"schema", "target", "pausedAt", "now"}`. While one
//! applies, no worker starts a task of it (a paused slot takes nothing, from its inbox
//! or the queue; a paused key's or group's tasks wait in the queue or the inbox);
//! running tasks go on unless the pause was made `now`, in which case their workers
//! stop them and put them back where they came from (same attempt, nothing published),
//! to run again once resumed. Resuming removes the file. Workers watch `paused/`, so
//! both take effect at once, and a file survives restarts and crashes.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsio::{self, Durability};
use crate::layout::Root;
use crate::protocol::{check_group_name, check_key_name, now_rfc3339, SCHEMA};

/// What a pause stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "name")]
pub enum Target {
    All,
    Slot(u32),
    Key(String),
    Group(String),
}

impl Target {
    /// Whether this pause names a task of `key` and `group` on slot `slot` (`None`: on
    /// no slot yet).
    pub fn matches(&self, slot: Option<u32>, key: Option<&str>, group: Option<&str>) -> bool {
        match self {
            Target::All => true,
            Target::Slot(n) => slot == Some(*n),
            Target::Key(k) => key == Some(k.as_str()),
            Target::Group(g) => group == Some(g.as_str()),
        }
    }

    /// Its file's name under `paused/`.
    pub fn file_name(&self) -> String {
        match self {
            Target::All => "all".to_string(),
            Target::Slot(n) => format!("slot-{n}"),
            Target::Key(k) => format!("key-{k}"),
            Target::Group(g) => format!("group-{g}"),
        }
    }

    fn from_file_name(name: &str) -> Option<Target> {
        if name == "all" {
            return Some(Target::All);
        }
        let (kind, rest) = name.split_once('-')?;
        match kind {
            "slot" => rest.parse().ok().map(Target::Slot),
            "key" => Some(Target::Key(rest.to_string())),
            "group" => Some(Target::Group(rest.to_string())),
            _ => None,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |field: &str, reason: String| Error::BadArgument {
            field: field.to_string(),
            reason,
        };
        match self {
            Target::Key(k) => check_key_name(k).map_err(|r| bad("key", r)),
            Target::Group(g) => check_group_name(g).map_err(|r| bad("group", r)),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::All => f.write_str("everything"),
            Target::Slot(n) => write!(f, "slot {n}"),
            Target::Key(k) => write!(f, "key {k}"),
            Target::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// A pause as its file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseFile {
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// `all`, `slot-N`, `key-K`, `group-G` (its file name).
    pub target: String,
    pub paused_at: String,
    /// Running tasks it applies to are stopped and put back too.
    #[serde(default)]
    pub now: bool,
}

fn schema_v1() -> u32 {
    SCHEMA
}

/// Pause `target` (again: `now` is updated). `Ok(false)`: it was paused already.
pub fn pause(root: &Root, target: &Target, now: bool) -> Result<bool> {
    root.require_existing()?;
    target.check()?;
    let dir = root.paused_dir();
    fsio::ensure_dir(&dir)?;
    let path = dir.join(target.file_name());
    let was = path.exists();
    let file = PauseFile {
        schema: SCHEMA,
        target: target.file_name(),
        paused_at: now_rfc3339(),
        now,
    };
    fsio::write_replace(&path, &fsio::to_json_bytes(&file), Durability::Durable)?;
    Ok(!was)
}

/// Resume `target`. `Ok(false)`: it was not paused.
pub fn resume(root: &Root, target: &Target) -> Result<bool> {
    root.require_existing()?;
    target.check()?;
    let path = root.paused_dir().join(target.file_name());
    let removed = fsio::remove_file_if_exists(&path)?;
    if removed {
        fsio::fsync_dir(&root.paused_dir())?;
    }
    Ok(removed)
}

/// Resume everything: remove every pause in force (of everything, and of any slot, key
/// or group). Returns what was paused.
pub fn resume_all(root: &Root) -> Result<Vec<Target>> {
    root.require_existing()?;
    let mut resumed = Vec::new();
    for (target, _) in Paused::load(root).entries {
        if fsio::remove_file_if_exists(&root.paused_dir().join(target.file_name()))? {
            resumed.push(target);
        }
    }
    if !resumed.is_empty() {
        fsio::fsync_dir(&root.paused_dir())?;
    }
    Ok(resumed)
}

/// Every pause in force (read once per look).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paused {
    pub entries: Vec<(Target, bool)>,
}

impl Paused {
    /// What `paused/` holds now (nothing if it cannot be read).
    pub fn load(root: &Root) -> Paused {
        let mut entries = Vec::new();
        let Ok(Some(dir)) = fsio::read_dir_if_exists(&root.paused_dir()) else {
            return Paused { entries };
        };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.ends_with(".tmp") {
                continue;
            }
            let Some(target) = Target::from_file_name(&name) else {
                continue;
            };
            let now = fsio::read_json::<PauseFile>(&entry.path(), 64 * 1024)
                .ok()
                .flatten()
                .is_some_and(|f| f.now);
            entries.push((target, now));
        }
        entries.sort_by_key(|(t, _)| t.file_name());
        Paused { entries }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn has(&self, t: &Target) -> bool {
        self.entries.iter().any(|(e, _)| e == t)
    }

    pub fn all(&self) -> bool {
        self.has(&Target::All)
    }

    /// Whether slot `n` takes nothing now (itself or everything paused).
    pub fn slot(&self, n: u32) -> bool {
        self.all() || self.has(&Target::Slot(n))
    }

    pub fn group(&self, g: &str) -> bool {
        self.has(&Target::Group(g.to_string()))
    }

    /// Why a task of `key` and `group` waits for a pause, if it does ("paused", "paused
    /// (key K)", "paused (group G)").
    pub fn task_reason(&self, key: Option<&str>, group: Option<&str>) -> Option<String> {
        if self.all() {
            return Some("paused".to_string());
        }
        if let Some(k) = key.filter(|k| self.has(&Target::Key(k.to_string()))) {
            return Some(format!("paused (key {k})"));
        }
        group
            .filter(|g| self.group(g))
            .map(|g| format!("paused (group {g})"))
    }

    /// The pause made `now` that stops a task of `key` and `group` running on slot
    /// `slot`, if any.
    pub fn stops(&self, slot: u32, key: Option<&str>, group: Option<&str>) -> Option<&Target> {
        self.entries
            .iter()
            .filter(|(_, now)| *now)
            .map(|(t, _)| t)
            .find(|t| t.matches(Some(slot), key, group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_a_file_until_resumed_and_names_what_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        super::super::init_root(&root).unwrap();
        assert!(Paused::load(&root).is_empty());
        assert!(pause(&root, &Target::Slot(2), false).unwrap());
        assert!(
            !pause(&root, &Target::Slot(2), true).unwrap(),
            "paused already"
        );
        pause(&root, &Target::Key("alice".into()), false).unwrap();
        pause(&root, &Target::Group("batch".into()), false).unwrap();
        assert!(root.paused_dir().join("slot-2").is_file());
        let p = Paused::load(&root);
        assert!(p.slot(2) && !p.slot(1));
        assert_eq!(
            p.task_reason(Some("alice"), None).as_deref(),
            Some("paused (key alice)")
        );
        assert_eq!(
            p.task_reason(Some("bob"), Some("batch")).as_deref(),
            Some("paused (group batch)")
        );
        assert_eq!(p.task_reason(Some("bob"), None), None);
        // Only the slot's pause was made `now`.
        assert_eq!(p.stops(2, Some("alice"), None), Some(&Target::Slot(2)));
        assert_eq!(p.stops(1, Some("alice"), None), None);
        // A key's or a group's pause made now stops that key's or group's tasks anywhere.
        pause(&root, &Target::Key("bob".into()), true).unwrap();
        pause(&root, &Target::Group("batch".into()), true).unwrap();
        let p = Paused::load(&root);
        assert_eq!(
            p.stops(5, Some("bob"), None),
            Some(&Target::Key("bob".into()))
        );
        assert_eq!(
            p.stops(5, None, Some("batch")),
            Some(&Target::Group("batch".into()))
        );
        assert_eq!(p.stops(5, Some("carol"), Some("other")), None);
        resume(&root, &Target::Key("bob".into())).unwrap();
        pause(&root, &Target::Group("batch".into()), false).unwrap();
        assert!(resume(&root, &Target::Slot(2)).unwrap());
        assert!(!resume(&root, &Target::Slot(2)).unwrap());
        pause(&root, &Target::All, false).unwrap();
        let p = Paused::load(&root);
        assert!(p.slot(7));
        assert_eq!(p.task_reason(None, None).as_deref(), Some("paused"));
        // Resuming everything lifts every pause, whatever it names.
        let lifted = resume_all(&root).unwrap();
        assert_eq!(lifted.len(), 3, "{lifted:?}");
        assert!(Paused::load(&root).is_empty());
        assert!(pause(&root, &Target::Group("no/pe".into()), false).is_err());
    }
}
