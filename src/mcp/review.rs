//! The MCP tools `diff`, `merge` and `discard`: a worktree task's change read, taken into the checked-out branch, or thrown away, as `conductor diff|merge|discard` do it (both call [`crate::review`]).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{schemars, tool, tool_router, ErrorData};
use serde::Deserialize;
use serde_json::{json, Value};

use super::tools::{echo_id, to_call, Conductor, IdArg};
use crate::review::{self, DiffRequest, MergeReport, MergeRequest, MergeResult, MergeTarget};
use crate::worktree::MergeHow;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiffArgs {
    /// The id of a finished task that ran with `worktree: true`.
    pub id: IdArg,
    /// The most of the patch to return, in bytes (default 65536, at most 1048576); a
    /// longer patch is cut after its last whole line that fits and `truncated` is true.
    #[schemars(range(min = 1, max = 1048576))]
    pub max_bytes: Option<usize>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MergeArgs {
    /// The task whose branch to merge (or `all`).
    pub id: Option<IdArg>,
    /// Merge every finished task whose branch is still there, in the order they
    /// finished; a conflict does not stop the rest.
    #[serde(default)]
    pub all: bool,
    /// Take the task's whole change as one new commit (`git merge --squash`).
    #[serde(default)]
    pub squash: bool,
    /// Rebase the task's branch onto the checked-out branch, then fast-forward.
    #[serde(default)]
    pub rebase: bool,
}

impl MergeArgs {
    fn request(&self) -> Result<MergeRequest, String> {
        let target = match (&self.id, self.all) {
            (Some(_), true) => return Err("give `id` or `all: true`, not both".into()),
            (None, false) => return Err("give the task's `id`, or `all: true`".into()),
            (Some(id), false) => MergeTarget::One(id.id()?),
            (None, true) => MergeTarget::All,
        };
        let how = match (self.squash, self.rebase) {
            (true, true) => return Err("give `squash` or `rebase`, not both".into()),
            (true, false) => MergeHow::Squash,
            (false, true) => MergeHow::Rebase,
            (false, false) => MergeHow::Merge,
        };
        Ok(MergeRequest { target, how })
    }
}

/// A merge report as the tool answers it: every task in order, and the ids by outcome.
fn merge_answer(report: &MergeReport, given: Option<&IdArg>) -> Value {
    let ids = |f: fn(&MergeResult) -> bool| -> Vec<Value> {
        report
            .tasks
            .iter()
            .filter(|t| f(&t.result))
            .map(|t| given.map_or_else(|| json!(t.id), IdArg::echo))
            .collect()
    };
    let mut tasks = json!(report.tasks);
    if let (Some(g), Value::Array(list)) = (given, &mut tasks) {
        for t in list {
            t["id"] = g.echo();
        }
    }
    json!({
        "allMerged": report.all_merged(),
        "merged": ids(|r| matches!(r, MergeResult::Merged { .. })),
        "conflicts": ids(|r| matches!(r, MergeResult::Conflict { .. })),
        "left": ids(|r| matches!(r, MergeResult::Left { .. })),
        "tasks": tasks,
    })
}

#[tool_router(router = review_router, vis = "pub(super)")]
impl Conductor {
    #[tool(
        description = "What a finished `worktree: true` task changed: its branch \
        (conductor/ID), base and head commits, diffstat, `git diff --stat` and the patch \
        (`git diff BASE...BRANCH`, whatever happened to the checked-out branch since), \
        clipped to maxBytes (default 64 KiB) with `truncated` and the whole `patchBytes`. \
        Use it to review a task's work before `merge` or `discard`.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn diff(
        &self,
        Parameters(args): Parameters<DiffArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let req = DiffRequest {
            id,
            max_bytes: args.max_bytes.unwrap_or(review::DIFF_DEFAULT_BYTES),
        };
        let given = args.id;
        self.blocking(move |client| {
            let d = review::diff(client, &req)?;
            Ok(echo_id(Ok(json!(d)), &given))
        })
        .await
    }

    #[tool(
        description = "Merge a finished `worktree: true` task's branch (id), or every \
        finished task's still there (all: true, in the order they finished), into the \
        branch checked out in its repository, then remove its worktree and branch. The \
        checkout must be clean and on a branch. A conflicting merge is aborted — the \
        repository exactly as it was, the branch kept — and reported with its files; with \
        all, the rest go on. Each task is reported merged, conflict (files) or left (why).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn merge(
        &self,
        Parameters(args): Parameters<MergeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = match args.request() {
            Ok(r) => r,
            Err(msg) => return to_call(Err(msg)),
        };
        let given = args.id;
        self.blocking(move |client| {
            let report = review::merge(client, &req)?;
            Ok(Ok(merge_answer(&report, given.as_ref())))
        })
        .await
    }

    #[tool(
        description = "Throw a finished `worktree: true` task's work away: remove its \
        worktree and delete its branch (conductor/ID). Its result stays. Nothing to do \
        when both are gone already (alreadyGone).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn discard(
        &self,
        Parameters(args): Parameters<super::tools::IdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match args.id.id() {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let given = args.id;
        self.blocking(move |client| {
            let done = review::discard(client, &id)?;
            Ok(echo_id(Ok(json!(done)), &given))
        })
        .await
    }
}
