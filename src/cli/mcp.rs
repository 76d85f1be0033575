//! `conductor mcp [--root DIR]`: an MCP server on stdio whose tools submit, wait for and read tasks.
//!
//! The async runtime lives only here: the command builds a single-threaded tokio
//! runtime, serves rmcp on it, and runs every library call (all of them block) on the
//! runtime's blocking pool. Stdout carries nothing but JSON-RPC: logs go to stderr, and
//! [`stdio`] owns stdout.

mod checks;
mod events;
mod handles;
mod reply;
mod resources;
mod review;
pub mod schema;
mod spec_tasks;
mod stdio;
mod task_calls;
mod tools;
mod waits;

use std::time::Duration;

use rmcp::ServiceExt;

use super::RootArg;
use crate::cli::common::exit;
use crate::Client;

pub use tools::{Conductor, WAIT_CAP_SECS};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
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
    let served = runtime.block_on(serve(client));
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    served.map(|()| exit::OK)
}

async fn serve(client: Client) -> anyhow::Result<()> {
    tracing::debug!("MCP server on {}", client.root().path().display());
    let conductor = Conductor::new(client.clone());
    let io = stdio::start(
        tokio::io::stdin(),
        tokio::io::stdout(),
        client,
        conductor.hub(),
    );
    let service = conductor.serve((io.server_in, io.server_out)).await;
    match service {
        Ok(running) => {
            let ended = running.waiting().await;
            if let Err(e) = ended {
                tracing::warn!("the MCP session ended with an error: {e}");
            }
        }
        // The client went away or broke the handshake; it has been answered if it could be.
        Err(e) => tracing::warn!("the MCP session did not start: {e}"),
    }
    // Every reply written before the process ends (bounded: a writer stuck on a full
    // pipe whose reader is gone must not keep the process).
    let _ = tokio::time::timeout(Duration::from_secs(2), io.pump).await;
    io.filter.abort();
    Ok(())
}
