//! The live log (`output.log`): the agent's stdout, as printed or rendered from its
//! event stream, and its stderr lines, marked, merged so neither cuts into the other.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::output::{Captured, LogSink};
use super::stream::{LineKind, StreamRenderer};

/// The marker of the agent's stderr lines in the live log.
pub const STDERR_MARK: &str = "stderr│ ";

/// Most stderr bytes held back while stdout is in the middle of a line; past it the
/// held lines go in after a line break.
const PENDING_CAP: usize = 64 * 1024;

/// Longest stderr line; a longer one is broken up.
const ERR_LINE_CAP: usize = 16 * 1024;

/// The live log, shared by the stdout and stderr readers. Both write whole lines and
/// stderr lines go in only where a line starts, so neither stream cuts into the other.
/// The last reader to end finishes the log (the tail of a capped log goes in then).
pub(super) struct LiveLog {
    sink: Option<LogSink>,
    at_line_start: bool,
    /// stderr lines waiting for stdout to end its line.
    pending: Vec<u8>,
    readers_left: u8,
    /// Bytes cut from the middle of the log (known once it is finished).
    pub cut: u64,
}

pub(super) type SharedLog = Arc<Mutex<LiveLog>>;

impl std::fmt::Debug for LiveLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLog")
            .field("readers_left", &self.readers_left)
            .field("cut", &self.cut)
            .finish_non_exhaustive()
    }
}

impl LiveLog {
    pub fn shared(sink: LogSink, readers: u8) -> SharedLog {
        Arc::new(Mutex::new(LiveLog {
            sink: Some(sink),
            at_line_start: true,
            pending: Vec::new(),
            readers_left: readers,
            cut: 0,
        }))
    }

    fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(s) = self.sink.as_mut() {
            s.write(bytes);
        }
        self.at_line_start = bytes.ends_with(b"\n");
    }

    /// stdout's bytes; held stderr lines go in at the first line end they reach.
    fn write_out(&mut self, bytes: &[u8]) {
        let split = match bytes.iter().position(|b| *b == b'\n') {
            Some(i) if !self.pending.is_empty() => i + 1,
            _ => bytes.len(),
        };
        self.write(&bytes[..split]);
        if self.at_line_start && !self.pending.is_empty() {
            let held = std::mem::take(&mut self.pending);
            self.write(&held);
        }
        self.write(&bytes[split..]);
    }

    fn write_err_line(&mut self, line: &[u8]) {
        let mut marked = Vec::with_capacity(STDERR_MARK.len() + line.len() + 1);
        marked.extend_from_slice(STDERR_MARK.as_bytes());
        marked.extend_from_slice(line);
        marked.push(b'\n');
        if self.at_line_start {
            self.write(&marked);
            return;
        }
        self.pending.extend_from_slice(&marked);
        if self.pending.len() > PENDING_CAP {
            self.flush_pending();
        }
    }

    fn flush_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if !self.at_line_start {
            self.write(b"\n");
        }
        let held = std::mem::take(&mut self.pending);
        self.write(&held);
    }

    /// A reader has ended; the last one finishes the log.
    fn reader_done(&mut self) {
        self.readers_left = self.readers_left.saturating_sub(1);
        if self.readers_left == 0 {
            self.flush_pending();
            if let Some(sink) = self.sink.take() {
                self.cut = sink.finish();
            }
        }
    }
}

fn lock_log(log: &SharedLog) -> std::sync::MutexGuard<'_, LiveLog> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

/// How stdout reaches the live log.
pub(super) enum StdoutForm {
    /// As it comes.
    Raw,
    /// One `stream-json` event a line, rendered readable (see [`super::stream`]); the
    /// raw lines go to their own capped file (none if it could not be created: the
    /// run goes on without it).
    Stream {
        raw: Option<LogSink>,
        line_cap: usize,
    },
}

/// Splits a byte stream into lines, keeping at most `cap` bytes of each (the rest of
/// an overlong line is counted, not kept).
struct Lines {
    line: Vec<u8>,
    dropped: u64,
    cap: usize,
}

impl Lines {
    fn new(cap: usize) -> Lines {
        Lines {
            line: Vec::new(),
            dropped: 0,
            cap,
        }
    }

