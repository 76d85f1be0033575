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
//! only the syscalls named in [`child_main`]; everything it needs is prepared by the
//! parent in [`ChildPlan`].

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

use super::low_fds::{self, LentLowFds, Reserved};
use crate::error::{Error, Result};
use crate::protocol::{AgentRecord, TaskId};

/// Exit status of a child that never exec'd because its worker died first.
pub const EXIT_UNRECORDED: i32 = 125;

/// Stack of the child until it execs (it calls a handful of libc wrappers only).
const CHILD_STACK: usize = 64 * 1024;

/// One spawn at a time in this process. A child holds copies of every descriptor the
/// process had at its clone until it execs (close-on-exec): an agent cloned while a
/// sibling's pipes were being made would keep that sibling's stdout open, and the
/// sibling's readers would wait for an end-of-file that comes only with the other
/// child's exec — seconds, with hundreds of slots starting at once. A spawn returns once
/// its child has exec'd, so under this lock no child sees another's pipe ends before
/// they are in their owner's hands.
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

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

/// What to start: a resolved program, its argv and whole environment, its directory.
pub(super) struct SpawnSpec<'a> {
    pub program: &'a Path,
    /// argv, `argv[0]` included.
    pub argv: Vec<&'a OsStr>,
    /// The complete environment of the child.
    pub env: Vec<(OsString, OsString)>,
    pub cwd: &'a Path,
    pub record: SelfRecord,
}

