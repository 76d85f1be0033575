//! `conductor mcp [--root DIR]`: the MCP server of [`crate::mcp`] on stdio, on a runtime of its own.
//!
//! The async runtime lives only here: the command builds a single-threaded tokio
//! runtime, serves [`crate::mcp::serve`] on it, and every library call (all of them
//! block) runs on the runtime's blocking pool.

use std::time::Duration;

use super::args::RootArg;
use crate::cli::common::exit;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Speaks the Model Context Protocol (JSON-RPC, one message per line) on stdin/stdout, for an \
agent that orchestrates the workers: `claude mcp add conductor -- conductor mcp`. Tools: \
submit, send, wait, result, retry, tasks, totals, queue, status, cancel, logs, edit, pause, \
resume, diff, merge, discard; resources \
conductor://tasks/{id} and conductor://tasks/{id}/log. A task needing approval and a daily \
budget spent are pushed as notifications/message (level warning). Logs go to stderr. Ends \
when stdin closes.

Fan-out: inside an agent started by a worker, CONDUCTOR_DEPTH is its task's depth + 1, and \
submit/send refuse past CONDUCTOR_MAX_DEPTH (default 3).")]
pub struct Args {
    #[command(flatten)]
    pub root: RootArg,
}

/// The most threads the server's blocking calls use at once. Every call is short (a
/// `wait` looks for a moment and then sleeps on the async thread), so more would only
/// hold memory after a burst.
pub const BLOCKING_THREADS: usize = 8;

/// How long the end of the server waits for blocking calls still running (a `wait`
/// whose client went away) before leaving them.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(100);

pub fn run(args: Args) -> anyhow::Result<i32> {
    // The root may not exist yet: each tool call checks it and says what to run.
    let client = args.root.unchecked_client()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the MCP server's runtime: {e}"))?;
    runtime.block_on(crate::mcp::serve(client));
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    Ok(exit::OK)
}
