//! Tool calls answered with a task handle (the Tasks extension, see [`handles`]): a `submit` with `wait: true` or a `wait` for one unfinished task, from a client that negotiated the extension.

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::handles::{self, Handle, Origin};
use super::tools::{to_call, Conductor, IdArg};
use super::{reply, resources};
use crate::{Error, TaskId};

impl Conductor {
    /// The handle given for task `id`, if any.
    pub(super) fn handle(&self, id: &TaskId) -> Option<Handle> {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id.to_string())
            .cloned()
    }

    /// A `submit` with wait or a `wait` for one task, from a client of the Tasks
    /// extension: answered at once with a handle on the conductor task (see
    /// [`handles`]). A call refused before there is a task is answered as usual.
    pub(super) async fn call_as_task(
        &self,
        origin: Origin,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let chars = args
            .get("maxOutputChars")
            .and_then(Value::as_u64)
            .map_or(reply::DEFAULT_OUTPUT_CHARS, |n| n as usize);
        let given = match origin {
            Origin::Submit => {
                // Submit without waiting; the handle is the wait.
                if let Some(a) = request.arguments.as_mut() {
                    a.remove("wait");
                    a.remove("waitSecs");
                }
                let peer = context.peer.clone();
                let call = ToolCallContext::new(self, request, context);
                let submitted = match self.tool_router.call(call).await? {
                    CallToolResponse::Complete(r) => r,
                    other => return Ok(other),
                };
                let given = match (&submitted.is_error, &submitted.structured_content) {
                    (Some(false) | None, Some(v)) if v.get("id").is_some() => v["id"].clone(),
                    _ => return Ok(submitted.into()),
                };
                return Ok(
                    match self.hand_out(origin, given.clone(), chars, peer).await? {
                        Some(handed) => handed,
                        // Finished already: the answer `submit` with wait gives once it has.
                        None => self.finished_answer(given, chars).await?.into(),
                    },
                );
            }
            Origin::Wait => args
                .get("ids")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .cloned()
                .unwrap_or(Value::Null),
        };
        let answered = self
            .hand_out(origin, given, chars, context.peer.clone())
            .await?;
        if let Some(answered @ CallToolResponse::Task(_)) = answered {
            return Ok(answered);
        }
        // Finished already, no such task, or a bad id: the plain `wait` answers.
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// The answer of `submit` with wait for task `given`, which has finished: its
    /// result as the handle would have given it once completed.
    async fn finished_answer(
        &self,
        given: Value,
        chars: usize,
    ) -> Result<CallToolResult, ErrorData> {
        let id = match given_id(&given) {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)),
        };
        let handle = Handle::new(Origin::Submit, Some(given), chars);
        let answer = self
            .reply(move |client| {
                let Some(r) = client.result_of(&id)? else {
                    return Ok(Err(reply::no_such_task(client, &id).to_string()));
                };
                Ok(Ok(Value::Object(handles::call_result(
                    &id,
                    &r,
                    Some(&handle),
                ))))
            })
            .await;
        match answer {
            Ok(v) => serde_json::from_value(v)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None)),
            Err(msg) => to_call(Err(msg)),
        }
    }

    /// A handle on the task the client names `given`, remembered, and followed with
    /// `notifications/tasks` until it finishes; `None` when it has finished already (a
    /// plain answer then), a plain tool error when there is no such task.
    async fn hand_out(
        &self,
        origin: Origin,
        given: Value,
        chars: usize,
        peer: rmcp::Peer<RoleServer>,
    ) -> Result<Option<CallToolResponse>, ErrorData> {
        let id = match given_id(&given) {
            Ok(id) => id,
            Err(msg) => return to_call(Err(msg)).map(|r| Some(r.into())),
        };
        let handle = Handle::new(origin, Some(given), chars);
        let (client, id2, h2) = (self.client.clone(), id.clone(), handle.clone());
        let found = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            Ok::<_, Error>(match handles::detailed(&client, &id2, Some(&h2))? {
                Some(t) => Ok(t.task),
                None => Err(reply::no_such_task(&client, &id2).to_string()),
            })
        })
        .await;
        let seed = match found {
            Ok(Ok(Ok(seed))) if seed.status.is_terminal() => return Ok(None),
            Ok(Ok(Ok(seed))) => seed,
            Ok(Ok(Err(msg))) => return to_call(Err(msg)).map(|r| Some(r.into())),
            Ok(Err(e)) => return to_call(Err(e.to_string())).map(|r| Some(r.into())),
            Err(e) => return Err(ErrorData::internal_error(e.to_string(), None)),
        };
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), handle.clone());
        let (client, named) = (
            self.client.clone(),
            resources::Named {
                id: id.clone(),
                log: false,
            },
        );
        // Tells the client where the task is now, if that is not `was`; false when the
        // client has gone.
        let tell_now = {
            let (client, id, handle) = (client.clone(), id.clone(), handle.clone());
            move |was: Option<rmcp::model::TaskStatus>| {
                let (c, id, h, peer) = (client.clone(), id.clone(), handle.clone(), peer.clone());
                async move {
                    let now =
                        tokio::task::spawn_blocking(move || handles::detailed(&c, &id, Some(&h)))
                            .await;
                    match now {
                        Ok(Ok(Some(task))) if Some(task.status()) == was => true,
                        Ok(Ok(Some(task))) => handles::tell(&peer, task).await,
                        _ => false,
                    }
                }
            }
        };
        let on_change = tell_now.clone();
        let follow =
            resources::watch(client, self.hub.clone(), named, move || on_change(None)).await;
        let was = seed.status;
        tokio::spawn(async move {
            // A change between the seed and the arming of the watch is told here (the
            // watch only tells changes after it was armed).
            if tell_now(Some(was)).await {
                if let Ok(follow) = follow {
                    follow.await;
                }
            }
        });
        Ok(Some(CallToolResponse::Task(CreateTaskResult::new(seed))))
    }
}

/// The conductor id of an id as the client gave it (a string or a number).
fn given_id(given: &Value) -> std::result::Result<TaskId, String> {
    serde_json::from_value::<IdArg>(given.clone())
        .map_err(|e| e.to_string())
        .and_then(|g| g.id())
}

impl Conductor {
    /// Whether a call becomes a task handle for a client of the Tasks extension: a
    /// `submit` with `wait: true`, or a `wait` for one task.
    pub(super) fn handle_origin(request: &CallToolRequestParams) -> Option<Origin> {
        let args = request.arguments.as_ref()?;
        match request.name.as_ref() {
            "submit" if args.get("wait") == Some(&Value::Bool(true)) => Some(Origin::Submit),
            "wait"
                if args
                    .get("ids")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.len() == 1) =>
            {
                Some(Origin::Wait)
            }
            _ => None,
        }
    }
}
