//! conductor: run AI coding-agent sessions as workers fed through plain files.

pub mod dirlock;
pub mod error;
pub mod fsio;
pub mod gate;
pub mod host;
pub mod layout;
pub mod protocol;
pub mod watch;
pub mod worker;

pub use error::{Error, FileProblem, Result};
pub mod agent;
pub mod client;
pub mod config;

pub use client::Client;
pub use config::Config;
pub use layout::{Root, Slot, WorkerPaths};
pub use protocol::{Outcome, Status, Task, TaskId, TaskResult, WorkerState};
