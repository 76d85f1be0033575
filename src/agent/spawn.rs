//! Starting the agent so that it never runs unrecorded, and cheaply from a large
//! process: the child shares the worker's memory until it execs (`CLONE_VM |
//! CLONE_VFORK`, as `posix_spawn` does), arms its parent-death signal, joins its own
//! process group, and writes its pid where recovery looks (`.agent.json`) before exec.
//!
//! Why not `std::process::Command` with `pre_exec`: a `pre_exec` hook makes std fork,
//! and a fork copies the page tables of the whole process. A worker serving a thousand
//! slots runs thousands of threads; a fork then cost milliseconds of system time, and a
//! burst of a thousand tasks spent most of its time in `copy_page_range`. A child that
//! shares the parent's memory copies nothing.
//!
//! Why the child records itself: a record written by the worker would need the child to
//! wait for it (a handshake costs two wake-ups, ~0.3 ms of pickup). The child writes it
//! with a buffer prepared before the clone and nothing but raw, async-signal-safe calls:
//! if the worker dies first, the parent-death signal (or the parent check) ends the
//! child; if the write fails, the child never execs and the spawn returns the error.
//!
//! Why the child shares our descriptor table until it leaves it keeping only the
//! descriptors below the three reserved for its pipes: see [`super::low_fds`].
//!
//! Rules for the child side (it runs on a small stack of its own, in the parent's
//! memory, while the calling thread is suspended): no allocation, no locks, no panics,
//! only the syscalls named in [`child::child_main`]; everything it needs is prepared by
//! the parent in [`ChildPlan`].

mod caught;
mod child;

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Mutex, Once};

use nix::libc;

use super::low_fds;
use crate::error::{Error, Result};
use crate::protocol::{AgentRecord, TaskId};
use child::{clone_vfork, step_error, ChildPlan, Step};


/// Stack of the child until it execs (it calls a handful of libc wrappers only).
const CHILD_STACK: usize = 64 * 1024;

/// One spawn at a time in this process. A child holds copies of every descriptor the
/// process had at its clone until it execs (close-on-exec): an agent cloned while a
/// sibling's pipes were being made would keep that sibling's stdout open, and the
/// sibling's readers would wait for an end-of-file that comes only with the other
/// child's exec — seconds, with hundreds of slots starting at once. A spawn returns once
/// its child has exec'd, so under this lock no child sees another's pipe ends before
/// they are in their owner's hands.
/// The lock also keeps the child's stack between spawns (allocated by the first).
static SPAWN_LOCK: Mutex<Option<Box<[u8]>>> = Mutex::new(None);

/// This process's environment as `NAME=value` strings ready for `execve`, read once.
///
/// Copying the whole environment into a map and then into C strings at every spawn
/// cost ~25 µs of a task's pickup (some 200 allocations for ~40 variables). conductor
/// never changes its own environment (nothing in it calls `set_var`), so what a worker
/// started with is what each of its agents inherits.
fn inherited_env() -> &'static [(OsString, CString)] {
    static INHERITED: std::sync::OnceLock<Vec<(OsString, CString)>> = std::sync::OnceLock::new();
    INHERITED.get_or_init(|| {
        let mut entries: Vec<(OsString, CString)> = Vec::new();
        for (k, v) in std::env::vars_os() {
            let Ok(entry) = env_entry(&k, &v) else {
                continue;
            };
            // A name given twice: the later value, once (as a map of them kept it).
            match entries.iter_mut().find(|(seen, _)| *seen == k) {
                Some(earlier) => earlier.1 = entry,
                None => entries.push((k, entry)),
            }
        }
        entries
    })
}

/// `NAME=value` as one C string.
fn env_entry(name: &OsStr, value: &OsStr) -> io::Result<CString> {
    let mut entry = Vec::with_capacity(name.len() + value.len() + 1);
    entry.extend_from_slice(name.as_bytes());
    entry.push(b'=');
    entry.extend_from_slice(value.as_bytes());
    CString::new(entry).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the environment variable {} holds a NUL byte",
                name.to_string_lossy()
            ),
        )
    })
}

