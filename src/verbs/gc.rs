//! The `gc` verb (`conductor gc`): what old results, records, logs and leftovers to remove, and removing them.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::maintenance::gc::{GcItem, UnmergedBranch};
use crate::maintenance::{apply_gc, plan_gc, GcOptions, GcPlan};
use crate::Client;

/// `gc`: the age past which files go, and whether to remove them or only plan.
#[derive(Debug, Clone)]
pub struct GcRequest {
    /// Files older than this go.
    pub older_than: Duration,
    /// Remove them (`gc --apply`); else only say what would go.
    pub apply: bool,
}

/// `gc`'s answer (`gc --json`): what was removed (with `applied`) or would be.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcAnswer {
    /// The root collected.
    pub root: PathBuf,
    /// Whether the files were removed (else this is a plan).
    pub applied: bool,
    /// The age asked for, in seconds.
    pub older_than_secs: u64,
    /// The files removed (applied) or to remove (a plan).
    pub items: Vec<GcItem>,
    /// Their bytes.
    pub bytes: u64,
    /// Task ids whose files are kept because the task is running or waiting.
    pub protected: Vec<String>,
    /// Finished tasks kept because their branch is neither merged nor discarded.
    pub unmerged: Vec<UnmergedBranch>,
    /// Files that could not be removed, with the reason.
    pub errors: Vec<String>,
    /// The plan, whether applied or not (what a person is shown).
    #[serde(skip)]
    pub plan: GcPlan,
}

/// Plan the collection and, with `apply`, carry it out.
pub fn gc(client: &Client, request: &GcRequest) -> crate::Result<GcAnswer> {
    let root = client.root();
    if request.apply {
        crate::trust::verify_root(root)?;
    }
    let mut opts = GcOptions::new(request.older_than);
    opts.worktrees_older_than =
        Some(crate::Config::load(&root.config_file())?.worktree_retention());
    let plan = plan_gc(root, &opts)?;
    let (items, bytes, errors) = if request.apply {
        let r = apply_gc(&plan);
        (r.removed, r.bytes, r.errors)
    } else {
        (plan.items.clone(), plan.bytes, Vec::new())
    };
    Ok(GcAnswer {
        root: root.path().to_path_buf(),
        applied: request.apply,
        older_than_secs: request.older_than.as_secs(),
        items,
        bytes,
        protected: plan.protected.clone(),
        unmerged: plan.unmerged.clone(),
        errors,
        plan,
    })
}
