//! One integration test binary (faster to link, one place for the harness).

mod harness;

mod cli;
mod client;
mod compat;
mod deps;
mod faults;
mod gate;
mod hosts;
mod launch;
mod locks;
mod multihost;
mod multihost_env;
mod multihost_faults;
mod multihost_mounts;
mod orchestrator;
mod protocol;
mod queue;
mod tasks;
mod trust;
mod waits;
mod worker;
