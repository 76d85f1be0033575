//! tmux's private servers (`tmux -L NAME`): `--list` and `--kill` look on each, so a
//! session launched with `--socket` is found without it.
//!
//! tmux keeps a server's socket in `${TMUX_TMPDIR:-/tmp}/tmux-<uid>/<name>`; `default`
//! is the server a bare `tmux` uses. A socket left by a server that has gone answers
//! "no server running", which [`list`] counts as no sessions.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use super::stop::{list, SessionInfo};
use super::tmux::Tmux;
use super::problem::Result;

/// Where tmux keeps this user's server sockets.
fn socket_dir() -> PathBuf {
    std::env::var_os("TMUX_TMPDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(format!("tmux-{}", nix::unistd::getuid()))
}

/// The names of this user's private tmux servers (every socket but `default`), sorted.
fn private_sockets() -> Vec<String> {
    let Ok(entries) = fs::read_dir(socket_dir()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n != "default")
        .collect();
    names.sort();
    names
}

/// The servers to look on: `given` alone when it names a socket, else the default
/// server and every private one.
fn servers(given: &Tmux) -> Vec<Tmux> {
    if given.socket().is_some() {
        return vec![given.clone()];
    }
    std::iter::once(given.clone())
        .chain(private_sockets().into_iter().map(|s| Tmux::new(Some(s))))
        .collect()
}

/// The conductor sessions on `given`'s server, or without a socket given, on the
/// default server and every private one (each says its `socket`). A private server
/// that cannot be asked is skipped, with a warning.
pub fn list_everywhere(given: &Tmux) -> Result<Vec<SessionInfo>> {
    let mut all = list(given)?;
    for server in servers(given).into_iter().skip(1) {
        match list(&server) {
            Ok(found) => all.extend(found),
            Err(e) => tracing::warn!("tmux server {}: {e}", server.socket().unwrap_or("default")),
        }
    }
    Ok(all)
}

/// The private servers (not `given`'s) on which a session named `session` runs: where
/// a `--kill` without `--socket` that found nothing on the default server looks next.
pub fn servers_with(given: &Tmux, session: &str) -> Vec<Tmux> {
    servers(given)
        .into_iter()
        .skip(1)
        .filter(|s| s.has_session(session).unwrap_or(false))
        .collect()
}
