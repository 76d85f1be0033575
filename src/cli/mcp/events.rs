//! Pushed to the client for the whole session: `notifications/message` (logger `conductor`, level `warning`) when a task needs approval or a daily budget is spent.
//!
//! Started once the client has initialized: a look at the root ([`Seen::now`]), then a
//! new look at each change the shared hub sees in the slot directories, `workers/` and
//! `spend/` (and every [`RECHECK`], for slots made since). A question already waiting
//! at the start is told too: it still waits for a person. The data is the event as the
//! `approvalCallback`/`budgetCallback` hooks get it on stdin, plus `message` (one line
//! for a person). A client that set `logging/setLevel` above `warning` is told nothing.

#![allow(deprecated)] // rmcp marks MCP logging deprecated (SEP-2577); clients still show it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;

use crate::hooks::news::{News, Seen};
use crate::wait::Hub;
use crate::watch::Interest;
use crate::Client;

/// The safety net between looks, as every other MCP watch has.
const RECHECK: Duration = Duration::from_secs(1);

/// Whether the client wants `warning` messages (it did not set a level above it).
static WANTED: AtomicBool = AtomicBool::new(true);

/// `logging/setLevel`: events are told at `warning`.
pub fn set_level(level: LoggingLevel) {
    use LoggingLevel::*;
    let quiet = matches!(level, Error | Critical | Alert | Emergency);
    WANTED.store(!quiet, Ordering::Relaxed);
}

/// Start telling `peer` of the root's events, until it has gone.
pub fn start(client: Client, hub: Hub, peer: Peer<RoleServer>) {
    tokio::spawn(async move {
        if let Err(e) = tell_events(client, hub, peer).await {
            tracing::warn!("no MCP notifications of approvals and budgets: {e}");
        }
    });
}

async fn tell_events(client: Client, hub: Hub, peer: Peer<RoleServer>) -> anyhow::Result<()> {
    let root = client.root().clone();
    let woken = Arc::new(Notify::new());
    let (mut seen, _sub) = {
        let (root, woken) = (root.clone(), woken.clone());
        tokio::task::spawn_blocking(move || {
            let all: Interest = Arc::new(|_: &std::path::Path| true);
            let sub = hub.subscribe(
                &Seen::dirs(&root),
                all,
                Arc::new(move || woken.notify_one()),
            );
            (Seen::now(&root), sub.ok())
        })
        .await?
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
        tokio::select! {
            _ = woken.notified() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}
