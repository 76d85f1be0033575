//! Starting the agent so that it never runs unrecorded: the child itself writes its
//! pid where recovery looks (`.agent.json`), after its parent-death signal is armed
//! and before it execs.
//!
//! A record written by the worker would need the child to wait for it (`spawn`
//! returns only once the child has exec'd): a handshake through a helper thread costs
//! two wake-ups, ~0.3 ms of pickup on this machine. The child can write the record
//! itself, with a buffer prepared before the fork and nothing but raw `open`,
//! `pwrite` and `close` (async-signal-safe): if the worker dies first, the
//! parent-death signal (or the parent check) ends the child; if the write fails, the
//! child never execs and `spawn` returns the error.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Once;

use nix::libc;

use crate::error::{Error, Result};
use crate::protocol::{AgentRecord, TaskId};

/// Where the child records itself, and the record with its pid field still blank.
pub(super) struct SelfRecord {
    path: CString,
    bytes: Vec<u8>,
    pid_at: usize,
}

impl SelfRecord {
    pub fn new(path: &Path, task_id: &str) -> Result<SelfRecord> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::io(
                "record the agent in",
                path,
                io::ErrorKind::InvalidInput.into(),
            )
        })?;
        let (bytes, pid_at) = AgentRecord::template(&TaskId::Text(task_id.to_string()));
        Ok(SelfRecord {
            path: c_path,
            bytes,
            pid_at,
        })
    }

    /// Arm `cmd` (already in its own process group) to record itself before exec.
    pub fn arm(self, cmd: &mut Command) {
        let parent = std::process::id();
        let mut record = self;
        // SAFETY: `child_side` makes only async-signal-safe calls (prctl, getppid,
        // getpid, open, pwrite, close, _exit) and neither allocates nor locks: the
        // buffer it fills is this closure's own copy, made before the fork.
        unsafe {
            cmd.pre_exec(move || child_side(&mut record, parent));
        }
    }
}

/// Runs in the forked child before exec: only async-signal-safe calls, no allocation
/// (errors are raw errnos).
fn child_side(record: &mut SelfRecord, parent: u32) -> io::Result<()> {
    // SAFETY: plain syscalls on a path and a buffer this child owns.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The worker may have died before prctl took effect.
        if libc::getppid() as u32 != parent {
            libc::_exit(EXIT_UNRECORDED);
        }
        AgentRecord::fill_pid(&mut record.bytes, record.pid_at, libc::getpid() as u32);
        let fd = libc::open(
            record.path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // The record has a fixed length: overwriting in place leaves nothing of an
        // older one, and frees nothing (freeing file data is slow on some filesystems).
        let n = libc::pwrite(fd, record.bytes.as_ptr().cast(), record.bytes.len(), 0);
        let written = n == record.bytes.len() as isize;
        let errno = io::Error::last_os_error();
        libc::close(fd);
        if !written {
            return Err(if n < 0 {
                errno
            } else {
                io::Error::from_raw_os_error(libc::EIO)
            });
        }
        Ok(())
    }
}

/// Exit status of a child that never exec'd because its worker died first.
pub const EXIT_UNRECORDED: i32 = 125;

/// Make this process the reaper of its orphaned descendants, so that a process that
/// left the agent's session is reparented to us rather than to init, and can be found
/// and stopped when its task ends (see `sweep`). Once per process.
pub(super) fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
            tracing::warn!(
                "cannot become a child subreaper ({}); an agent's escaped descendants \
                 may outlive their task",
                io::Error::last_os_error()
            );
        }
    });
}
