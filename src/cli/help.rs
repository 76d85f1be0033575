//! The headings options are grouped under in `--help`, shared so commands say them alike.
//!
//! The everyday options of a command carry no heading (clap lists them first, under
//! "Options"); the rest go under one of these. A rarely used option is also
//! `hide_short_help`: `-h` fits one 80x24 screen, `--help` shows everything.

/// `--root`, `-v`, `-q`: taken by every command.
pub const GLOBAL: &str = "Global options";
/// Which agent runs a task and what it may do: preset, model, tools, budget, time limit.
pub const AGENT: &str = crate::verbs::spec::heading::AGENT;
/// `--worktree` and the options that go with it.
pub const WORKTREE: &str = crate::verbs::spec::heading::WORKTREE;
/// The shared queue's options: group, attempts, many tasks at once.
pub const QUEUE: &str = crate::verbs::spec::heading::QUEUE;
/// Waiting for the result.
pub const WAITING: &str = "Waiting";
/// How a worker watches, stops and logs.
pub const WORKER: &str = "Worker process";
