//! Reading the protocol's files safely: only regular files, never past a size limit,
//! JSON parsed with the file named in the error.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::OFlag;
use serde::de::DeserializeOwned;

use crate::error::{Error, FileProblem, Result};

/// Open a file for reading, refusing symlinks and anything but a regular file.
/// A missing file is `Ok(None)`.
pub fn open_regular(path: &Path) -> Result<Option<(File, fs::Metadata)>> {
    let opened = OpenOptions::new()
        .read(true)
        // O_NONBLOCK so a FIFO planted under a protocol name cannot hang us.
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path);
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(Error::bad(path, FileProblem::Symlink))
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let meta = f.metadata().map_err(|e| Error::io("stat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::bad(path, FileProblem::NotRegular));
    }
    Ok(Some((f, meta)))
}

/// Read a whole file, refusing symlinks, non-regular files and files over `limit`.
/// A missing file is `Ok(None)`.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    Ok(read_bounded_open(path, limit)?.map(|(_, _, bytes)| bytes))
}

/// [`read_bounded`], and the file still open with what `fstat` said of it when opened:
/// for a caller that renames the file and must know what it holds after (the same
/// inode, read again through the descriptor: [`reread_bounded`]).
pub fn read_bounded_open(path: &Path, limit: u64) -> Result<Option<(File, fs::Metadata, Vec<u8>)>> {
    let Some((mut f, meta)) = open_regular(path)? else {
        return Ok(None);
    };
    if meta.len() > limit {
        return Err(Error::bad(
            path,
            FileProblem::TooLarge {
                size: meta.len(),
                limit,
            },
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    // Read one byte past the limit: the file may grow between fstat and read.
    (&mut f)
        .take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read", path, e))?;
    if buf.len() as u64 > limit {
        return Err(Error::bad(
            path,
            FileProblem::TooLarge {
                size: buf.len() as u64,
                limit,
            },
        ));
    }
    Ok(Some((f, meta, buf)))
}

/// What `file` holds now, from its start, up to `limit` + 1 bytes (one past the limit
/// tells a file grown too large): the same file read again through its descriptor,
/// wherever its name went meanwhile.
pub fn reread_bounded(file: &File, limit: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    while (buf.len() as u64) <= limit {
        let want = (limit + 1 - buf.len() as u64).min(chunk.len() as u64) as usize;
        match file.read_at(&mut chunk[..want], buf.len() as u64) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}

/// Parse JSON bytes read from `path`, with errors that name the file.
pub fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T> {
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(Error::bad(
            path,
            FileProblem::NotUtf8 {
                offset: e.valid_up_to(),
            },
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::bad(path, FileProblem::Empty));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let problem = match e.classify() {
            serde_json::error::Category::Data => FileProblem::Shape(e),
            _ => FileProblem::Json(e),
        };
        Error::bad(path, problem)
    })
}

/// Read and parse a JSON file with the safety rules of [`read_bounded`].
pub fn read_json<T: DeserializeOwned>(path: &Path, limit: u64) -> Result<Option<T>> {
    match read_bounded(path, limit)? {
        None => Ok(None),
        Some(bytes) => parse_json(path, &bytes).map(Some),
    }
}
