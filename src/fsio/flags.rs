//! A descriptor's status flags: what a pipe end shared with a child is switched between.

use std::io;

use nix::fcntl::{self, OFlag};

/// Make reads and writes on `fd` return at once (`on`) or wait (`!on`); the other status
/// flags are kept. The flag belongs to the open file: every copy of the descriptor
/// (a pipe end shared with a child) sees it.
pub fn set_nonblocking(fd: impl std::os::fd::AsFd, on: bool) -> io::Result<()> {
    let fd = fd.as_fd();
    let flags = OFlag::from_bits_truncate(fcntl::fcntl(fd, fcntl::FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags - OFlag::O_NONBLOCK
    };
    fcntl::fcntl(fd, fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(())
}

