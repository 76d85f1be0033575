//! Whether this process fsyncs (its root's `config.json` `fsync`): one switch, read by
//! every durable write.

/// Whether this process fsyncs: on unless its root's config turns it off
/// ([`set_fsync`]); a process serves one root.
static FSYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turn this process's fsyncs on or off, as its root's `config.json` `fsync` says (off
/// only for a root whose loss with the machine costs nothing: `conductor run`'s private
/// one). Every write stays atomic (temp file, then rename or link) either way.
pub fn set_fsync(on: bool) {
    FSYNC.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn fsync_on() -> bool {
    FSYNC.load(std::sync::atomic::Ordering::Relaxed)
}