/// A started agent: its pid (also its process group) and our ends of its stdio pipes.
#[derive(Debug)]
pub(super) struct AgentProcess {
    pid: u32,
    pub stdin: Option<File>,
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

/// Everything the child needs, prepared before the clone (raw pointers into buffers
/// the parent keeps alive until the child has exec'd or exited).
struct ChildPlan {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    /// `/bin/sh PROGRAM ARGS…`, for a program the kernel cannot exec itself (a script
    /// without `#!`), as `execvp` and so std's `Command` do.
    sh_argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// Child ends of the pipes, in stdin, stdout, stderr order (all ≥ 3).
    stdio: [libc::c_int; 3],
    /// The child shares our descriptor table and leaves it keeping only those below
    /// this (0 = it has a copy of its own from the clone).
    keep_below: libc::c_uint,
    record_path: *const libc::c_char,
    record: *mut u8,
    record_len: usize,
    pid_at: usize,
    parent: libc::pid_t,
    /// Written by the child when a step fails (an errno, never 0), read by the parent
    /// after; `step` says which.
    error: libc::c_int,
    step: Step,
}

/// What the child was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    Group,
    Stdio,
    Chdir,
    Record,
    Exec,
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

/// Start the agent as described. Returns once the child has exec'd (or failed to).
pub(super) fn spawn(spec: SpawnSpec<'_>) -> Result<AgentProcess, SpawnError> {
    let SpawnSpec {
        program,
        argv,
        env,
        cwd,
        mut record,
    } = spec;
    let program = c_string(program.as_os_str())?;
    let argv: Vec<CString> = argv.into_iter().map(c_string).collect::<io::Result<_>>()?;
    let env: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut entry = k.clone();
            entry.push("=");
            entry.push(v);
            c_string(&entry)
        })
        .collect::<io::Result<_>>()?;
    let cwd = c_string(cwd.as_os_str())?;
    let sh = c_string(OsStr::new("/bin/sh"))?;
    let sh_argv: Vec<CString> = [sh, program.clone()]
        .into_iter()
        .chain(argv.iter().skip(1).cloned())
        .collect();
    let argv_ptrs = null_terminated(&argv);
    let sh_argv_ptrs = null_terminated(&sh_argv);
    let env_ptrs = null_terminated(&env);
    let mut stack = vec![0u8; CHILD_STACK];

    let _one_spawn = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (stdin_child, stdin_ours) = stdio_pipe()?;
    let (stdout_ours, stdout_child) = stdio_pipe()?;
    let (stderr_ours, stderr_child) = stdio_pipe()?;
    let ends = [
        stdin_child.as_raw_fd(),
        stdout_child.as_raw_fd(),
        stderr_child.as_raw_fd(),
    ];
    let reserved = low_fds::reserved();
    let lent = match reserved {
        Some(r) => Some(LentLowFds::lend(r, ends)?),
        None => None,
    };
    let mut plan = ChildPlan {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        sh_argv: sh_argv_ptrs.as_ptr(),
        envp: env_ptrs.as_ptr(),
        cwd: cwd.as_ptr(),
        stdio: reserved.map_or(ends, |r| r.fds),
        keep_below: reserved.map_or(0, Reserved::keep_below),
        record_path: record.path.as_ptr(),
        record: record.bytes.as_mut_ptr(),
        record_len: record.bytes.len(),
        pid_at: record.pid_at,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        error: 0,
        step: Step::Start,
    };
    let pid = clone_vfork(&mut plan, &mut stack)?;
    drop(lent);
    drop((stdin_child, stdout_child, stderr_child));
    // SAFETY: the child has exec'd or exited (CLONE_VFORK): nothing writes `plan` now.
    let (error, step) = unsafe { (std::ptr::read_volatile(&plan.error), plan.step) };
    let mut child = AgentProcess {
        pid: pid as u32,
        stdin: Some(File::from(stdin_ours)),
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

/// The child's failure as an error that says what it was doing.
fn step_error(step: Step, errno: libc::c_int, cwd: &CString, record: &CString) -> io::Error {
    let cause = io::Error::from_raw_os_error(errno);
    let what = match step {
        // The program itself: the caller adds its name and, for NotFound, a hint.
        Step::Exec => return cause,
        Step::Start => "arm its parent-death signal".to_string(),
        Step::Group => "join its own process group".to_string(),
        Step::Stdio => "connect its stdin/stdout/stderr".to_string(),
        Step::Chdir => format!("enter its directory {}", cwd.to_string_lossy()),
        Step::Record => format!("record itself in {}", record.to_string_lossy()),
    };
    io::Error::new(cause.kind(), format!("the agent could not {what}: {cause}"))
}

/// Clone the child with every signal blocked (no handler of ours may run on its stack
/// in our memory); the child restores a clean mask itself. The mask is set with the
/// raw syscall: glibc's wrappers leave its two internal signals (cancellation and
/// set-id broadcast) unblocked, as glibc's own `posix_spawn` avoids too.
fn clone_vfork(plan: &mut ChildPlan, stack: &mut [u8]) -> io::Result<libc::pid_t> {
    // SAFETY: the stack top is inside `stack`, 16-byte aligned; `plan` outlives the
    // child's use of it (CLONE_VFORK suspends us until it execs or exits); the mask
    // calls take valid kernel-sized sets.
    unsafe {
        let top = stack.as_mut_ptr().add(stack.len());
        let top = top.sub(top as usize % 16);
        let all: u64 = !0;
        let mut old: u64 = 0;
        set_mask_raw(&all, &mut old);
        let share_files = if plan.keep_below > 0 {
            libc::CLONE_FILES
        } else {
            0
        };
        let pid = libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | share_files | libc::SIGCHLD,
            (plan as *mut ChildPlan).cast(),
        );
        let clone_error = io::Error::last_os_error();
        set_mask_raw(&old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        Ok(pid)
    }
}

/// Set this thread's signal mask to `new` (64 signals, the kernel's set), the old one
/// into `old` unless null.
///
/// # Safety
/// `old` is null or valid for a write.
unsafe fn set_mask_raw(new: *const u64, old: *mut u64) {
    libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK,
        new,
        old,
        std::mem::size_of::<u64>(),
    );
}

