//! What the subcommands print: stdout that tolerates a closed pipe, JSON, results.

use std::io::Write as _;

/// Write `text` to stdout. A reader that went away (`conductor status | head -1`) is
/// not an error: the command simply ends, successfully.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(super::common::exit::OK)
        }
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Print one JSON document (pretty, camelCase as the library serializes it).
pub fn emit_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    emit(&s)
}

/// Whether nobody reads our stdout any more (the read end of a pipe was closed, or
/// the terminal hung up). Checked by long-running commands between writes, so they
/// end even when they have nothing to write.
pub fn stdout_closed() -> bool {
    use nix::libc;
    let mut fds = [libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, a zero timeout; poll only writes `revents`.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
}

/// A path shown relative to the root when it lies inside it.
pub fn show_path(root: &crate::Root, path: &std::path::Path) -> String {
    path.strip_prefix(root.path())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// Print a task result the way `conductor result` does: its output on stdout, the
/// error (if it failed) on stderr; or the whole result as JSON. Returns the exit code.
pub fn print_result(result: &crate::TaskResult, json: bool) -> anyhow::Result<i32> {
    if json {
        emit_json(result)?;
    } else {
        let mut out = result.output.clone();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        emit(&out)?;
    }
    // On stderr: the output stays the agent's alone for whoever reads it.
    if let Some(w) = crate::protocol::denial::warning(&result.denials) {
        eprintln!("task {}: warning: {w}", result.task_id);
    }
    if let (true, Some(c)) = (result.success, &result.until.check) {
        let rounds = result.until.rounds.unwrap_or(1);
        eprintln!(
            "task {}: the check `{}` passed after {rounds} round(s)",
            result.task_id, c.command
        );
    }
    if result.success {
        Ok(super::common::exit::OK)
    } else {
        // Named as it ended (`TIMED OUT`, `CANCELLED` …), then why, unless that repeats it.
        let label = result.outcome_label();
        match result.error.as_deref().unwrap_or("no reason recorded") {
            why if why.eq_ignore_ascii_case(label) => eprintln!("task {} {label}", result.task_id),
            why => eprintln!("task {} {label}: {why}", result.task_id),
        }
        Ok(crate::cli::common::exit::FAILURE)
    }
}

/// Write to stdout; `Ok(false)` when the reader has gone away.
pub(crate) fn write_out(bytes: &[u8]) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Copy a log to stdout; a reader that went away is no error.
pub(crate) fn copy_out(f: &mut std::fs::File) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    match std::io::copy(f, &mut out).and_then(|_| out.flush()) {
        Ok(()) => Ok(crate::cli::common::exit::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(crate::cli::common::exit::OK),
        Err(e) => Err(anyhow::Error::new(e).context("copying the log to stdout")),
    }
}