/// The child's `envp`: the inherited entries not overridden, then `set` (the last
/// pair of a name wins). The pointers borrow from `set` and [`inherited_env`].
fn child_env(set: &[(OsString, CString)]) -> Vec<*const libc::c_char> {
    let overridden = |name: &OsStr| set.iter().any(|(k, _)| k == name);
    let mut envp: Vec<*const libc::c_char> = inherited_env()
        .iter()
        .filter(|(k, _)| !overridden(k))
        .map(|(_, e)| e.as_ptr())
        .collect();
    for (i, (k, e)) in set.iter().enumerate() {
        if !set[i + 1..].iter().any(|(later, _)| later == k) {
            envp.push(e.as_ptr());
        }
    }
    envp.push(std::ptr::null());
    envp
}

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
        let (mut bytes, pid_at) = AgentRecord::template(&TaskId::Text(task_id.to_string()));
        // The child fills the field without checks of its own: prove it fits here.
        if !AgentRecord::fill_pid(&mut bytes, pid_at, 0) {
            return Err(Error::io(
                "record the agent in",
                path,
                io::ErrorKind::InvalidData.into(),
            ));
        }
        Ok(SelfRecord {
            path: c_path,
            bytes,
            pid_at,
        })
    }
}

/// What to start: a resolved program, its argv and environment, its directory.
pub(super) struct SpawnSpec<'a> {
    pub program: &'a Path,
    /// argv, `argv[0]` included.
    pub argv: Vec<&'a OsStr>,
    /// The child's environment: ours, with these set (a later pair wins over an
    /// earlier one of the same name).
    pub env: Vec<(OsString, OsString)>,
    pub cwd: &'a Path,
    pub record: SelfRecord,
    /// What the child reads on its stdin (the prompt), written into the pipe before it
    /// starts as far as the pipe holds it.
    pub stdin: &'a [u8],
}

/// A started agent: its pid (also its process group) and our ends of its stdio pipes.
#[derive(Debug)]
pub(super) struct AgentProcess {
    pid: u32,
    /// Our end of its stdin, non-blocking, while `stdin_written` is short of the whole
    /// input; `None` once all of it is in the pipe (the end closed: the child reads it
    /// to its end).
    pub stdin: Option<File>,
    pub stdin_written: usize,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
    status: Option<ExitStatus>,
}

impl AgentProcess {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Wait for the process to exit and reap it (once; later calls repeat the status).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let mut raw: libc::c_int = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid out-pointer.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut raw, 0) };
            if r >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        Ok(status)
    }
}

/// Why a spawn failed, and whether it was the program itself (not found, not
/// executable) rather than the steps before it.
#[derive(Debug)]
pub(super) struct SpawnError {
    pub at_exec: bool,
    pub source: io::Error,
}

impl From<io::Error> for SpawnError {
    fn from(source: io::Error) -> SpawnError {
        SpawnError {
            at_exec: false,
            source,
        }
    }
}

/// The program, its argv (and `/bin/sh`'s, for a script without `#!`), the variables
/// set and the directory, as C strings made before the clone.
struct ExecStrings {
    program: CString,
    argv: Vec<CString>,
    sh_argv: Vec<CString>,
    env: Vec<(OsString, CString)>,
    cwd: CString,
}

impl ExecStrings {
    fn new(
        program: &Path,
        argv: Vec<&OsStr>,
        env: Vec<(OsString, OsString)>,
        cwd: &Path,
    ) -> io::Result<ExecStrings> {
        let program = c_string(program.as_os_str())?;
        let argv: Vec<CString> = argv.into_iter().map(c_string).collect::<io::Result<_>>()?;
        let env: Vec<(OsString, CString)> = env
            .into_iter()
            .map(|(k, v)| {
                let entry = env_entry(&k, &v)?;
                Ok((k, entry))
            })
            .collect::<io::Result<_>>()?;
        let cwd = c_string(cwd.as_os_str())?;
        let sh = c_string(OsStr::new("/bin/sh"))?;
        let sh_argv: Vec<CString> = [sh, program.clone()]
            .into_iter()
            .chain(argv.iter().skip(1).cloned())
            .collect();
        Ok(ExecStrings {
            program,
            argv,
            sh_argv,
            env,
            cwd,
        })
    }
}

