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
    let buf = read_sized(&mut f, meta.len(), limit).map_err(|e| Error::io("read", path, e))?;
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

/// The rest of `f` (at its start), `size` bytes by its `fstat`, up to `limit` + 1 (one
/// byte past the limit: the file may grow between fstat and read). The first read asks
/// for one byte more than `size`: when it returns exactly `size`, that was the end (a
/// regular file's read stops short only there), and the read that would return 0 to
/// say so is spared (one call of every file read, two of every task's claim).
fn read_sized(f: &mut File, size: u64, limit: u64) -> io::Result<Vec<u8>> {
    let want = size.saturating_add(1).min(limit + 1) as usize;
    let mut buf = vec![0u8; want];
    let n = loop {
        match f.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    buf.truncate(n);
    if n as u64 == size && n < want {
        return Ok(buf);
    }
    if n > 0 {
        f.by_ref().take(limit + 1 - n as u64).read_to_end(&mut buf)?;
    }
    Ok(buf)
}

/// What `file` holds now, from its start, up to `limit` + 1 bytes (one past the limit
/// tells a file grown too large): the same file read again through its descriptor,
/// wherever its name went meanwhile.
/// `size`: how many bytes the file is expected to hold, if known: the first read asks
/// for one more, and returning exactly `size` ends it (see [`read_sized`]).
pub fn reread_bounded(file: &File, limit: u64, size: Option<u64>) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    if let Some(size) = size.filter(|s| *s <= limit) {
        let want = size as usize + 1;
        let mut first = vec![0u8; want];
        let n = loop {
            match file.read_at(&mut first, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        if n as u64 == size {
            first.truncate(n);
            return Ok(first);
        }
    }
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

/// `statx(AT_STATX_FORCE_SYNC)` of `path` itself (not following a symlink): the
/// attributes as the filesystem's server has them now, past this client's caches.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn statx_from_server(path: &Path) -> io::Result<nix::libc::statx> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut st = std::mem::MaybeUninit::<nix::libc::statx>::zeroed();
    // SAFETY: a valid C string and a zeroed buffer the size of `statx`, filled by the
    // kernel on success.
    let rc = unsafe {
        nix::libc::statx(
            nix::libc::AT_FDCWD,
            c.as_ptr(),
            nix::libc::AT_SYMLINK_NOFOLLOW | nix::libc::AT_STATX_FORCE_SYNC,
            nix::libc::STATX_BASIC_STATS,
            st.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised and written by a successful statx.
    Ok(unsafe { st.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The read that asks one byte past the size it was told stops there only when the
    /// file holds exactly that: grown or cut since, it is read to its end.
    #[test]
    fn a_sized_read_reads_what_the_file_holds_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"twelve bytes").unwrap();
        let (_, meta, bytes) = read_bounded_open(&path, 100).unwrap().unwrap();
        assert_eq!((meta.len(), &bytes[..]), (12, &b"twelve bytes"[..]));
        let mut f = File::open(&path).unwrap();
        assert_eq!(read_sized(&mut f, 4, 100).unwrap(), b"twelve bytes", "grown");
        let mut f = File::open(&path).unwrap();
        assert_eq!(read_sized(&mut f, 40, 100).unwrap(), b"twelve bytes", "cut");
        let mut f = File::open(&path).unwrap();
        assert_eq!(read_sized(&mut f, 12, 5).unwrap().len(), 6, "limit + 1");
        let file = File::options().read(true).append(true).open(&path).unwrap();
        assert_eq!(reread_bounded(&file, 100, Some(12)).unwrap(), b"twelve bytes");
        (&file).write_all(b", more").unwrap();
        assert_eq!(
            reread_bounded(&file, 100, Some(12)).unwrap(),
            b"twelve bytes, more"
        );
        assert_eq!(reread_bounded(&file, 100, Some(40)).unwrap().len(), 18);
    }
}
