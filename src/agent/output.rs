//! The agent's output: `output.log` (created fresh, capped to its head and a rolling
//! tail) and what is kept in memory for the result.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::error::{Error, Result};
use crate::fsio;

mod readied;

/// What a stream reader collected.
#[derive(Debug, Default)]
pub(super) struct Captured {
    pub kept: Vec<u8>,
    pub total: u64,
    /// The final `result` event line of a `stream-json` run, whole.
    pub final_event: Option<Vec<u8>>,
    /// The last `rate_limit_event` line of a `stream-json` run (its limit and reset).
    pub limit_event: Option<Vec<u8>>,
}

/// What a stream reader has collected so far, shared with the reader thread.
pub(super) type SharedCapture = std::sync::Arc<std::sync::Mutex<Captured>>;

/// Room left for the cut marker line within the cap.
const MARKER_ROOM: u64 = 256;

/// Whether an existing `output.log` is the empty file we readied: a regular file of
/// ours with no other name. Anything else (a planted hard link, a symlink, a FIFO) is
/// never opened for writing.
fn is_fresh(m: &fs::Metadata) -> bool {
    m.file_type().is_file() && m.nlink() == 1 && m.len() == 0 && m.uid() == crate::host::euid()
}

/// A new private file; `read` too for the tail's ring.
fn create_new(path: &Path, read: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(read)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// Remove whatever holds the name (unlinking a name never touches what it points to)
/// and create a fresh file there.
fn replace_with_new(path: &Path) -> Result<File> {
    for _ in 0..3 {
        match create_new(path, false) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                tracing::warn!(
                    "{} is not the file we readied; replacing it",
                    path.display()
                );
                fsio::remove_file_if_exists(path)?;
            }
            Err(e) => return Err(Error::io("create", path, e)),
        }
    }
    Err(Error::io(
        "create",
        path,
        io::Error::new(io::ErrorKind::AlreadyExists, "keeps being recreated"),
    ))
}

/// Open `output.log` for a run: the empty file readied after the last task when it is
/// still exactly that, otherwise a new one (never truncating or writing through a
/// name someone else put there).
pub(super) fn open_log(path: &Path) -> Result<File> {
    if let Some(f) = readied::take(path, is_fresh) {
        return Ok(f);
    }
    let opened = OpenOptions::new()
        .write(true)
        // O_NONBLOCK: a FIFO planted under the name must not hang us.
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path);
    if let Ok(f) = opened {
        if f.metadata().is_ok_and(|m| is_fresh(&m)) {
            return Ok(f);
        }
    }
    replace_with_new(path)
}

/// A fresh private file at `path`, whatever held the name before (a leftover of a run
/// cut short, or a planted link, is unlinked, never written through).
pub(super) fn create_fresh(path: &Path) -> Result<File> {
    replace_with_new(path)
}

/// Ready an empty `output.log` for the next run, off its pickup path (creating it is
/// the slow part).
pub fn ready_log(path: &Path) -> Result<()> {
    // Nearly always the name is free (the last log was moved away): made at once and
    // kept open for the next run ([`readied`]), one look and two calls fewer.
    if let Ok(f) = create_new(path, false) {
        readied::keep(path, f);
        return Ok(());
    }
    if fs::symlink_metadata(path).is_ok_and(|m| is_fresh(&m)) {
        return Ok(());
    }
    replace_with_new(path).map(drop)
}

/// The log file of one run, kept under `cap` bytes: the head is written as it comes,
/// the tail goes round a ring in an unlinked side file and is appended at the end,
/// after a line saying how much was cut between them.
pub(super) struct LogSink {
    file: File,
    dir: PathBuf,
    head_cap: u64,
    tail_cap: u64,
    head: u64,
    ring: Option<File>,
    /// Bytes that went to the ring in all.
    tail: u64,
    ok: bool,
}

impl LogSink {
    pub fn new(file: File, path: &Path, cap: u64) -> LogSink {
        let head_cap = cap / 2;
        LogSink {
            file,
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            head_cap,
            tail_cap: cap.saturating_sub(head_cap).saturating_sub(MARKER_ROOM),
            head: 0,
            ring: None,
            tail: 0,
            ok: true,
        }
    }

    pub fn write(&mut self, mut chunk: &[u8]) {
        if !self.ok {
            return;
        }
        let room = (self.head_cap - self.head).min(chunk.len() as u64) as usize;
        if room > 0 {
            let r = self.file.write_all(&chunk[..room]);
            self.head += room as u64;
            chunk = &chunk[room..];
            self.check(r);
        }
        if !chunk.is_empty() && self.ok {
            let r = self.write_tail(chunk);
            self.check(r);
        }
    }

