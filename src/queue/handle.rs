//! `Queue`, the handle on one root's shared queue (its methods live beside what they
//! do: submitting in `mod.rs`, claiming in `claim.rs`, …), and the origin of its tasks.

use crate::layout::Root;

/// The `origin` of a task that came through the queue.
pub const ORIGIN_QUEUE: &str = "queue";

/// The shared queue of one root.
#[derive(Debug, Clone)]
pub struct Queue {
    pub(super) root: Root,
}
