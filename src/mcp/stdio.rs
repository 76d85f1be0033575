//! The MCP server's stdio: a line filter that answers unparsable lines itself, and one writer owning stdout.
//!
//! rmcp drops a line that is not JSON without a word (so that two peers cannot feed each
//! other errors forever); JSON-RPC 2.0 asks for a parse error (-32700, id null), and a
//! client that sent garbage is better told. So stdin goes through [`filter`], which passes
//! every line that is JSON on to rmcp and answers the others itself; and stdout has a
//! single writer, [`pump`], which writes rmcp's messages and those answers whole lines at
//! a time, so the two can never interleave inside a line.
//!
//! Both ends also pass their lines through the session's [`SpecTasks`], which serves
//! the spec's 2025-11-25 Tasks utility around rmcp (see [`super::spec_tasks`]).

use std::io;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::spec_tasks::{Inbound, Outbound, SpecTasks};
use crate::wait::Hub;
use crate::Client;

/// The longest line accepted (rmcp's own limit); a longer one is answered and dropped.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// In-process pipe buffer between the filter, rmcp and the writer.
const PIPE_BUF: usize = 64 * 1024;

/// The ends rmcp serves on, and the tasks that feed and drain them.
pub struct Stdio {
    /// What rmcp reads: the client's lines that are JSON.
    pub server_in: DuplexStream,
    /// What rmcp writes: its messages, copied to stdout line by line.
    pub server_out: DuplexStream,
    /// Ends when stdin ends (or fails).
    pub filter: JoinHandle<()>,
    /// Ends when rmcp has closed its writer and every answer is written.
    pub pump: JoinHandle<()>,
}

/// Start the filter on `input` and the writer on `output` (stdin and stdout, or pipes
/// in tests); the Tasks translation works on `client`'s root with the server's `hub`.
pub fn start<R, W>(input: R, output: W, client: Client, hub: Hub) -> Stdio
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (server_in, filter_out) = tokio::io::duplex(PIPE_BUF);
    let (server_out, pump_in) = tokio::io::duplex(PIPE_BUF);
    let (answers, pending) = mpsc::unbounded_channel();
    let tasks = SpecTasks::new(client, hub, answers.clone());
    let tasks2 = tasks.clone();
    let filter = tokio::spawn(async move {
        if let Err(e) = filter(BufReader::new(input), filter_out, answers, tasks2).await {
            tracing::debug!("reading the client's messages: {e}");
        }
    });
    let pump = tokio::spawn(async move {
        if let Err(e) = pump(BufReader::new(pump_in), pending, output, tasks).await {
            tracing::debug!("writing to the client: {e}");
        }
    });
    Stdio {
        server_in,
        server_out,
        filter,
        pump,
    }
}

/// The JSON-RPC answer to a line that is not JSON: a parse error with a null id (no id
/// can be read from it).
pub fn parse_error(detail: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32700, "message": format!("Parse error: {detail}") },
    })
    .to_string()
}

/// What one line of the client's says: pass it on, answer it, or nothing.
#[derive(Debug, PartialEq)]
enum Verdict {
    Pass,
    Skip,
    Answer(String),
}

fn judge(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // RFC 8259 lets a parser ignore a leading byte order mark; rmcp does.
    let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    match serde_json::from_slice::<Probe>(body) {
        Ok(probe) => nameless_call(&probe).map_or(Verdict::Pass, Verdict::Answer),
        // JSON that is not one request (a batch, a bare value): rmcp's to judge.
        Err(_) => match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Verdict::Pass,
            Err(e) => Verdict::Answer(parse_error(&format!("the line is not JSON ({e})"))),
        },
    }
}

/// The parts of a request looked at here (the rest is skipped, not kept).
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(default)]
    id: Option<serde_json::Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<ProbeParams>,
}

#[derive(serde::Deserialize)]
struct ProbeParams {
    #[serde(default)]
    name: Option<serde_json::Value>,
}

/// The answer to a `tools/call` request that names no tool: invalid params (-32602).
/// rmcp cannot parse it as a call and would answer "method not found" (-32601), which
/// tells the client the wrong thing.
fn nameless_call(probe: &Probe) -> Option<String> {
    let id = probe
        .id
        .as_ref()
        .filter(|id| id.is_string() || id.is_number())?;
    if probe.method.as_deref() != Some("tools/call") {
        return None;
    }
    let named = probe
        .params
        .as_ref()
        .and_then(|p| p.name.as_ref())
        .is_some_and(serde_json::Value::is_string);
    (!named).then(|| {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": -32602,
                "message": "Invalid params: tools/call needs `params.name`, the name of the tool to call (see tools/list)",
            },
        })
        .to_string()
    })
}

/// Copy the client's JSON lines to rmcp; answer the rest through `answers`.
async fn filter<R: AsyncBufRead + Unpin>(
    mut input: R,
    mut to_server: DuplexStream,
    answers: mpsc::UnboundedSender<String>,
    tasks: std::sync::Arc<SpecTasks>,
) -> io::Result<()> {
    let mut line = Vec::new();
    while let Some(fits) = next_line(&mut input, &mut line).await? {
        let verdict = if fits {
            judge(&line)
        } else {
            // `line` holds the line's first bytes: its id, if readable there, is answered.
            Verdict::Answer(too_long(head_id(&line)))
        };
        match verdict {
            Verdict::Pass => {
                let line = match tasks.inbound(&line) {
                    Inbound::Pass => &line,
                    Inbound::Rewritten(l) => {
                        line = l;
                        &line
                    }
                    Inbound::Taken => continue,
                };
                to_server.write_all(line).await?;
                if !line.ends_with(b"\n") {
                    to_server.write_all(b"\n").await?;
                }
            }
            Verdict::Skip => {}
            Verdict::Answer(a) => {
                if answers.send(a).is_err() {
                    break;
                }
            }
        }
    }
    // Dropping `to_server` here is rmcp's end of input: the service stops.
    Ok(())
}

