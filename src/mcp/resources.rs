//! Tasks as MCP resources: `conductor://tasks/{id}` (its state and result, JSON) and `conductor://tasks/{id}/log` (its output), each one subscribable.
//!
//! A subscription follows its task on the server's shared [`Hub`] (no watcher of its
//! own) and sends `notifications/resources/updated` whenever what a read would return
//! changes: the task's state or slot, or its result; for the log, also its size (at most
//! every [`LOG_EVERY`]). It ends with `resources/unsubscribe`, once the task has finished
//! and the last change is told, or when the client goes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ResourceContents, ResourceTemplate};
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;

use super::reply;
use crate::tasks::TaskState;
use crate::wait::Hub;
use crate::watch::Interest;
use crate::{Client, Error, TaskId};

const PREFIX: &str = "conductor://tasks/";

/// How often at most a log subscriber is told its log grew.
pub const LOG_EVERY: Duration = Duration::from_millis(250);

/// The safety net: a subscription looks again this often even without an event.
const RECHECK: Duration = Duration::from_secs(1);

/// How much of a log a read returns (its end), in bytes.
const LOG_BYTES: u64 = 256 * 1024;

/// What a resource URI names.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub id: TaskId,
    pub log: bool,
}

/// The task (and whether its log) a URI names; `Err` says why it names none.
pub fn parse(uri: &str) -> Result<Named, Error> {
    let bad = |reason: String| Error::BadArgument {
        field: "uri".into(),
        reason,
    };
    let rest = uri.strip_prefix(PREFIX).ok_or_else(|| {
        bad(format!(
            "{uri:?} is not a conductor resource (conductor://tasks/{{id}} or conductor://tasks/{{id}}/log)"
        ))
    })?;
    let (id, log) = match rest.strip_suffix("/log") {
        Some(id) => (id, true),
        None => (rest, false),
    };
    let id = TaskId::parse(id).map_err(bad)?;
    Ok(Named { id, log })
}

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{PREFIX}{{id}}"), "task")
            .with_title("A conductor task")
            .with_description(
                "A task's state (queued, working on slot N, done…) and, once it has finished, \
                 its result (output, success, error, duration, cost), as JSON. Subscribe to be \
                 told when it changes.",
            )
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{PREFIX}{{id}}/log"), "task-log")
            .with_title("A conductor task's output")
            .with_description(
                "What the task's agent has printed (its last 256 KiB): live while it runs. \
                 Subscribe to be told when it grows.",
            )
            .with_mime_type("text/plain"),
    ]
}

/// Read the resource at `uri` (blocking).
pub fn read(client: &Client, uri: &str) -> crate::Result<ResourceContents> {
    let named = parse(uri)?;
    if named.log {
        let v = reply::logs(client, &named.id, LOG_BYTES)?;
        let text = v["text"].as_str().map(str::to_string).unwrap_or_else(|| {
            v["note"]
                .as_str()
                .map_or_else(String::new, |n| format!("({n})"))
        });
        Ok(ResourceContents::text(text, uri))
    } else {
        let v = reply::task_result(client, &named.id, reply::DEFAULT_OUTPUT_CHARS)?;
        Ok(ResourceContents::text(v.to_string(), uri).with_mime_type("application/json"))
    }
}

/// What a read of the resource depends on: a change here is an update.
#[derive(Debug, Clone, PartialEq)]
struct Mark {
    state: TaskState,
    slot: Option<u32>,
    log_bytes: Option<u64>,
}

fn mark(client: &Client, named: &Named) -> crate::Result<Mark> {
    let loc = client
        .find_task(&named.id)?
        .ok_or_else(|| reply::no_such_task(client, &named.id))?;
    let log_bytes = match (named.log, loc.state, loc.slot) {
        (true, TaskState::Running, Some(s)) => {
            std::fs::metadata(client.root().worker(s).output_log())
                .ok()
                .map(|m| m.len())
        }
        _ => None,
    };
    Ok(Mark {
        state: loc.state,
        slot: loc.slot.map(|s| s.0),
        log_bytes,
    })
}

/// Check `uri` names a task there is, and subscribe it: the hub's subscription is armed
/// before this returns; the returned future tells `peer` of each change until the task
/// has finished (abort it to unsubscribe).
pub async fn follow(
    client: Client,
    hub: Hub,
    uri: String,
    peer: Peer<RoleServer>,
) -> crate::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let named = parse(&uri)?;
    let log = named.log;
    watch(client, hub, named, move || {
        let (peer, uri) = (peer.clone(), uri.clone());
        async move {
            let told = peer
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                .await;
            if told.is_ok() && log {
                tokio::time::sleep(LOG_EVERY).await;
            }
            told.is_ok()
        }
    })
    .await
}

/// Follow `named` on the hub: the subscription is armed before this returns; the
/// returned future calls `tell` at each change of what a read would return, until the
/// task has finished (after telling that) or `tell` answers false (the client has gone).
pub async fn watch<F, Fut>(
    client: Client,
    hub: Hub,
    named: Named,
    mut tell: F,
) -> crate::Result<impl std::future::Future<Output = ()> + Send + 'static>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let woken = Arc::new(Notify::new());
    let (sub, first) = {
        let (client, named, woken) = (client.clone(), named.clone(), woken.clone());
        blocking(move || {
            let first = mark(&client, &named)?;
            let root = client.root();
            let mut dirs = vec![root.queue_results(), root.queue_pending()];
            crate::fsio::ensure_dir(&root.queue_results())?;
            for s in root.slots()? {
                let w = root.worker(s);
                crate::fsio::ensure_dir(&w.results_dir())?;
                dirs.push(w.dir.clone());
                dirs.push(w.results_dir());
            }
            dirs.retain(|d| d.is_dir());
            let result = format!("{}.json", named.id);
            let pending = format!("~{}.json", named.id);
            let log = named.log;
            let names: HashSet<String> = ["running.json", "task.json"]
                .into_iter()
                .map(String::from)
                .chain([result])
                .chain(log.then(|| "output.log".to_string()))
                .collect();
            let interest: Interest = Arc::new(move |p: &std::path::Path| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| names.contains(n) || n.ends_with(&pending))
            });
            let sub = hub.subscribe(&dirs, interest, Arc::new(move || woken.notify_one()))?;
            Ok::<_, Error>((sub, first))
        })
        .await??
    };
    Ok(async move {
        let _sub = sub;
        let mut last = first;
        loop {
            if last.state.is_finished() {
                return;
            }
            tokio::select! {
                _ = woken.notified() => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
            let (c, n) = (client.clone(), named.clone());
            let Ok(Ok(now)) = blocking(move || mark(&c, &n)).await else {
                return;
            };
            if now != last {
                last = now;
                if !tell().await {
                    return; // the client has gone
                }
            }
        }
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> crate::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::CallFailed {
            what: "a look at a subscribed task".into(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_a_task_or_its_log() {
        assert_eq!(
            parse("conductor://tasks/abc-1").unwrap(),
            Named {
                id: TaskId::from("abc-1"),
                log: false
            }
        );
        assert_eq!(
            parse("conductor://tasks/12345/log").unwrap(),
            Named {
                id: TaskId::Number(12345),
                log: true
            }
        );
        assert!(parse("file:///x").is_err());
        assert!(parse("conductor://tasks/a/b").is_err());
    }
}
