//! Which signals this process catches, from the kernel's own account (`SigCgt:` in
//! `/proc/self/status`): the child puts only those back to their default before exec,
//! not every one of the 64 after asking about each (two calls a signal, on the path of
//! every task).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// `/proc/self/status` kept open, with the pid it was opened in (a forked child
/// reopens it: `self` was resolved at the open). Read again from its start for each
/// spawn: the kernel writes the file anew at every read from offset 0.
static STATUS: Mutex<Option<(u32, File)>> = Mutex::new(None);

/// The signals `pid` (this process) catches now, bit `n - 1` for signal `n`; `None`
/// where `/proc` cannot say (not mounted): the child then asks about every signal.
pub(super) fn caught(pid: u32) -> Option<u64> {
    let mut held = STATUS.lock().unwrap_or_else(|p| p.into_inner());
    if held.as_ref().map(|(p, _)| *p) != Some(pid) {
        *held = Some((pid, File::open("/proc/self/status").ok()?));
    }
    let (_, file) = held.as_ref()?;
    let mut buf = [0u8; 4096];
    let n = file.read_at(&mut buf, 0).ok()?;
    sigcgt(&buf[..n])
}

/// The `SigCgt:` mask of a `/proc/PID/status` text (16 hex digits).
fn sigcgt(status: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\nSigCgt:\t";
    let at = status.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let hex = status.get(at..at + 16)?;
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caught_mask_is_read_from_the_status_text() {
        let text = b"Name:\tx\nSigIgn:\t0000000000001000\nSigCgt:\t0000000043817efb\nCapInh:\t0\n";
        assert_eq!(sigcgt(text), Some(0x4381_7efb));
        assert_eq!(sigcgt(b"Name:\tx\nSigCgt:\t00"), None);
        assert_eq!(sigcgt(b"Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_seen_catching_a_signal_it_catches() {
        extern "C" fn noop(_: nix::libc::c_int) {}
        let action = nix::sys::signal::SigAction::new(
            nix::sys::signal::SigHandler::Handler(noop),
            nix::sys::signal::SaFlags::empty(),
            nix::sys::signal::SigSet::empty(),
        );
        // SAFETY: a handler that does nothing, on a signal no test sends.
        unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGUSR2, &action) }.unwrap();
        let mask = caught(std::process::id()).expect("/proc/self/status is readable");
        assert_ne!(mask & (1 << (nix::libc::SIGUSR2 - 1)), 0, "{mask:x}");
    }
}
