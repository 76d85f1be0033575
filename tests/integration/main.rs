//! One integration test binary (faster to link, one place for the harness).

mod harness;
mod prereq;

mod architecture;
mod cli;
mod client;
mod compat;
mod dashboard;
mod deps;
mod faults;
mod gate;
mod hosts;
mod launch;
mod lease_renewer;
mod live;
mod locks;
mod mcp;
mod mcp_push;
mod multihost;
mod multihost_env;
mod multihost_faults;
mod multihost_gluster;
mod multihost_mounts;
mod orchestrator;
mod protocol;
mod queue;
mod real_agents;
mod scale;
mod tasks;
mod trust;
mod views;
mod views_tmux;
mod waits;
mod worker;
mod worktrees;
