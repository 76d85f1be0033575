//! The `working` status of a running task, published once its agent has run a moment.

use std::time::Duration;

use super::run::Run;
use crate::agent::Agent;
use crate::protocol::Status;

/// How long an agent runs before its slot's status says `working`: a task that ends
/// sooner (a trivial command) goes from its claim to its end with one status write, and
/// no status reader misses anything a person could have seen. `running.json` says the
/// task is in hand meanwhile, and the agent's own record names its pid.
pub(super) const AFTER: Duration = Duration::from_millis(50);

impl Run<'_> {
    /// Publish `status` (`working`) for the running `agent`, its start time read now,
    /// while it is still unreaped.
    pub(super) fn publish_working(&self, status: &mut Status, agent: &Agent) {
        status.agent_start_time = agent.start_time();
        if let Err(e) = self.slot.board.publish(status.clone()) {
            tracing::warn!("publishing the working status: {e}");
        }
    }
}