    /// Calls `f` with each line `chunk` completes (without its newline; a cut line
    /// with a note of what was left out).
    fn feed(&mut self, mut chunk: &[u8], f: &mut impl FnMut(&[u8])) {
        while !chunk.is_empty() {
            let (piece, done) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (&chunk[..i], true),
                None => (chunk, false),
            };
            let room = self.cap.saturating_sub(self.line.len()).min(piece.len());
            self.line.extend_from_slice(&piece[..room]);
            self.dropped += (piece.len() - room) as u64;
            chunk = &chunk[(piece.len() + usize::from(done)).min(chunk.len())..];
            if done {
                self.emit(f);
            }
        }
    }

    fn emit(&mut self, f: &mut impl FnMut(&[u8])) {
        if self.dropped > 0 {
            let note = format!(" [conductor: {} more bytes of this line]", self.dropped);
            self.line.extend_from_slice(note.as_bytes());
        }
        f(&self.line);
        self.line.clear();
        self.dropped = 0;
    }

    /// The last line, if it had no newline.
    fn end(&mut self, f: &mut impl FnMut(&[u8])) {
        if !self.line.is_empty() || self.dropped > 0 {
            self.emit(f);
        }
    }
}

/// Read stdout to its end: into the live log (as is, or rendered) and, up to `cap`
/// bytes, into memory for the result. With `Stream`, the final `result` event is kept
/// whole as `final_event`.
pub(super) fn drain_stdout(
    mut out: impl Read,
    form: StdoutForm,
    log: &SharedLog,
    cap: usize,
    counter: &AtomicU64,
    shared: &Mutex<Captured>,
) -> io::Result<()> {
    let mut stream = match form {
        StdoutForm::Raw => None,
        StdoutForm::Stream { raw, line_cap } => {
            Some((raw, Lines::new(line_cap), StreamRenderer::new()))
        }
    };
    let mut final_event = None;
    let mut limit_event = None;
    let mut buf = vec![0u8; 64 * 1024];
    let outcome = loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        };
        let chunk = &buf[..n];
        match stream.as_mut() {
            None => lock_log(log).write_out(chunk),
            Some((raw, lines, renderer)) => {
                if let Some(raw) = raw {
                    raw.write(chunk);
                }
                render_lines(
                    chunk,
                    lines,
                    renderer,
                    log,
                    &mut final_event,
                    &mut limit_event,
                );
            }
        }
        let mut c = shared.lock().unwrap_or_else(|p| p.into_inner());
        let room = cap.saturating_sub(c.kept.len());
        c.kept.extend_from_slice(&chunk[..n.min(room)]);
        c.total += n as u64;
        counter.store(c.total, Ordering::Relaxed);
    };
    if let Some((raw, mut lines, mut renderer)) = stream {
        let mut last = Vec::new();
        lines.end(&mut |l| {
            if renderer.render(l, &mut last) == LineKind::Result {
                final_event = Some(renderer.final_event(l));
            }
            keep_limit_event(l, &mut limit_event);
        });
        renderer.finish(&mut last);
        lock_log(log).write_out(&last);
        if let Some(raw) = raw {
            raw.finish();
        }
    }
    {
        let mut c = shared.lock().unwrap_or_else(|p| p.into_inner());
        c.final_event = final_event;
        c.limit_event = limit_event;
    }
    lock_log(log).reader_done();
    outcome
}

/// Keep a Claude Code `rate_limit_event` line (the last one wins): a run refused by a
/// usage limit says its exact reset there ([`crate::preset::Preset::rate_limit`]).
fn keep_limit_event(line: &[u8], kept: &mut Option<Vec<u8>>) {
    if line.starts_with(br#"{"type":"rate_limit_event""#) {
        *kept = Some(line.to_vec());
    }
}

/// Render the lines `chunk` completes into the log, in one write.
fn render_lines(
    chunk: &[u8],
    lines: &mut Lines,
    renderer: &mut StreamRenderer,
    log: &SharedLog,
    final_event: &mut Option<Vec<u8>>,
    limit_event: &mut Option<Vec<u8>>,
) {
    let mut text = Vec::new();
    lines.feed(chunk, &mut |l| {
        if renderer.render(l, &mut text) == LineKind::Result {
            *final_event = Some(renderer.final_event(l));
        }
        keep_limit_event(l, limit_event);
    });
    if !text.is_empty() {
        lock_log(log).write_out(&text);
    }
}

