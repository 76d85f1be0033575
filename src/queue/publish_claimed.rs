//! The queue copy of a result whose id this process's claim found registered for the queue.

use std::path::Path;

use crate::error::Result;
use crate::fsio;
use crate::layout::Root;
use crate::protocol::TaskId;

/// [`super::claim::publish_queue_result`] for a task this worker claimed from the queue and ran:
/// its claim registered the id for the queue (`ids::claim`, `Place::Queue`), an entry
/// that is never moved elsewhere while the task is in hand, and `kept` is the result
/// just written (a new file, so never already linked there). So no second read of
/// `ids/<id>` nor look at both files: the link, then its commit. Anything unexpected
/// (`queue/results/` gone) takes the careful way.
pub(crate) fn publish_claimed_result(root: &Root, kept: &Path, id: &TaskId) -> Result<()> {
    let dir = root.queue_results();
    match fsio::link_replace(kept, &dir.join(format!("{id}.json"))) {
        Ok(()) => fsio::commit_file_at(&dir, kept),
        Err(e) => {
            tracing::debug!("queue copy of {id}: {e}; looking again");
            super::claim::publish_queue_result(root, kept, id)
        }
    }
}
