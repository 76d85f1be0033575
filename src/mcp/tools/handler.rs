//! The MCP server's handler: tool calls checked against their schemas, the Tasks extension's `tasks/get` and `tasks/cancel`, resources and their subscriptions.

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::super::{handles, reply, resources, schema};
use super::{Conductor, INSTRUCTIONS};
use crate::tasks::ListOptions;
use crate::{Error, TaskId};

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Conductor {
    /// Arguments that do not fit the tool's input schema are refused here, as a tool
    /// error naming the field (rmcp's own refusal is a JSON-RPC error clients hide).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(tool) = self.tool_router.get(&request.name) {
            let schema = Value::Object((*tool.input_schema).clone());
            let args = Value::Object(request.arguments.clone().unwrap_or_default());
            if let Err(msg) = schema::check(&schema, &args) {
                let msg = format!("{}: {msg}", request.name);
                return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]).into());
            }
        }
        if handles::negotiated(&context) {
            if let Some(origin) = Self::handle_origin(&request) {
                return self.call_as_task(origin, request, context).await;
            }
        }
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// `tasks/get`: the conductor task of that id, wherever it is.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = TaskId::parse(&request.task_id)
            .map_err(|reason| ErrorData::invalid_params(format!("taskId: {reason}"), None))?;
        let handle = self.handle(&id);
        let client = self.client.clone();
        let found = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            handles::detailed(&client, &id, handle.as_ref())
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match found {
            Some(task) => Ok(GetTaskResult::new(task)),
            None => Err(ErrorData::invalid_params(
                format!("no task {} on this root", request.task_id),
                None,
            )),
        }
    }

    /// `tasks/cancel`: cancel the conductor task (withdrawn if it waits, stopped if it
    /// runs); `tasks/get` then says cancelled. A task already finished stays as it is.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = TaskId::parse(&request.task_id)
            .map_err(|reason| ErrorData::invalid_params(format!("taskId: {reason}"), None))?;
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            if client.find_task(&id)?.is_none() {
                return Ok(Err(format!("no task {id} on this root")));
            }
            reply::cancel(&client, &id).map(|_| Ok(()))
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|msg| ErrorData::invalid_params(msg, None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    /// The newest tasks (one page of `tasks`), each as its resource.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let client = self.client.clone();
        let listed = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            client.list_tasks(&ListOptions {
                limit: Some(crate::tasks::list::DEFAULT_LIMIT),
                ..ListOptions::default()
            })
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(
            listed
                .iter()
                .map(|t| {
                    Resource::new(
                        format!("conductor://tasks/{}", t.id),
                        format!("task {}", t.id),
                    )
                    .with_description(format!(
                        "{}: {}",
                        t.state,
                        t.prompt_preview.as_deref().unwrap_or("")
                    ))
                    .with_mime_type("application/json")
                })
                .collect(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = self.client.clone();
        let uri = request.uri;
        let read = tokio::task::spawn_blocking(move || {
            client.root().require_existing()?;
            resources::read(&client, &uri)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        match read {
            Ok(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            Err(e @ (Error::NoSuchTask { .. } | Error::BadArgument { .. })) => {
                Err(ErrorData::resource_not_found(e.to_string(), None))
            }
            Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
        }
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        let follow = resources::follow(
            self.client.clone(),
            self.hub.clone(),
            uri.clone(),
            context.peer.clone(),
        )
        .await
        .map_err(|e| match e {
            Error::NoSuchTask { .. } | Error::BadArgument { .. } => {
                ErrorData::resource_not_found(e.to_string(), None)
            }
            e => ErrorData::internal_error(e.to_string(), None),
        })?;
        let handle = tokio::spawn(follow).abort_handle();
        let old = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uri, handle);
        if let Some(old) = old {
            old.abort();
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let gone = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        if let Some(h) = gone {
            h.abort();
        }
        Ok(())
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        crate::mcp::events::start(self.client.clone(), context.peer);
    }
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        crate::mcp::events::set_level(request.level);
        Ok(())
    }
    fn get_info(&self) -> ServerConfig {
        crate::mcp::events::server_config(INSTRUCTIONS)
    }
}