    fn check(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            // Keep draining: a full disk must not block the agent on a full pipe.
            tracing::warn!("writing output.log: {e}");
            self.ok = false;
        }
    }

    fn write_tail(&mut self, mut chunk: &[u8]) -> io::Result<()> {
        if self.tail_cap == 0 {
            self.tail += chunk.len() as u64;
            return Ok(());
        }
        if self.ring.is_none() {
            let p = self.dir.join(format!(".output.tail.{}", fsio::nonce()));
            let f = create_new(&p, true)?;
            fs::remove_file(&p)?;
            self.ring = Some(f);
        }
        let ring = self.ring.as_ref().expect("ring just made");
        while !chunk.is_empty() {
            let at = self.tail % self.tail_cap;
            let n = ((self.tail_cap - at) as usize).min(chunk.len());
            ring.write_all_at(&chunk[..n], at)?;
            self.tail += n as u64;
            chunk = &chunk[n..];
        }
        Ok(())
    }

    /// Put the tail after the head; returns the bytes cut out of the middle.
    pub fn finish(mut self) -> u64 {
        let cut = self.tail.saturating_sub(self.tail_cap);
        if let Some(ring) = self.ring.take() {
            if self.ok {
                if let Err(e) = self.append_ring(ring, cut) {
                    tracing::warn!("writing the tail of output.log: {e}");
                }
            }
        } else if cut > 0 && self.ok {
            let _ = self.file.write_all(marker_line(cut).as_bytes());
        }
        cut
    }

    fn append_ring(&mut self, mut ring: File, cut: u64) -> io::Result<()> {
        let kept = self.tail.min(self.tail_cap);
        let start = if cut == 0 {
            0
        } else {
            self.tail % self.tail_cap
        };
        if cut > 0 {
            self.file.write_all(marker_line(cut).as_bytes())?;
        }
        // Oldest first: from the write position to the end, then from the start.
        ring.seek(SeekFrom::Start(start))?;
        let first = (kept - start.min(kept)).min(self.tail_cap - start);
        io::copy(&mut (&mut ring).take(first), &mut self.file)?;
        ring.seek(SeekFrom::Start(0))?;
        io::copy(&mut ring.take(kept - first), &mut self.file)?;
        Ok(())
    }
}

/// The line written where output was left out of the log.
fn marker_line(cut: u64) -> String {
    format!("\n[conductor: {cut} bytes of output cut here to keep this log under its cap]\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cap: u64, input: &[u8], chunk: usize) -> (Vec<u8>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("output.log");
        let mut sink = LogSink::new(open_log(&path).unwrap(), &path, cap);
        for c in input.chunks(chunk) {
            sink.write(c);
        }
        let cut = sink.finish();
        // The ring file was unlinked at once: only the log is left.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        (fs::read(&path).unwrap(), cut)
    }

    #[test]
    fn output_under_the_cap_is_kept_whole() {
        let input: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [1, 7, 4096] {
            let (log, cut) = run(10_000, &input, chunk);
            assert!(log == input && cut == 0, "chunks of {chunk}: cut {cut}");
        }
    }

    #[test]
    fn output_over_the_cap_keeps_head_and_tail_around_a_marker() {
        let input: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [1000, 4096, 65536] {
            let cap = 10_000;
            let (log, cut) = run(cap, &input, chunk);
            let (head, tail) = (5000, 10_000 - 5000 - MARKER_ROOM as usize);
            assert_eq!(cut, (input.len() - head - tail) as u64);
            let marker = marker_line(cut);
            assert!(log.len() as u64 <= cap);
            assert!(log[..head] == input[..head], "head");
            assert!(
                &log[head..head + marker.len()] == marker.as_bytes(),
                "marker"
            );
            assert!(
                log[head + marker.len()..] == input[input.len() - tail..],
                "tail"
            );
        }
    }

    #[test]
    fn a_planted_hard_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("precious");
        fs::write(&outside, "keep me").unwrap();
        let path = dir.path().join("output.log");
        fs::hard_link(&outside, &path).unwrap();
        ready_log(&path).unwrap();
        let mut f = open_log(&path).unwrap();
        f.write_all(b"agent output").unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep me");
        // Nor an empty one (nlink 2), nor a symlink.
        fs::remove_file(&path).unwrap();
        fs::write(&outside, "").unwrap();
        fs::hard_link(&outside, &path).unwrap();
        open_log(&path).unwrap().write_all(b"x").unwrap();
        assert_eq!(fs::read(&outside).unwrap(), b"");
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        open_log(&path).unwrap().write_all(b"y").unwrap();
        assert_eq!(fs::read(&outside).unwrap(), b"");
        assert_eq!(fs::read(&path).unwrap(), b"y");
    }
}
