//! One launch per session: the launch gate, and refusing a session (or slot) already in use.

use std::fmt;

use crate::error::{Error, Result};
use crate::gate::{self, Gate, GateHolder};
use crate::layout::{Root, Slot};

use super::launch_gate;
use super::tmux::Tmux;

/// Take the launch gate of `session`, refusing when another launcher holds it or the
/// session already runs.
pub(super) fn take_gate(tmux: &Tmux, root: &Root, session: &str) -> Result<Gate> {
    let refusal = |running: Option<(String, String)>, launcher: Option<GateHolder>| {
        let r = Refusal {
            session: session.to_string(),
            running,
            launcher,
            attach: tmux.attach_hint(session),
        };
        Error::Refused(r.to_string())
    };
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
            });
            return Err(refusal(None, Some(holder)));
        }
        Err(e) => return Err(e),
    };
    if tmux.has_session(session)? {
        let record = tmux.session_record(session).ok().map(|(r, w, _)| (r, w));
        return Err(refusal(record, None));
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
            return Err(Error::GateHeld {
                role: format!("worker {slot}"),
                holder: format!(
                    "{who}; is another session using root {}?",
                    root.path().display()
                ),
                path,
            });
        }
    }
    Ok(())
}

/// Why [`launch`](super::launch) refused: the session already runs, or another launcher is at it.
struct Refusal {
    session: String,
    /// The running session's recorded root and worker count, when it runs.
    running: Option<(String, String)>,
    /// The process holding the launch gate, when another launch (or kill) is under way.
    launcher: Option<GateHolder>,
    /// How to attach to it.
    attach: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (session, attach) = (&self.session, &self.attach);
        match (&self.running, &self.launcher) {
            (_, Some(h)) => write!(
                f,
                "refusing to launch session {session}: another conductor-launch (pid {}, since \
                 {}) is creating or stopping it right now; once it is up, attach with `{attach}`",
                h.pid, h.since
            ),
            (Some((root, workers)), None) => {
                let workers = if workers.is_empty() { "?" } else { workers };
                let root = if root.is_empty() {
                    "an unknown root"
                } else {
                    root
                };
                write!(
                    f,
                    "refusing to launch session {session}: it is already running ({workers} \
                     workers on {root}); attach with `{attach}`"
                )
            }
            (None, None) => write!(
                f,
                "refusing to launch session {session}: it is already running; attach with \
                 `{attach}`"
            ),
        }
    }
}
