//! The verbs as a library layer: each verb a function over a typed request with a typed answer, which the CLI parses and renders and the MCP server serializes.
//!
//! The worktree verbs `diff`, `merge` and `discard` are such functions already, in
//! [`crate::review`] (`DiffRequest`, `MergeRequest` → `MergeReport`), called by both sides.

pub mod cancel;
pub mod chain;
pub mod edit;
pub mod gc;
pub mod pause;
pub mod queue;
pub mod redo;
pub mod result;
pub mod retry;
pub mod send;
pub mod spec;
pub mod submit;
pub mod tasks;
pub mod totals;
