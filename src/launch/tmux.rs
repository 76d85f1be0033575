//! The tmux driver: every tmux command the launcher runs goes through [`Tmux`].

use std::io;
use std::process::{Command, Output, Stdio};

use crate::error::{Error, Result};

/// Session options that record a launched session.
pub(super) const OPT_ROOT: &str = "@conductor_root";
pub(super) const OPT_WORKERS: &str = "@conductor_workers";
pub(super) const OPT_DIR: &str = "@conductor_dir";

const INSTALL_TMUX: &str = "tmux is not installed or not on PATH; install it \
    (`apt install tmux` on Debian/Ubuntu, `dnf install tmux` on Fedora, `brew install tmux` on macOS) \
    and try again";

/// Every tmux invocation goes through here, so `-L <socket>` is never forgotten.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tmux {
    socket: Option<String>,
}

impl Tmux {
    /// tmux's default server (`None`) or the server on socket `name` (`tmux -L name`).
    pub fn new(socket: Option<String>) -> Tmux {
        Tmux { socket }
    }

    pub fn socket(&self) -> Option<&str> {
        self.socket.as_deref()
    }

    /// `tmux [-L socket]`, ready for arguments. Output is not captured.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        if let Some(s) = &self.socket {
            cmd.arg("-L").arg(s);
        }
        cmd
    }

    /// Run tmux with `args`, capturing its output; a missing tmux says how to install it.
    pub(super) fn output(&self, args: &[&str]) -> Result<Output> {
        capture(self.command().args(args))
    }

    /// Run tmux with `args`; its stdout on success, else [`Error::Command`] with its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(self.failed(args, &out))
        }
    }

    /// Run tmux with `args`; whether it succeeded (its stderr is dropped).
    pub fn succeeds(&self, args: &[&str]) -> Result<bool> {
        Ok(self.output(args)?.status.success())
    }

    /// The error for `tmux [-L socket] args` having failed as `out` shows.
    pub(super) fn failed(&self, args: &[&str], out: &Output) -> Error {
        let mut all: Vec<&str> = Vec::with_capacity(args.len() + 2);
        if let Some(s) = self.socket() {
            all.extend(["-L", s]);
        }
        all.extend(args);
        Error::command("tmux", &all, out)
    }

    /// `tmux -V`: its version line, or an error saying how to install tmux.
    pub fn version(&self) -> Result<String> {
        let out = capture(Command::new("tmux").arg("-V"))?;
        if !out.status.success() {
            return Err(Error::command("tmux", &["-V"], &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Whether a session named exactly `name` runs on this server.
    pub fn has_session(&self, name: &str) -> Result<bool> {
        self.succeeds(&["has-session", "-t", &exact(name)])
    }

    /// Kill the session named exactly `name`.
    pub fn kill_session(&self, name: &str) -> Result<()> {
        self.run(&["kill-session", "-t", &exact(name)]).map(drop)
    }

    /// The command a person types to attach to `session` on this server.
    pub fn attach_hint(&self, session: &str) -> String {
        match self.socket() {
            Some(s) => format!("tmux -L {s} attach -t {session}"),
            None => format!("tmux attach -t {session}"),
        }
    }

    /// Session options of `session`: `(root, workers, dir)` as recorded by
    /// [`launch`](super::launch).
    pub(super) fn session_record(&self, session: &str) -> Result<(String, String, String)> {
        let format = format!("#{{{OPT_ROOT}}}\t#{{{OPT_WORKERS}}}\t#{{{OPT_DIR}}}");
        let target = pane_target(session);
        let out = self.run(&["display-message", "-p", "-t", &target, &format])?;
        let line = out.lines().next().unwrap_or("");
        let mut f = line.split('\t').map(str::to_string);
        Ok((
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
        ))
    }
}

/// Run `cmd` with stdin closed, capturing its output; a missing tmux says how to install it.
fn capture(cmd: &mut Command) -> Result<Output> {
    cmd.stdin(Stdio::null()).output().map_err(|e| {
        let source = if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(io::ErrorKind::NotFound, INSTALL_TMUX)
        } else {
            e
        };
        Error::io("run", "tmux", source)
    })
}

/// A session target matching `name` exactly (tmux otherwise matches prefixes).
pub(super) fn exact(name: &str) -> String {
    format!("={name}")
}

/// A pane-style target for the session (its current window and pane), for commands
/// such as `set-option` whose `-t` takes a pane.
pub(super) fn pane_target(name: &str) -> String {
    format!("={name}:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tmux_call_gets_the_socket() {
        let t = Tmux::new(Some("s1".into()));
        let args: Vec<_> = t.command().get_args().map(|a| a.to_owned()).collect();
        assert_eq!(args, ["-L", "s1"]);
        assert_eq!(Tmux::default().command().get_args().count(), 0);
        assert_eq!(t.attach_hint("w"), "tmux -L s1 attach -t w");
    }

    #[test]
    fn a_failed_tmux_command_names_its_whole_command_line() {
        use std::os::unix::process::ExitStatusExt;
        let out = Output {
            status: std::process::ExitStatus::from_raw(1 << 8),
            stdout: Vec::new(),
            stderr: b"can't find session: =x\n".to_vec(),
        };
        let err = Tmux::new(Some("s1".into())).failed(&["kill-session", "-t", "=x"], &out);
        assert!(matches!(&err, Error::Command { program, .. } if program == "tmux"));
        assert_eq!(
            err.to_string(),
            "`tmux -L s1 kill-session -t '=x'` failed (exit status: 1): can't find session: =x"
        );
    }
}