/// Start the agent as described. Returns once the child has exec'd (or failed to).
pub(super) fn spawn(spec: SpawnSpec<'_>) -> Result<AgentProcess, SpawnError> {
    let SpawnSpec {
        program,
        argv,
        env,
        cwd,
        mut record,
        stdin,
    } = spec;
    let ExecStrings {
        program,
        argv,
        sh_argv,
        env,
        cwd,
    } = ExecStrings::new(program, argv, env, cwd)?;
    let argv_ptrs = null_terminated(&argv);
    let sh_argv_ptrs = null_terminated(&sh_argv);
    let env_ptrs = child_env(&env);

    let mut one_spawn = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let stack = one_spawn.get_or_insert_with(|| vec![0u8; CHILD_STACK].into_boxed_slice());
    let (stdin_child, stdin_ours) = stdio_pipe()?;
    // The input goes in first: a child that starts reading finds it there instead of
    // blocking until this thread, woken after the exec, gets round to writing it.
    let (stdin_ours, stdin_written) = prefill(stdin_ours, stdin)?;
    let (stdout_ours, stdout_child) = stdio_pipe()?;
    let (stderr_ours, stderr_child) = stdio_pipe()?;
    let ends = [
        stdin_child.as_raw_fd(),
        stdout_child.as_raw_fd(),
        stderr_child.as_raw_fd(),
    ];
    let low_fds::Placed {
        lent,
        stdio,
        keep_below,
        close_from,
    } = low_fds::place(ends)?;
    let parent = crate::host::pid() as libc::pid_t;
    let mut plan = ChildPlan {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        sh_argv: sh_argv_ptrs.as_ptr(),
        envp: env_ptrs.as_ptr(),
        cwd: cwd.as_ptr(),
        stdio,
        keep_below,
        close_from,
        record_path: record.path.as_ptr(),
        record: record.bytes.as_mut_ptr(),
        record_len: record.bytes.len(),
        pid_at: record.pid_at,
        parent,
        error: 0,
        step: Step::Start,
        caught: caught::caught(parent as u32),
    };
    let pid = clone_vfork(&mut plan, stack)?;
    drop(lent);
    drop((stdin_child, stdout_child, stderr_child));
    // SAFETY: the child has exec'd or exited (CLONE_VFORK): nothing writes `plan` now.
    let (error, step) = unsafe { (std::ptr::read_volatile(&plan.error), plan.step) };
    let mut child = AgentProcess {
        pid: pid as u32,
        stdin: stdin_ours.map(File::from),
        stdin_written,
        stdout: Some(File::from(stdout_ours)),
        stderr: Some(File::from(stderr_ours)),
        status: None,
    };
    if error != 0 {
        let _ = child.wait();
        return Err(SpawnError {
            at_exec: step == Step::Exec,
            source: step_error(step, error, &cwd, &record.path),
        });
    }
    Ok(child)
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Make a pipe end this spawn just made non-blocking: one `F_SETFL`, no `F_GETFL` first
/// (a fresh pipe end has none of the other flags `F_SETFL` can change; the access mode
/// is kept by the kernel). Three calls a task fewer than [`crate::fsio::set_nonblocking`].
pub(super) fn nonblocking_fresh(fd: &impl std::os::fd::AsFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Write what of `input` the empty pipe behind `ours` takes without blocking (64 KiB
/// on Linux by default: nearly every prompt). All of it: the end is closed, `None`.
/// Otherwise the end stays, non-blocking, for the rest.
fn prefill(ours: OwnedFd, input: &[u8]) -> io::Result<(Option<OwnedFd>, usize)> {
    if input.is_empty() {
        return Ok((None, 0));
    }
    nonblocking_fresh(&ours)?;
    let mut written = 0;
    while written < input.len() {
        match nix::unistd::write(&ours, &input[written..]) {
            Ok(0) => return Ok((Some(ours), written)),
            Ok(n) => written += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return Ok((Some(ours), written)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((None, written))
}

/// A close-on-exec pipe for one of the child's stdio streams, both ends numbered 3 or
/// above (so the child's `dup2` onto 0–2 can never clobber another end): (read end,
/// write end).
fn stdio_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own returns a new one we then own.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `moved` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Make this process the reaper of its orphaned descendants, so that a process that
/// left the agent's session is reparented to us rather than to init, and can be found
/// and stopped when its task ends (see `reap`). Once per process.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(envp: &[*const libc::c_char]) -> Vec<String> {
        assert!(envp.last().is_some_and(|p| p.is_null()), "null-terminated");
        envp[..envp.len() - 1]
            .iter()
            // SAFETY: the pointers borrow live C strings (the test's and the cache's).
            .map(|p| {
                unsafe { std::ffi::CStr::from_ptr(*p) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn the_child_env_is_ours_with_the_set_names_replaced_and_the_last_pair_winning() {
        let path = std::env::var_os("PATH").expect("tests run with PATH");
        let set: Vec<(OsString, CString)> = [("PATH", "/only/here"), ("A_X", "1"), ("A_X", "2")]
            .into_iter()
            .map(|(k, v)| {
                let k = OsString::from(k);
                let e = env_entry(&k, OsStr::new(v)).unwrap();
                (k, e)
            })
            .collect();
        let env = entries(&child_env(&set));
        let named = |name: &str| {
            env.iter()
                .filter(|e| e.split('=').next() == Some(name))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(named("PATH"), ["PATH=/only/here"], "ours was {path:?}");
        assert_eq!(named("A_X"), ["A_X=2"]);
        // Everything else we have is passed on as it is.
        let inherited = std::env::vars_os().filter(|(k, _)| k != "PATH").count();
        assert_eq!(env.len(), inherited + 2);
    }

    /// Starts `cat` with `input` on its stdin: what the pipe took before the child
    /// started, and the child.
    fn cat_with(dir: &Path, input: &[u8]) -> AgentProcess {
        let record = SelfRecord::new(&dir.join("agent.json"), "t1").unwrap();
        spawn(SpawnSpec {
            program: Path::new("/bin/cat"),
            argv: vec![OsStr::new("cat")],
            env: Vec::new(),
            cwd: dir,
            record,
            stdin: input,
        })
        .unwrap_or_else(|e| panic!("spawn cat: {}", e.source))
    }

    #[test]
    fn the_input_is_in_the_pipe_and_its_end_closed_before_the_child_starts() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let mut child = cat_with(dir.path(), b"hello");
        assert!(
            child.stdin.is_none(),
            "all of it written: nothing left to feed"
        );
        assert_eq!(child.stdin_written, 5);
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello");
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn what_the_pipe_cannot_hold_is_left_to_write_after_the_start() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let input = vec![b'p'; 1024 * 1024 + 17];
        let mut child = cat_with(dir.path(), &input);
        let written = child.stdin_written;
        assert!(written > 0 && written < input.len(), "{written}");
        let mut stdin = child.stdin.take().expect("the rest is ours to write");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut n = 0;
            let mut buf = [0u8; 65536];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) => return n,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        // Left non-blocking: the writer of the rest decides how to wait.
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = OFlag::from_bits_truncate(fcntl(&stdin, FcntlArg::F_GETFL).unwrap());
        assert!(flags.contains(OFlag::O_NONBLOCK));
        fcntl(&stdin, FcntlArg::F_SETFL(OFlag::empty())).unwrap();
        stdin.write_all(&input[written..]).unwrap();
        drop(stdin);
        assert_eq!(reader.join().unwrap(), input.len());
        assert!(child.wait().unwrap().success());
    }

    #[test]
    fn a_nul_in_a_value_is_refused_with_the_variable_named() {
        let e = env_entry(OsStr::new("BAD"), OsStr::new("a\0b")).unwrap_err();
        assert!(e.to_string().contains("BAD"), "{e}");
    }
}
