//! `conductor logs … -f`: the `logs` verb's follow, printed as the agent wrote it or as JSON Lines of stream events.

use serde_json::json;

use crate::verbs::logs::LogsRequest;
use crate::verbs::logs_follow::{follow_slot, follow_task, FollowEnd, LogEvent, LogSink};
use crate::{Client, TaskId};

use super::output::{stdout_closed, write_out};
use crate::cli::common::exit;

/// Follow what `request` names; returns the exit code, or (text) the id of a task that
/// does not run, whose log is to be printed once instead.
pub fn run(
    client: &Client,
    request: &LogsRequest,
    json: bool,
) -> anyhow::Result<Result<i32, TaskId>> {
    let root = client.root();
    let stop = super::args::interrupt_channel()?;
    let mut sink = Printer {
        json,
        carry: Vec::new(),
    };
    let end = match request {
        LogsRequest::Task(id) | LogsRequest::Slot { id: Some(id), .. } => {
            follow_task(root, id, &stop, &mut sink)?
        }
        LogsRequest::Slot { slot, id: None } => follow_slot(root, *slot, &stop, &mut sink)?,
    };
    Ok(Ok(match end {
        FollowEnd::Ended(id) => {
            sink.end(client, &id)?;
            exit::OK
        }
        FollowEnd::NotRunning(loc) if json => {
            // Ended before it was seen running: its whole log, then its end.
            let answer = crate::verbs::logs::logs(client, &LogsRequest::Task(loc.id.clone()))?;
            if let Ok(Some((_, f))) = &answer.log {
                let (text, _, _) = crate::verbs::logs::read_tail(f, u64::MAX)?;
                sink.event(LogEvent::Output(text.as_bytes()))?;
            }
            sink.end(client, &loc.id)?;
            exit::OK
        }
        FollowEnd::NotRunning(loc) => return Ok(Err(loc.id)),
        FollowEnd::Stopped => exit::INTERRUPTED,
        FollowEnd::ReaderGone => exit::OK,
    }))
}

/// Prints a follow's events: the agent's bytes as written, or one JSON object a line.
struct Printer {
    json: bool,
    /// With JSON: the start of a character a chunk ended inside, for the next chunk.
    carry: Vec<u8>,
}

impl Printer {
    /// One JSON line; `Ok(false)` when nobody reads any more.
    fn line(&self, v: serde_json::Value) -> anyhow::Result<bool> {
        write_out(format!("{v}\n").as_bytes())
    }

    /// The last line of a followed task: how it ended.
    fn end(&mut self, client: &Client, id: &TaskId) -> anyhow::Result<()> {
        if self.json {
            self.flush_carry()?;
            let state = client.find_task(id)?.map(|l| l.state);
            self.line(json!({ "event": "end", "id": id, "state": state }))?;
        }
        Ok(())
    }

    /// Bytes held back that never became a whole character: told as they are.
    fn flush_carry(&mut self) -> anyhow::Result<bool> {
        if self.carry.is_empty() {
            return Ok(true);
        }
        let text = String::from_utf8_lossy(&std::mem::take(&mut self.carry)).into_owned();
        self.line(json!({ "event": "output", "text": text }))
    }

    /// The text of `bytes` after what was carried, up to the last whole character (a
    /// character cut at the chunk's end waits for the next chunk).
    fn text_of(&mut self, bytes: &[u8]) -> String {
        self.carry.extend_from_slice(bytes);
        let whole = match std::str::from_utf8(&self.carry) {
            Ok(_) => self.carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Not UTF-8 at all somewhere: told lossily, nothing held back.
            Err(_) => self.carry.len(),
        };
        let rest = self.carry.split_off(whole);
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry = rest;
        text
    }
}

impl LogSink for Printer {
    type Error = anyhow::Error;

    fn event(&mut self, event: LogEvent<'_>) -> anyhow::Result<bool> {
        match (event, self.json) {
            (LogEvent::Output(bytes), false) => write_out(bytes),
            (LogEvent::Output(bytes), true) => {
                let text = self.text_of(bytes);
                if text.is_empty() {
                    return Ok(true);
                }
                self.line(json!({ "event": "output", "text": text }))
            }
            (LogEvent::Unserved(e), false) => {
                eprintln!("conductor: {e}; following on");
                Ok(true)
            }
            (LogEvent::Unserved(e), true) => {
                self.line(json!({ "event": "unserved", "note": e.to_string() }))
            }
        }
    }

    fn gone(&self) -> bool {
        stdout_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_between_chunks_is_told_whole_in_json() {
        let mut p = Printer {
            json: true,
            carry: Vec::new(),
        };
        let euro = "€".as_bytes();
        assert_eq!(p.text_of(&[b'a', euro[0]]), "a");
        assert_eq!(p.text_of(&euro[1..2]), "");
        assert_eq!(p.text_of(&[euro[2], b'b']), "€b");
        assert!(p.carry.is_empty());
        // Bytes that are no UTF-8 at all are told lossily, not held back for ever.
        assert_eq!(p.text_of(&[0xff, b'c']), "\u{fffd}c");
    }
}
