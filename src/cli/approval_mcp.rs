//! `conductor approval-mcp` (hidden): the permission tool a worker gives its claude agent, one MCP tool over stdio that asks a person through the slot.
//!
//! Claude Code calls it (`--permission-prompt-tool mcp__conductor_approval__ask`) with
//! `{tool_name, input, tool_use_id}` for each tool call its rules neither allow nor
//! deny, and reads the answer from the text of the result: `{"behavior": "allow",
//! "updatedInput": …}` or `{"behavior": "deny", "message": …}` (the message is what
//! the model is told). One question at a time: calls are answered in order. The server
//! is a few lines of JSON-RPC over stdio rather than the `rmcp` runtime of `conductor
//! mcp`: it serves one tool, blocks in one wait, and must start fast with every agent.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded, Receiver};
use serde_json::{json, Value};

use crate::approval::{self, Asking, Decision};
use crate::worker::approval::SERVER_NAME;
use crate::{Root, Slot, TaskId};

use super::{args::parse_slot, args::task_id_arg};
use crate::cli::common::exit;

/// The tool's name (Claude Code calls it `mcp__conductor_approval__ask`).
const TOOL: &str = "ask";

/// The protocol version answered to a client that names none.
const PROTOCOL_VERSION: &str = "2025-06-18";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The conductor root whose slot asks.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// The slot the task runs on.
    #[arg(long, value_parser = parse_slot)]
    pub slot: Slot,
    /// The task whose agent asks.
    #[arg(long, value_parser = task_id_arg)]
    pub task: TaskId,
    /// How long a question waits for an answer before it is denied.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = Root::new(&args.root);
    let (lines_tx, lines) = unbounded::<String>();
    // Fires (by closing) when the agent closes our stdin: it went away.
    let (gone_tx, gone) = bounded::<()>(1);
    std::thread::Builder::new()
        .name("approval-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
            drop(gone_tx);
        })?;
    let mut out = std::io::stdout().lock();
    for line in lines.iter() {
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                reply(
                    &mut out,
                    Value::Null,
                    Err((-32700, format!("parse error: {e}"))),
                )?;
                continue;
            }
        };
        // A notification (no id) needs no answer.
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        let answer = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => Ok(initialized(&msg["params"])),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": [tool()] })),
            "tools/call" => call(&root, &args, &msg["params"], &gone),
            other => Err((-32601, format!("method not found: {other}"))),
        };
        reply(&mut out, id, answer)?;
    }
    Ok(exit::OK)
}

fn reply(
    out: &mut impl Write,
    id: Value,
    answer: std::result::Result<Value, (i64, String)>,
) -> anyhow::Result<()> {
    let msg = match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err((code, message)) => {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        }
    };
    writeln!(out, "{msg}")?;
    out.flush()?;
    Ok(())
}

fn initialized(params: &Value) -> Value {
    json!({
        "protocolVersion": params["protocolVersion"].as_str().unwrap_or(PROTOCOL_VERSION),
        "capabilities": { "tools": {} },
        "serverInfo": { "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") },
    })
}

fn tool() -> Value {
    json!({
        "name": TOOL,
        "description": "Ask the person running this conductor task to allow a tool call \
            (answered with `conductor approve ID` or `conductor deny ID`).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool_name": { "type": "string" },
                "input": { "type": "object" },
                "tool_use_id": { "type": "string" },
            },
            "required": ["tool_name", "input"],
        },
    })
}

/// One `tools/call`: ask, wait, and answer as Claude Code reads a permission tool.
fn call(
    root: &Root,
    args: &Args,
    params: &Value,
    gone: &Receiver<()>,
) -> std::result::Result<Value, (i64, String)> {
    if params["name"].as_str() != Some(TOOL) {
        return Err((-32602, format!("unknown tool {}", params["name"])));
    }
    let a = &params["arguments"];
    let Some(tool_name) = a["tool_name"].as_str() else {
        return Ok(text(
            json!({ "behavior": "deny", "message": "no tool_name to ask about" }),
            true,
        ));
    };
    let input = a["input"].clone();
    let asking = Asking {
        task_id: args.task.clone(),
        tool_name: tool_name.to_string(),
        input: input.clone(),
        tool_use_id: a["tool_use_id"].as_str().map(str::to_string),
    };
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let verdict = match approval::ask(root, args.slot, asking, timeout, gone) {
        Ok(a) if a.decision == Decision::Allow => {
            json!({ "behavior": "allow", "updatedInput": input })
        }
        Ok(a) => json!({
            "behavior": "deny",
            "message": format!(
                "denied through conductor: {}",
                a.reason.as_deref().unwrap_or(super::approve::DEFAULT_DENIAL)
            ),
        }),
        Err(e) => json!({
            "behavior": "deny",
            "message": format!("conductor could not ask for an approval: {e}"),
        }),
    };
    Ok(text(verdict, false))
}

/// A tool result whose one text block is `v` as JSON.
fn text(v: Value, is_error: bool) -> Value {
    json!({ "content": [{ "type": "text", "text": v.to_string() }], "isError": is_error })
}
