//! The live log (`output.log`): the agent's stdout, as printed or rendered from its
//! event stream, and its stderr lines, marked, merged so neither cuts into the other.

#[cfg(test)]
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

/// stdout's reader: each chunk read goes into the live log (as is, or rendered) and,
/// up to `cap` bytes, into memory for the result. With `Stream`, the final `result`
/// event is kept whole as `final_event`.
pub(super) struct OutDrain {
    stream: Option<(Option<LogSink>, Lines, StreamRenderer)>,
    final_event: Option<Vec<u8>>,
    limit_event: Option<Vec<u8>>,
    log: SharedLog,
    cap: usize,
    counter: Arc<AtomicU64>,
    shared: Arc<Mutex<Captured>>,
}

/// What one of an agent's output pipes is read into: fed each chunk read, finished at
/// the pipe's end.
pub(super) trait Drain {
    fn feed(&mut self, chunk: &[u8]);
    fn finish(self);
}

impl Drain for OutDrain {
    fn feed(&mut self, chunk: &[u8]) {
        OutDrain::feed(self, chunk)
    }
    fn finish(self) {
        OutDrain::finish(self)
    }
}

impl Drain for ErrDrain {
    fn feed(&mut self, chunk: &[u8]) {
        ErrDrain::feed(self, chunk)
    }
    fn finish(self) {
        ErrDrain::finish(self)
    }
}

impl OutDrain {
    pub(super) fn new(
        form: StdoutForm,
        log: SharedLog,
        cap: usize,
        counter: Arc<AtomicU64>,
        shared: Arc<Mutex<Captured>>,
    ) -> OutDrain {
        let stream = match form {
            StdoutForm::Raw => None,
            StdoutForm::Stream { raw, line_cap } => {
                Some((raw, Lines::new(line_cap), StreamRenderer::new()))
            }
        };
        OutDrain {
            stream,
            final_event: None,
            limit_event: None,
            log,
            cap,
            counter,
            shared,
        }
    }

    pub(super) fn feed(&mut self, chunk: &[u8]) {
        match self.stream.as_mut() {
            None => lock_log(&self.log).write_out(chunk),
            Some((raw, lines, renderer)) => {
                if let Some(raw) = raw {
                    raw.write(chunk);
                }
                render_lines(
                    chunk,
                    lines,
                    renderer,
                    &self.log,
                    &mut self.final_event,
                    &mut self.limit_event,
                );
            }
        }
        let mut c = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.cap.saturating_sub(c.kept.len());
        c.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        c.total += chunk.len() as u64;
        self.counter.store(c.total, Ordering::Relaxed);
    }

    /// stdout has ended (or failed): the last line, the log's end for this reader.
    pub(super) fn finish(mut self) {
        if let Some((raw, mut lines, mut renderer)) = self.stream.take() {
            let mut last = Vec::new();
            let (final_event, limit_event) = (&mut self.final_event, &mut self.limit_event);
            lines.end(&mut |l| {
                if renderer.render(l, &mut last) == LineKind::Result {
                    *final_event = Some(renderer.final_event(l));
                }
                keep_limit_event(l, limit_event);
            });
            renderer.finish(&mut last);
            lock_log(&self.log).write_out(&last);
            if let Some(raw) = raw {
                raw.finish();
            }
        }
        {
            let mut c = self.shared.lock().unwrap_or_else(|p| p.into_inner());
            c.final_event = self.final_event.take();
            c.limit_event = self.limit_event.take();
        }
        lock_log(&self.log).reader_done();
    }
}

/// Read `input` to its end into `feed`.
#[cfg(test)]
fn drain_with(mut input: impl Read, size: usize, mut feed: impl FnMut(&[u8])) -> io::Result<()> {
    let mut buf = vec![0u8; size];
    loop {
        match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => feed(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Read stdout to its end through an [`OutDrain`].
#[cfg(test)]
pub(super) fn drain_stdout(
    out: impl Read,
    form: StdoutForm,
    log: &SharedLog,
    cap: usize,
    counter: Arc<AtomicU64>,
    shared: Arc<Mutex<Captured>>,
) -> io::Result<()> {
    let mut drain = OutDrain::new(form, Arc::clone(log), cap, counter, shared);
    let outcome = drain_with(out, OUT_CHUNK, |c| drain.feed(c));
    drain.finish();
    outcome
}

/// The largest read of stdout / of stderr.
pub(super) const OUT_CHUNK: usize = 64 * 1024;
pub(super) const ERR_CHUNK: usize = 16 * 1024;

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

/// stderr's reader: keeps the last `keep` bytes (the error line is at the end), and
/// copies each line into the live log, marked.
pub(super) struct ErrDrain {
    lines: Lines,
    keep: usize,
    shared: Arc<Mutex<Captured>>,
    log: SharedLog,
}

impl ErrDrain {
    pub(super) fn new(keep: usize, shared: Arc<Mutex<Captured>>, log: SharedLog) -> ErrDrain {
        ErrDrain {
            lines: Lines::new(ERR_LINE_CAP),
            keep,
            shared,
            log,
        }
    }

    pub(super) fn feed(&mut self, chunk: &[u8]) {
        let log = &self.log;
        self.lines
            .feed(chunk, &mut |l| lock_log(log).write_err_line(l));
        let mut c = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        c.kept.extend_from_slice(chunk);
        c.total += chunk.len() as u64;
        if c.kept.len() > self.keep {
            let excess = c.kept.len() - self.keep;
            c.kept.drain(..excess);
        }
    }

    pub(super) fn finish(mut self) {
        let log = &self.log;
        self.lines.end(&mut |l| lock_log(log).write_err_line(l));
        lock_log(&self.log).reader_done();
    }
}

/// Read stderr to its end through an [`ErrDrain`].
#[cfg(test)]
pub(super) fn drain_tail(
    err: impl Read,
    keep: usize,
    shared: Arc<Mutex<Captured>>,
    log: &SharedLog,
) -> io::Result<()> {
    let mut drain = ErrDrain::new(keep, shared, Arc::clone(log));
    let outcome = drain_with(err, ERR_CHUNK, |c| drain.feed(c));
    drain.finish();
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
        let shared = Arc::new(Mutex::new(Captured::default()));
        // Read a few bytes at a time: lines cross the reads.
        let reader = io::BufReader::with_capacity(7, input.as_bytes());
        let counter = Arc::new(AtomicU64::new(0));
        let form = StdoutForm::Stream {
            raw,
            line_cap: 1024,
        };
        drain_stdout(reader, form, &log, 1 << 20, counter, Arc::clone(&shared)).unwrap();
        drain_tail(&b"oops\nno newline"[..], 1024, shared_default(), &log).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "hi\n{broken\n› Read a.rs\n✓ done · 1 turn\nstderr│ oops\nstderr│ no newline\n"
        );
        assert_eq!(fs::read_to_string(&raw_path).unwrap(), input);
        let c = shared.lock().unwrap();
        assert_eq!(c.final_event.as_deref(), Some(result.as_bytes()));
        assert_eq!(c.total, input.len() as u64);
    }

    fn shared_default() -> Arc<Mutex<Captured>> {
        Arc::new(Mutex::new(Captured::default()))
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
