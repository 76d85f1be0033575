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
/// `ids/<id>` nor look at both files: a link to a new name, then its commit. Anything
/// unexpected — `queue/results/` gone, or the name already there (a retry of this copy:
/// a replace of a file by itself would leave its temp name behind) — takes the careful
/// way.
pub(crate) fn publish_claimed_result(root: &Root, kept: &Path, id: &TaskId) -> Result<()> {
    let dir = root.queue_results();
    match fsio::link_new(kept, &dir.join(format!("{id}.json"))) {
        Ok(()) => fsio::commit_file_at(&dir, kept),
        Err(e) => {
            tracing::debug!("queue copy of {id}: {e}; looking again");
            super::claim::publish_queue_result(root, kept, id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Slot;
    use crate::queue::{claim_next, Claim, Queue, Serve};

    fn root() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path().join("root"));
        crate::queue::init_root(&root).unwrap();
        root.worker(Slot(0)).create_dirs().unwrap();
        (dir, root)
    }

    #[test]
    fn the_claim_says_when_pending_holds_nothing_at_all_and_when_nothing_runs_now() {
        let (_d, root) = root();
        let (worker, config) = (root.worker(Slot(0)), crate::config::Config::default());
        let serve = |_: &crate::Task| Serve::Now;
        let claim = |serve: &dyn Fn(&crate::Task) -> Serve| {
            claim_next(&root, &worker, &config, serve, || unreachable!("nothing to take"))
        };
        assert!(matches!(claim(&serve).unwrap(), Claim::Empty));
        Queue::new(root.clone())
            .submit(&crate::Task::new("x"))
            .unwrap();
        // A task waits, though not for this worker: not empty (the worker looks again).
        let never = |_: &crate::Task| Serve::Never;
        assert!(matches!(claim(&never).unwrap(), Claim::Nothing));
    }

    /// A `queue/pending/` that cannot be listed now (here: a file in its place) is
    /// nothing to take this time, not an error that would end the worker's service
    /// (second read of h/qlean: the claim's listing had replaced the worker's own look,
    /// which counted it as empty).
    #[test]
    fn a_queue_that_cannot_be_listed_is_nothing_to_take_now() {
        let (_d, root) = root();
        let (worker, config) = (root.worker(Slot(0)), crate::config::Config::default());
        std::fs::remove_dir_all(root.queue_pending()).unwrap();
        std::fs::write(root.queue_pending(), b"not a directory").unwrap();
        let serve = |_: &crate::Task| Serve::Now;
        let claimed = claim_next(&root, &worker, &config, &serve, || unreachable!("no task"));
        assert!(matches!(claimed, Ok(Claim::Nothing)), "{claimed:?}");
    }

    #[test]
    fn a_claimed_tasks_result_is_linked_and_without_queue_results_it_looks_again() {
        let (_d, root) = root();
        let id = TaskId::from("abcd1234");
        crate::ids::claim(&root, &id, crate::ids::Place::Queue).unwrap();
        let kept = root.worker(Slot(0)).result_for(&id);
        fsio::write_new(&kept, b"{}", fsio::Durability::Atomic).unwrap();
        let dest = root.queue_results().join(format!("{id}.json"));
        std::fs::remove_dir_all(root.queue_results()).unwrap();
        // Gone: the careful way makes it again.
        publish_claimed_result(&root, &kept, &id).unwrap();
        assert!(crate::ids::same_file(&kept, &dest));
        // Again (a retry after a full disk): the same link, still one file, and no
        // temp name left beside it.
        publish_claimed_result(&root, &kept, &id).unwrap();
        assert!(crate::ids::same_file(&kept, &dest));
        let names: Vec<_> = std::fs::read_dir(root.queue_results())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(format!("{id}.json"))]);
    }
}