/// How much of an over-long line is kept to read its id from.
const HEAD: usize = 4096;

/// The answer to a line over [`MAX_LINE`]: an invalid request, with the request's id
/// when it could be read from the line's start (else null).
pub fn too_long(id: Option<serde_json::Value>) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": format!("Invalid request: the line is longer than {MAX_LINE} bytes; it was dropped"),
        },
    })
    .to_string()
}

/// The top-level `"id"` of a JSON-RPC message from its first bytes (a number or a
/// string), if it comes before the cut: messages put it near the start.
fn head_id(head: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(head);
    let b = text.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                // A string: read it whole (escapes skipped).
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let key = text.get(start..=i.min(b.len() - 1))?;
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if depth == 1 && key == "\"id\"" && b.get(j) == Some(&b':') {
                    return id_value(text[j + 1..].trim_start());
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The id value at the start of `rest`, only if it ends before the cut (a number cut
/// short would be another id).
fn id_value(rest: &str) -> Option<serde_json::Value> {
    let b = rest.as_bytes();
    let end = if b.first() == Some(&b'"') {
        let mut i = 1;
        while i < b.len() && b[i] != b'"' {
            i += if b[i] == b'\\' { 2 } else { 1 };
        }
        (i < b.len()).then_some(i + 1)?
    } else {
        let n = b
            .iter()
            .position(|c| !(c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E')))?;
        (n > 0).then_some(n)?
    };
    serde_json::from_str(&rest[..end])
        .ok()
        .filter(|v: &serde_json::Value| v.is_number() || v.is_string())
}

/// Read the next line (with its newline, if it has one) into `line`, never holding
/// more than [`MAX_LINE`] bytes: `Some(true)` a line, `Some(false)` a line too long
/// (dropped: `line` holds its first [`HEAD`] bytes), `None` at the end of input.
async fn next_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    line.clear();
    let mut too_long = false;
    let mut seen = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(seen.then_some(!too_long));
        }
        seen = true;
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !too_long && line.len() + take > MAX_LINE {
            too_long = true;
            // Only the head is kept, for the id it may carry.
            line.truncate(HEAD);
        }
        if !too_long {
            line.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if newline.is_some() {
            return Ok(Some(!too_long));
        }
    }
}

/// Write rmcp's lines and the filter's answers to `output`, each whole, flushed.
async fn pump<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    mut from_server: R,
    mut answers: mpsc::UnboundedReceiver<String>,
    mut output: W,
    tasks: std::sync::Arc<SpecTasks>,
) -> io::Result<()> {
    let mut line = Vec::new();
    let mut answering = true;
    loop {
        tokio::select! {
            read = from_server.read_until(b'\n', &mut line) => {
                if read? == 0 {
                    break;
                }
                match tasks.outbound(&line) {
                    Outbound::Pass => output.write_all(&line).await?,
                    Outbound::Rewritten(l) => output.write_all(&l).await?,
                    Outbound::Taken => {}
                }
                line.clear();
            }
            answer = answers.recv(), if answering => match answer {
                Some(a) => {
                    output.write_all(a.as_bytes()).await?;
                    output.write_all(b"\n").await?;
                }
                None => answering = false,
            },
        }
        output.flush().await?;
    }
    // rmcp is done; answer what the filter judged before it saw the end.
    while let Ok(a) = answers.try_recv() {
        output.write_all(a.as_bytes()).await?;
        output.write_all(b"\n").await?;
    }
    output.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_that_are_json_pass_and_others_are_answered_with_a_parse_error() {
        assert_eq!(judge(b"{\"jsonrpc\":\"2.0\"}\n"), Verdict::Pass);
        assert_eq!(judge(b"\xEF\xBB\xBF{\"a\":1}\r\n"), Verdict::Pass);
        assert_eq!(judge(b"  \r\n"), Verdict::Skip);
        let Verdict::Answer(a) = judge(b"{not json\n") else {
            panic!("not answered")
        };
        let v: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert!(v["id"].is_null());
        assert!(matches!(judge(b"\xff\xfe\n"), Verdict::Answer(_)));
    }

    #[test]
    fn the_id_of_an_over_long_line_is_read_from_its_head() {
        use serde_json::json;
        assert_eq!(
            head_id(br#"{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"x":"#),
            Some(json!(12345))
        );
        assert_eq!(
            head_id(br#"{"method":"m","params":{"id":1,"s":"\"id\":3"},"id":"a\"b"#),
            None,
            "cut inside the id string"
        );
        assert_eq!(
            head_id(br#"{"params":{"id":1},"id" : "r-7","x":"#),
            Some(json!("r-7"))
        );
        assert_eq!(head_id(br#"{"params":{"id":1,"pad":"xxxx"#), None);
        assert_eq!(head_id(br#"{"id":123"#), None, "a number cut short");
        assert_eq!(head_id(br#"{"id":123,"#), Some(json!(123)));
        let v: serde_json::Value = serde_json::from_str(&too_long(Some(json!(7)))).unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
    }

    #[tokio::test]
    async fn an_over_long_line_is_dropped_and_the_next_one_read_whole() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\n{}\n");
        let mut r = BufReader::new(&input[..]);
        let mut line = Vec::new();
        assert_eq!(next_line(&mut r, &mut line).await.unwrap(), Some(false));
        assert_eq!(line.len(), HEAD);
        assert_eq!(next_line(&mut r, &mut line).await.unwrap(), Some(true));
        assert_eq!(line, b"{}\n");
        assert_eq!(next_line(&mut r, &mut line).await.unwrap(), None);
    }
}
