//! Pushed to the client for the whole session: `notifications/message` (logger `conductor`, level `warning`) when a task needs approval or a daily budget is spent.
//!
//! Started once the client has initialized: a look at the root ([`Seen::now`]), then a
//! new one every [`EVERY`] for what is new since. A question already waiting
//! at the start is told too: it still waits for a person. The data is the event as the
//! `approvalCallback`/`budgetCallback` hooks get it on stdin, plus `message` (one line
//! for a person). A client that set `logging/setLevel` above `warning` is told nothing.

#![allow(deprecated)] // rmcp marks MCP logging deprecated (SEP-2577); clients still show it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    Implementation, LoggingLevel, LoggingMessageNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::{Peer, RoleServer};

use crate::hooks::news::{News, Seen};
use crate::Client;

/// How often the root is looked at: a few `stat`s a slot. A person's events need no
/// millisecond, and a standing subscription on the shared watcher would count as a wait.
const EVERY: Duration = Duration::from_secs(1);

/// Whether the client wants `warning` messages (it did not set a level above it).
static WANTED: AtomicBool = AtomicBool::new(true);

/// What the server offers (`initialize`'s answer): tools, resources and their
/// subscriptions, tasks, and logging — how these events reach the client.
pub fn server_config(instructions: &str) -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tasks()
            .build(),
    )
    .with_server_info(
        Implementation::new("conductor", env!("CARGO_PKG_VERSION"))
            .with_title("conductor: AI coding-agent workers"),
    )
    .with_instructions(instructions)
}

/// `logging/setLevel`: events are told at `warning`.
pub fn set_level(level: LoggingLevel) {
    use LoggingLevel::*;
    let quiet = matches!(level, Error | Critical | Alert | Emergency);
    WANTED.store(!quiet, Ordering::Relaxed);
}

/// Start telling `peer` of the root's events, until it has gone.
pub fn start(client: Client, peer: Peer<RoleServer>) {
    tokio::spawn(async move {
        if let Err(e) = tell_events(client, peer).await {
            tracing::warn!("no MCP notifications of approvals and budgets: {e}");
        }
    });
}

async fn tell_events(client: Client, peer: Peer<RoleServer>) -> anyhow::Result<()> {
    let root = client.root().clone();
    let mut seen = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || Seen::now(&root)).await?
    };
    loop {
        let looked = {
            let root = root.clone();
            tokio::task::spawn_blocking(move || {
                let news = seen.news(&root);
                (seen, news)
            })
            .await?
        };
        seen = looked.0;
        for news in looked.1 {
            let News::Told(event) = news else { continue };
            if !WANTED.load(Ordering::Relaxed) {
                continue;
            }
            let mut data = serde_json::to_value(&event)?;
            data["message"] = event.describe().into();
            let note = LoggingMessageNotificationParam::new(LoggingLevel::Warning, data)
                .with_logger("conductor");
            if peer.notify_logging_message(note).await.is_err() {
                return Ok(()); // the client has gone
            }
        }
        tokio::time::sleep(EVERY).await;
    }
}
