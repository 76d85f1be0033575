//! The verbs as a library layer: each verb a function over a typed request with a typed answer, which the CLI parses and renders and the MCP server serializes.
//!
//! The worktree verbs `diff`, `merge` and `discard` are such functions already, in
//! [`crate::review`] (`DiffRequest`, `MergeRequest` → `MergeReport`), called by both sides.

// What a program driving conductor needs (describe and submit a task, list, cancel) is
// public; `Client` writes to a slot, waits and reads results. The operator's verbs (send,
// result, retry, gc, pause, edit, the queue's order, totals, redo, chains) serve the CLI
// and the MCP server and are public only under `internals`, like the implementation.
pub mod cancel;
pub mod spec;
pub mod submit;
pub mod tasks;

internal_modules!(
    chain,
    edit,
    gc,
    logs,
    logs_follow,
    pause,
    queue,
    redo,
    result,
    retry,
    send,
    status,
    totals,
    view,
    wait,
    wait_any,
);