/// Keep the last `keep` bytes (the error line is at the end), and copy each line into
/// the live log, marked.
pub(super) fn drain_tail(
    mut err: impl Read,
    keep: usize,
    shared: &Mutex<Captured>,
    log: &SharedLog,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut lines = Lines::new(ERR_LINE_CAP);
    let outcome = loop {
        let n = match err.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        };
        lines.feed(&buf[..n], &mut |l| lock_log(log).write_err_line(l));
        let mut c = shared.lock().unwrap_or_else(|p| p.into_inner());
        c.kept.extend_from_slice(&buf[..n]);
        c.total += n as u64;
        if c.kept.len() > keep {
            let excess = c.kept.len() - keep;
            c.kept.drain(..excess);
        }
    };
    lines.end(&mut |l| lock_log(log).write_err_line(l));
    lock_log(log).reader_done();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::output::open_log;
    use std::fs;

    fn log_in(dir: &std::path::Path) -> (std::path::PathBuf, SharedLog) {
        let path = dir.join("output.log");
        let sink = LogSink::new(open_log(&path).unwrap(), &path, 1 << 20);
        (path, LiveLog::shared(sink, 2))
    }

    #[test]
    fn stderr_lines_wait_for_stdout_to_end_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let (path, log) = log_in(dir.path());
        {
            let mut l = lock_log(&log);
            l.write_out(b"half a ");
            l.write_err_line(b"warning one");
            l.write_err_line(b"warning two");
            l.write_out(b"line\nnext ");
            l.write_err_line(b"late");
            l.reader_done();
            l.reader_done();
        }
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "half a line\nstderr│ warning one\nstderr│ warning two\nnext \nstderr│ late\n"
        );
    }

    #[test]
    fn a_stream_is_rendered_its_raw_lines_kept_and_its_final_event_lifted() {
        let dir = tempfile::tempdir().unwrap();
        let (path, log) = log_in(dir.path());
        let raw_path = dir.path().join("output.jsonl");
        let raw = Some(LogSink::new(
            open_log(&raw_path).unwrap(),
            &raw_path,
            1 << 20,
        ));
        let result = r#"{"type":"result","is_error":false,"result":"fine","num_turns":1}"#;
        let input = format!(
            "{}\n{{broken\n{}\n{result}",
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Read","input":{"file_path":"a.rs"}}]}}"#,
        );
        let shared = Mutex::new(Captured::default());
        // Read a few bytes at a time: lines cross the reads.
        let reader = io::BufReader::with_capacity(7, input.as_bytes());
        let counter = AtomicU64::new(0);
        let form = StdoutForm::Stream {
            raw,
            line_cap: 1024,
        };
        drain_stdout(reader, form, &log, 1 << 20, &counter, &shared).unwrap();
        drain_tail(&b"oops\nno newline"[..], 1024, &shared_default(), &log).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "hi\n{broken\n› Read a.rs\n✓ done · 1 turn\nstderr│ oops\nstderr│ no newline\n"
        );
        assert_eq!(fs::read_to_string(&raw_path).unwrap(), input);
        let c = shared.lock().unwrap();
        assert_eq!(c.final_event.as_deref(), Some(result.as_bytes()));
        assert_eq!(c.total, input.len() as u64);
    }

    fn shared_default() -> Mutex<Captured> {
        Mutex::new(Captured::default())
    }

    #[test]
    fn an_overlong_line_is_cut_with_a_note() {
        let mut lines = Lines::new(4);
        let mut got = Vec::new();
        lines.feed(b"abcdefgh\nij", &mut |l| got.push(l.to_vec()));
        lines.end(&mut |l| got.push(l.to_vec()));
        assert_eq!(
            got,
            vec![
                b"abcd [conductor: 4 more bytes of this line]".to_vec(),
                b"ij".to_vec()
            ]
        );
    }
}
