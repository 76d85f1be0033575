//! "Needs approval": told to `approvalCallback` as the question is written, and every question waiting on a root found for `wait --any` and the MCP server.

use super::Event;
use crate::config::Config;
use crate::layout::{Root, Slot};
use crate::protocol::approval::{read_question, Question};

/// The event of question `q`, asked through `slot`.
pub fn event(slot: Slot, q: &Question) -> Event {
    Event::NeedsApproval {
        task_id: q.task_id.clone(),
        slot: slot.0,
        question_id: q.id.clone(),
        asks: q.summary(),
        asked_at: q.asked_at.clone(),
        deadline: q.deadline.clone(),
    }
}

/// Question `q` was just written in `slot`: run `approvalCallback`, if configured.
pub fn asked(root: &Root, slot: Slot, q: &Question) {
    match Config::load(&root.config_file()) {
        Ok(config) => super::tell(&config, root, &root.worker(slot), &event(slot, q)),
        Err(e) => tracing::warn!("no approval notice: {e}"),
    }
}

/// Every question waiting for a person on `root`, slot by slot.
pub fn waiting(root: &Root) -> Vec<Event> {
    let Ok(slots) = root.slots() else {
        return Vec::new();
    };
    slots
        .into_iter()
        .filter_map(|s| {
            let q = read_question(&root.worker(s).dir).ok().flatten()?;
            Some(event(s, &q))
        })
        .collect()
}
