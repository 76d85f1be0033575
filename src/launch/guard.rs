//! One launch per session: the launch gate, and refusing a session (or slot) already in use.

use super::problem::{LaunchError, Result};
use crate::error::Error;
use crate::gate::{self, Gate, GateHolder};
use crate::layout::{Root, Slot};

use super::tmux::Tmux;
use super::options::launch_gate;
use super::problem::LaunchRefusal;

/// Take the launch gate of `session`, refusing when another launcher holds it or the
/// session already runs.
pub(super) fn take_gate(tmux: &Tmux, root: &Root, session: &str) -> Result<Gate> {
    let attach = tmux.attach_hint(session);
    let gate = match Gate::acquire(
        &launch_gate(root, session),
        &format!("conductor-launch for session {session}"),
    ) {
        Ok(g) => g,
        Err(Error::GateHeld { path, .. }) => {
            let holder = gate::probe(&path).ok().flatten().unwrap_or(GateHolder {
                pid: 0,
                role: String::new(),
                host: String::new(),
                since: "just now".into(),
                host_id: None,
                lease: None,
            });
            return Err(LaunchRefusal::LauncherBusy {
                session: session.to_string(),
                launcher: holder,
                attach,
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    if tmux.has_session(session)? {
        let record = tmux.session_record(session).ok().map(|(r, w, _)| (r, w));
        return Err(LaunchRefusal::Running {
            session: session.to_string(),
            record,
            attach,
        }
        .into());
    }
    Ok(gate)
}

/// Refuse when a worker already serves one of `slots` (another session on this root?).
pub(super) fn check_slots_free(root: &Root, slots: &[Slot]) -> Result<()> {
    for &slot in slots {
        let path = root.worker(slot).worker_gate();
        // An unreadable gate is left for the worker to report in its pane.
        if let Ok(Some(h)) = gate::probe(&path) {
            let who = if h.pid == 0 {
                "a worker starting or stopping right now".to_string()
            } else {
                format!("pid {}, since {}", h.pid, h.since)
            };
            return Err(LaunchError::Core(Error::GateHeld {
                role: format!("worker {slot}"),
                holder: format!(
                    "{who}; is another session using root {}?",
                    root.path().display()
                ),
                path,
            }));
        }
    }
    Ok(())
}
