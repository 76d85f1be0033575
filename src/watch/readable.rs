//! Waiting, bounded, for descriptors to be readable (`poll(2)`): what every inline
//! watcher's wait comes down to.

use std::time::Duration;

/// Wait at most `timeout` (whole milliseconds, rounded up: a shorter wait must not spin)
/// for `own` (a watcher's own descriptor, when it has one to wait on) or one of `fds` to
/// be readable or hung up: whether `own` is, and the readable ones among `fds`, bit `i`
/// for `fds[i]`. Interrupted by a signal: nothing ready (the caller looks again).
pub fn poll_readable(
    own: Option<std::os::fd::BorrowedFd<'_>>,
    fds: &[std::os::fd::BorrowedFd<'_>],
    timeout: Duration,
) -> nix::Result<(bool, u64)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut polled: Vec<PollFd<'_>> = Vec::with_capacity(fds.len() + 1);
    polled.extend(own.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
    let first = polled.len();
    polled.extend(fds.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    match poll(
        &mut polled,
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
    ) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok((false, 0)),
        Err(e) => return Err(e),
    }
    let ready = |p: &PollFd<'_>| p.revents().is_some_and(|r| !r.is_empty());
    let bits = polled[first..]
        .iter()
        .enumerate()
        .filter(|(_, p)| ready(p))
        .fold(0u64, |bits, (i, _)| bits | (1 << i));
    Ok((first == 1 && ready(&polled[0]), bits))
}
