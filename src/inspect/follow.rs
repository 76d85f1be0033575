//! Reading a worker's `output.log`: opening it safely, and following it by name like
//! `tail -F` across the tasks that replace it.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver};

use crate::error::{Error, Result};
use crate::fsio;
use crate::watch::{DirWatcher, Interest, WatchMode, WatcherKind};

/// Open a log file for reading: no symlinks, regular files only. `None` if missing.
pub fn open_log(path: &Path) -> Result<Option<File>> {
    Ok(fsio::open_regular(path)?.map(|(f, _)| f))
}

/// Follows a file by name, like `tail -F`: reads what is appended, and when the name
/// comes to mean a new file (the worker moves `output.log` to `tasks/<id>.log` after
/// each task and starts a fresh one) finishes the old file and continues with the new
/// one from its start. A truncated file is read again from its start.
///
/// Wake-ups come from a [`DirWatcher`] on the file's directory ([`LogFollower::wake`]);
/// call [`LogFollower::next_chunk`] until it returns `None` after each one.
pub struct LogFollower {
    path: PathBuf,
    file: Option<(File, (u64, u64))>,
    pos: u64,
    watcher: DirWatcher,
    wake: Receiver<()>,
}

impl fmt::Debug for LogFollower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFollower")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish()
    }
}

const FOLLOW_CHUNK: usize = 64 * 1024;

impl LogFollower {
    /// Follow `path` from the start of the file it names now (if any), opened here: the
    /// file is held from the start even if it is renamed away (a finished task's log
    /// moved to `tasks/`) before the first read. The watcher is armed before that, so
    /// nothing written afterwards can be missed.
    pub fn new(path: &Path, mode: WatchMode) -> Result<LogFollower> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name =
            path.file_name()
                .map(|n| n.to_os_string())
                .ok_or_else(|| Error::NotAFileName {
                    path: path.to_path_buf(),
                })?;
        let (tx, wake) = bounded(1);
        let interest: Interest = Arc::new(move |p: &Path| p.file_name() == Some(name.as_os_str()));
        let watcher = DirWatcher::new(&[dir], mode, interest, tx)?;
        // A file that cannot be opened now is tried again (and its error told) by the
        // first `next_chunk`, as before.
        let file = fsio::open_regular(path)
            .ok()
            .flatten()
            .map(|(f, m)| (f, (m.dev(), m.ino())));
        Ok(LogFollower {
            path: path.to_path_buf(),
            file,
            pos: 0,
            watcher,
            wake,
        })
    }

    /// Receives `()` when the file may have changed.
    pub fn wake(&self) -> &Receiver<()> {
        &self.wake
    }

    pub fn watcher_kind(&self) -> &WatcherKind {
        self.watcher.kind()
    }

    /// The next bytes available, or `None` when there is nothing new right now.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some((f, _)) = &self.file {
                let mut buf = vec![0u8; FOLLOW_CHUNK];
                let n = loop {
                    match f.read_at(&mut buf, self.pos) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(Error::io("read", &self.path, e)),
                    }
                };
                if n > 0 {
                    self.pos += n as u64;
                    buf.truncate(n);
                    return Ok(Some(buf));
                }
            }
            // At the end of the file we have: does the name still mean it?
            let meta = match fs::symlink_metadata(&self.path) {
                Ok(m) if m.file_type().is_file() => m,
                // Gone (between tasks) or not a plain file: keep what we have.
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("stat", &self.path, e)),
            };
            let ident = (meta.dev(), meta.ino());
            match &self.file {
                Some((_, current)) if *current == ident => {
                    if meta.len() < self.pos {
                        tracing::debug!(
                            "{} was truncated; reading it from the start",
                            self.path.display()
                        );
                        self.pos = 0;
                        continue;
                    }
                    return Ok(None);
                }
                _ => {
                    let Some((f, opened)) = fsio::open_regular(&self.path)? else {
                        return Ok(None);
                    };
                    self.file = Some((f, (opened.dev(), opened.ino())));
                    self.pos = 0;
                }
            }
        }
    }
}
