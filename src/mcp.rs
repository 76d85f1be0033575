//! The MCP server: tools that submit, wait for and read tasks, over the verbs and the rest of the library; the CLI's `conductor mcp` runs it.
//!
//! It imports nothing from the CLI (the architecture test holds it to that). Stdout
//! carries nothing but JSON-RPC: logs go to stderr, and [`stdio`] owns stdout.

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

use crate::Client;

pub use tools::Conductor;

/// Serve the MCP server over `client`'s root on stdin/stdout until the client closes
/// stdin (or the session breaks: logged). Runs on the caller's tokio runtime.
pub async fn serve(client: Client) {
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
}