/// The child, until exec. Any failure is reported through `plan.error` and ends the
/// child with 127 (the parent reaps it and returns the error).
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildPlan`, valid while we run; see the module's
    // rules for what may be called here.
    unsafe {
        let plan = &mut *(arg as *mut ChildPlan);
        let fail = |plan: &mut ChildPlan, step: Step| -> libc::c_int {
            let errno = *libc::__errno_location();
            plan.step = step;
            let errno = if errno == 0 { libc::EIO } else { errno };
            std::ptr::write_volatile(&mut plan.error, errno);
            libc::_exit(127)
        };
        // Sharing the worker's table: leave it first, taking along only the
        // descriptors below `keep_below` (the kernel copies just those, in words of
        // 64, when the range to close runs to the end). Where
        // close_range cannot (before Linux 5.9), a whole copy, closed at exec.
        if plan.keep_below > 0
            && libc::syscall(
                libc::SYS_close_range,
                plan.keep_below,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_UNSHARE,
            ) != 0
            && libc::unshare(libc::CLONE_FILES) != 0
        {
            return fail(plan, Step::Stdio);
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return fail(plan, Step::Start);
        }
        // The worker may have died before prctl took effect.
        if libc::getppid() != plan.parent {
            libc::_exit(EXIT_UNRECORDED);
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(plan, Step::Group);
        }
        for (target, fd) in plan.stdio.into_iter().enumerate() {
            // The pipe ends are all ≥ 3, so dup2 never lands on one of them; the copy
            // it makes is not close-on-exec (the ends themselves are: exec closes them).
            if libc::dup2(fd, target as libc::c_int) < 0 {
                return fail(plan, Step::Stdio);
            }
        }
        if libc::chdir(plan.cwd) != 0 {
            return fail(plan, Step::Chdir);
        }
        if write_record(plan) != 0 {
            return fail(plan, Step::Record);
        }
        reset_signals();
        libc::execve(plan.program, plan.argv, plan.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(*plan.sh_argv, plan.sh_argv, plan.envp);
        }
        fail(plan, Step::Exec)
    }
}

/// Write the agent record with our pid, in place. Returns 0, or -1 with errno set.
///
/// # Safety
/// Child side only; `plan`'s record fields point to the parent's live buffer.
unsafe fn write_record(plan: &mut ChildPlan) -> libc::c_int {
    let bytes = std::slice::from_raw_parts_mut(plan.record, plan.record_len);
    // Fits: checked in `SelfRecord::new`.
    AgentRecord::fill_pid(bytes, plan.pid_at, libc::getpid() as u32);
    // O_NONBLOCK: a FIFO planted at the record's path must not hang the spawn (the
    // open fails instead); a regular file is not affected.
    let fd = libc::open(
        plan.record_path,
        libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        0o600,
    );
    if fd < 0 {
        return -1;
    }
    // The record has a fixed length: overwriting in place leaves nothing of an older
    // one, and frees nothing (freeing file data is slow on some filesystems).
    let n = libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), 0);
    let errno = *libc::__errno_location();
    libc::close(fd);
    if n == bytes.len() as isize {
        return 0;
    }
    *libc::__errno_location() = if n < 0 { errno } else { libc::EIO };
    -1
}

/// Give the program a clean start: every signal we catch back to its default (exec
/// would do that too, but a signal arriving between the unmask and exec would run our
/// handler on the child's stack in our memory), SIGPIPE to its default (std ignores it
/// in this process; `Command` also resets it for children), and nothing blocked.
///
/// # Safety
/// Child side only.
unsafe fn reset_signals() {
    let mut default: libc::sigaction = std::mem::zeroed();
    default.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            // glibc's own two (cancellation, set-id broadcast): refused here, and only
            // ever sent to threads glibc knows, which this child is not.
            continue;
        }
        let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if caught || sig == libc::SIGPIPE {
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
    }
    set_mask_raw(&0, std::ptr::null_mut());
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
