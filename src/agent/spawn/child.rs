//! The child side of a spawn: what it needs prepared before the clone ([`ChildPlan`]),
//! the clone itself, and the child's steps until exec — the raw, async-signal-safe calls
//! the module rules of [`super`] allow.

use std::ffi::CString;
use std::io;

use nix::libc;

use crate::protocol::AgentRecord;

/// Exit status of a child that never exec'd because its worker died first.
pub const EXIT_UNRECORDED: i32 = 125;

/// Everything the child needs, prepared before the clone (raw pointers into buffers
/// the parent keeps alive until the child has exec'd or exited).
pub(super) struct ChildPlan {
    pub(super) program: *const libc::c_char,
    pub(super) argv: *const *const libc::c_char,
    /// `/bin/sh PROGRAM ARGS…`, for a program the kernel cannot exec itself (a script
    /// without `#!`), as `execvp` and so std's `Command` do.
    pub(super) sh_argv: *const *const libc::c_char,
    pub(super) envp: *const *const libc::c_char,
    pub(super) cwd: *const libc::c_char,
    /// Child ends of the pipes, in stdin, stdout, stderr order (all ≥ 3).
    pub(super) stdio: [libc::c_int; 3],
    /// The child shares our descriptor table and leaves it keeping only those below
    /// this (0 = it has a copy of its own from the clone).
    pub(super) keep_below: libc::c_uint,
    /// Once its stdio is in place, the child closes every descriptor from this one on
    /// (0: none; it kept only the three lent ends, close-on-exec).
    pub(super) close_from: libc::c_uint,
    pub(super) record_path: *const libc::c_char,
    pub(super) record: *mut u8,
    pub(super) record_len: usize,
    pub(super) pid_at: usize,
    pub(super) parent: libc::pid_t,
    /// Written by the child when a step fails (an errno, never 0), read by the parent
    /// after; `step` says which.
    pub(super) error: libc::c_int,
    pub(super) step: Step,
    /// The signals the parent catches (bit `n - 1` for signal `n`), to be put back to
    /// their default; `None`: ask about each.
    pub(super) caught: Option<u64>,
}

/// What the child was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Start,
    Group,
    Stdio,
    Chdir,
    Record,
    Exec,
}

/// The child's failure as an error that says what it was doing.
pub(super) fn step_error(
    step: Step,
    errno: libc::c_int,
    cwd: &CString,
    record: &CString,
) -> io::Error {
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
pub(super) fn clone_vfork(plan: &mut ChildPlan, stack: &mut [u8]) -> io::Result<libc::pid_t> {
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
        // What it kept below `keep_below` besides its stdio: ours, not the agent's.
        // (Where close_range is missing, a whole copy was made: closed at exec as before.)
        if plan.close_from > 0 {
            libc::syscall(libc::SYS_close_range, plan.close_from, libc::c_uint::MAX, 0);
        }
        if libc::chdir(plan.cwd) != 0 {
            return fail(plan, Step::Chdir);
        }
        if write_record(plan) != 0 {
            return fail(plan, Step::Record);
        }
        reset_signals(plan.caught);
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
/// `caught`: the signals the parent caught just before the clone (one call each);
/// `None`: ask about every signal (two calls each). A handler installed by another
/// thread between that look and the clone is a race the parent's spawn lock cannot
/// close; this process installs its handlers at its start.
///
/// # Safety
/// Child side only.
unsafe fn reset_signals(caught: Option<u64>) {
    let mut default: libc::sigaction = std::mem::zeroed();
    default.sa_sigaction = libc::SIG_DFL;
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // glibc's own two (cancellation, set-id broadcast) below SIGRTMIN: refused
        // here, and only ever sent to threads glibc knows, which this child is not.
        if sig > 31 && sig < libc::SIGRTMIN() {
            continue;
        }
        let caught = match caught {
            Some(mask) => mask & (1u64 << (sig - 1)) != 0,
            None => {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN
            }
        };
        if caught || sig == libc::SIGPIPE {
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
    }
    set_mask_raw(&0, std::ptr::null_mut());
}
