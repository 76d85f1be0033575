//! The `conductor` subcommands, one module each: an `Args` (clap) and a `run`.

pub mod cancel;
pub mod completions;
pub mod doctor;
pub mod gc;
pub mod init;
pub mod launch;
pub mod locks;
pub mod logs;
pub mod queue;
pub mod recover;
pub mod result;
pub mod retry;
pub mod run;
pub mod send;
pub mod status;
pub mod submit;
pub mod wait;

use std::path::PathBuf;

use conductor::{Client, Slot};

/// `--root`, shared by every subcommand that reads or writes a root.
#[derive(Debug, Clone, clap::Args)]
pub struct RootArg {
    /// Conductor root [default: $CONDUCTOR_HOME, else ~/.claude-code/orchestrator].
    #[arg(long, value_name = "DIR", global = true)]
    pub root: Option<PathBuf>,
}

impl RootArg {
    pub fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::from_env(self.root.as_deref())?)
    }
}

/// Parse a slot number for clap, with the library's error text.
pub fn parse_slot(s: &str) -> Result<Slot, String> {
    s.parse::<Slot>().map_err(|e| e.to_string())
}

// ---- output helpers shared by status, locks, logs, gc, doctor, wait ----

/// Write `text` to stdout. A reader that went away (`conductor status | head -1`) is
/// not an error: the command simply ends, successfully.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(crate::common::exit::OK)
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

/// Install a Ctrl-C / SIGTERM / SIGHUP handler; the receiver gets `()` when one arrives.
pub fn interrupt_channel() -> anyhow::Result<crossbeam_channel::Receiver<()>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = tx.try_send(());
    })
    .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    Ok(rx)
}

/// Parse a duration given as seconds (`30`, `1.5`) or in words (`90s`, `5m`, `1h30m`).
pub fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a usable number of seconds"));
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration such as 30, 90s, 5m or 1h30m: {e}"))
}

/// Fit a plain-text table into `width` columns: two spaces between columns; when too
/// wide, column `shrink` is cut (with `…`). Each row may carry note lines, printed
/// under it indented.
pub fn render_table(
    headers: &[&str],
    rows: &[(Vec<String>, Vec<String>)],
    shrink: Option<usize>,
    width: usize,
) -> String {
    let cols = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for (cells, _) in rows {
        for (i, c) in cells.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let total = widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
    if let Some(k) = shrink {
        if total > width && k < cols {
            let over = total - width;
            widths[k] = widths[k]
                .saturating_sub(over)
                .max(headers[k].chars().count().max(6));
        }
    }
    let fit = |s: &str, w: usize| -> String {
        if s.chars().count() <= w {
            s.to_string()
        } else {
            let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
            t.push('…');
            t
        }
    };
    let line = |cells: &[String]| -> String {
        let mut l = String::new();
        for (i, w) in widths.iter().enumerate() {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let c = fit(c, *w);
            if i + 1 == cols {
                l.push_str(&c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = *w));
            }
        }
        l.trim_end().to_string()
    };
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    out.push_str(&line(&header));
    out.push('\n');
    for (cells, notes) in rows {
        out.push_str(&line(cells));
        out.push('\n');
        for n in notes {
            out.push_str("      ");
            out.push_str(n);
            out.push('\n');
        }
    }
    out
}

/// A path shown relative to the root when it lies inside it.
pub fn show_path(root: &conductor::Root, path: &std::path::Path) -> String {
    path.strip_prefix(root.path())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// Print a task result the way `conductor result` does: its output on stdout, the
/// error (if it failed) on stderr; or the whole result as JSON. Returns the exit code.
pub fn print_result(result: &conductor::TaskResult, json: bool) -> anyhow::Result<i32> {
    if json {
        emit_json(result)?;
    } else {
        let mut out = result.output.clone();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        emit(&out)?;
    }
    if result.success {
        Ok(crate::common::exit::OK)
    } else {
        eprintln!(
            "task {} failed: {}",
            result.task_id,
            result.error.as_deref().unwrap_or("no reason recorded")
        );
        Ok(crate::common::exit::FAILURE)
    }
}

/// A task id from the command line: digits become a number, as clients write them.
pub fn task_id_arg(s: &str) -> Result<conductor::TaskId, conductor::Error> {
    conductor::TaskId::parse(s).map_err(|reason| conductor::Error::InvalidTask { reason })
}
