//! The `pause` and `resume` verbs (`conductor pause|resume`, the MCP `pause`/`resume` tools): stop and restart new pickups of a slot, a key, a group or everything.

use std::path::PathBuf;

use serde::Serialize;

use crate::queue::pause::{self, Paused, Target};
use crate::tasks::{ListOptions, TaskState};
use crate::{Client, Slot, TaskId};

/// What to pause: one slot, key or group, or everything.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// One worker slot.
    Slot(Slot),
    /// The tasks with this key.
    Key(String),
    /// The tasks of this group.
    Group(String),
    /// Everything on the root.
    All,
}

impl Selector {
    /// The pause it names, once the slot and the group are known to exist.
    pub fn target(&self, client: &Client) -> crate::Result<Target> {
        let root = client.root();
        Ok(match self {
            Selector::Slot(s) => {
                root.existing_slot(*s)?;
                Target::Slot(s.0)
            }
            Selector::Key(k) => Target::Key(k.clone()),
            Selector::Group(g) => {
                crate::queue::groups::require(root, g)?;
                Target::Group(g.clone())
            }
            Selector::All => Target::All,
        })
    }
}

/// `pause`: what, and whether its running tasks stop too.
#[derive(Debug, Clone)]
pub struct PauseRequest {
    /// What to pause.
    pub what: Selector,
    /// Also stop the running tasks it names and put them back, to run again once resumed.
    pub now: bool,
}

/// `pause`'s answer (`pause --json`, the MCP tool's).
#[derive(Debug, Clone, Serialize)]
pub struct PauseAnswer {
    /// The pause in force.
    pub paused: Target,
    /// It was in force already.
    pub already: bool,
    /// Running tasks it names are being stopped and put back.
    pub now: bool,
    /// Those tasks (with `now`).
    pub stopping: Vec<TaskId>,
    /// The pause's file under `paused/`.
    pub file: PathBuf,
}

/// Pause what `request` names.
pub fn pause(client: &Client, request: &PauseRequest) -> crate::Result<PauseAnswer> {
    crate::trust::verify_root(client.root())?;
    let target = request.what.target(client)?;
    let fresh = pause::pause(client.root(), &target, request.now)?;
    let stopping = if request.now {
        stopping(client, &target)?
    } else {
        Vec::new()
    };
    Ok(PauseAnswer {
        file: client.root().paused_dir().join(target.file_name()),
        paused: target,
        already: !fresh,
        now: request.now,
        stopping,
    })
}

/// The running tasks a pause of `target` made now stops.
fn stopping(client: &Client, target: &Target) -> crate::Result<Vec<TaskId>> {
    let running = client.list_tasks(&ListOptions {
        states: vec![TaskState::Running],
        limit: None,
        ..Default::default()
    })?;
    Ok(running
        .into_iter()
        .filter(|t| target.matches(t.slot, t.key.as_deref(), t.group.as_deref()))
        .map(|t| t.id)
        .collect())
}

/// `resume`: what (`All`: every pause in force, whatever it names).
#[derive(Debug, Clone)]
pub struct ResumeRequest {
    /// What to resume.
    pub what: Selector,
}

/// What a resume lifted: the one pause named, or every pause with `All`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Resumed {
    /// The one pause named.
    One(Target),
    /// Every pause that was in force.
    All(Vec<Target>),
}

/// `resume`'s answer (`resume --json`, the MCP tool's: `{"resumed", "wasPaused"}`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeAnswer {
    /// What was lifted.
    pub resumed: Resumed,
    /// Something named was paused (and is not any more).
    pub was_paused: bool,
    /// A pause of everything still holds what was named.
    #[serde(skip)]
    pub all_still_paused: bool,
}

/// Resume what `request` names.
pub fn resume(client: &Client, request: &ResumeRequest) -> crate::Result<ResumeAnswer> {
    crate::trust::verify_root(client.root())?;
    let target = request.what.target(client)?;
    if target == Target::All {
        let lifted = pause::resume_all(client.root())?;
        return Ok(ResumeAnswer {
            was_paused: !lifted.is_empty(),
            resumed: Resumed::All(lifted),
            all_still_paused: false,
        });
    }
    let was = pause::resume(client.root(), &target)?;
    Ok(ResumeAnswer {
        resumed: Resumed::One(target),
        was_paused: was,
        all_still_paused: Paused::load(client.root()).all(),
    })
}
