//! The verbs as a library layer: each verb a function over a typed request with a typed answer, which the CLI parses and renders and the MCP server serializes.

pub mod chain;
pub mod edit;
pub mod queue;
pub mod redo;
pub mod retry;
pub mod send;
pub mod spec;
pub mod submit;
pub mod tasks;
pub mod totals;
