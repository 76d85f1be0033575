//! The main thread's `/proc/self/task/<tid>/children` kept open and read again from its
//! start: one `pread` per look instead of an open, a `statx`, two reads and a close (5
//! calls and an open on every task's path of a worker of one slot, which runs its tasks
//! on its main thread). The kernel writes the list anew at each read from
//! offset 0 (a `seq_file`), and a descriptor opened for a thread lists that thread's
//! children for as long as it lives.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// The main thread's list, with the pid it was opened in (a forked child reopens it).
static MAIN: Mutex<Option<(i32, File)>> = Mutex::new(None);

/// The children of the main thread `main` (this process's id); `None` where the kernel
/// does not list them.
pub(super) fn of_main(main: i32) -> Option<Vec<u8>> {
    let mut held = MAIN.lock().unwrap_or_else(|p| p.into_inner());
    if held.as_ref().map(|(p, _)| *p) != Some(main) {
        *held = Some((main, open(main)?));
    }
    read_all(&held.as_ref()?.1)
}

/// The children of the calling thread `tid` (not the main one), read by name: a worker
/// of many slots runs each on a thread of its own, and a descriptor kept for each would
/// be a thousand more open files.
pub(super) fn of_me(tid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/self/task/{tid}/children")).ok()
}

fn open(tid: i32) -> Option<File> {
    File::open(format!("/proc/self/task/{tid}/children")).ok()
}

/// The whole list, read from offset 0, a page at a time: the kernel answers at most a
/// page a read, so a read asked for more stops short in the middle. A page read stops
/// short only at the end or when the next entry (a pid and a space, at most 11 bytes)
/// would not fit: a read that leaves more room than that was the last.
fn read_all(file: &File) -> Option<Vec<u8>> {
    const ENTRY: usize = 16;
    const PAGE: usize = 4096;
    let mut buf = Vec::new();
    let mut len = 0;
    loop {
        buf.resize(len + PAGE, 0);
        let n = file.read_at(&mut buf[len..len + PAGE], len as u64).ok()?;
        len += n;
        if n == 0 || PAGE - n > ENTRY {
            buf.truncate(len);
            return Some(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_list_is_read_anew_each_time() {
        // The test's own thread stands for the main one: the list kept is of `tid`.
        let tid = crate::host::tid();
        let before = of_main(tid).expect("the kernel lists children");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let during = String::from_utf8(of_main(tid).unwrap()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let after = String::from_utf8(of_main(tid).unwrap()).unwrap();
        assert!(
            during.split_whitespace().any(|p| p == pid),
            "{pid} listed: {during:?}"
        );
        assert!(!after.split_whitespace().any(|p| p == pid), "{after:?}");
        assert_eq!(String::from_utf8(before).unwrap(), after);
    }
}
