//! Facts about other processes read from `/proc`: parent, group, state, uid, environment.
//!
//! Everything here answers "don't know" (`None`, `false`, empty) where there is no
//! procfs or the process is gone or not readable: callers must treat that as "not ours".

use std::collections::{HashMap, HashSet};
use std::fs;

/// The fields of `/proc/<pid>/stat` we judge by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`…
    pub state: char,
    /// Field 4.
    pub ppid: u32,
    /// Field 5: the process group.
    pub pgrp: u32,
    /// Field 6: the session.
    pub sid: u32,
    /// Field 22: clock ticks since boot at which the process started.
    pub start_time: u64,
}

impl Stat {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// `/proc/<pid>/stat` of `pid`; `None` when the process is gone, the platform has no
/// procfs, or the line does not parse. The one reader of that file.
pub fn stat(pid: u32) -> Option<Stat> {
    // One buffer that holds any stat line (52 numbers and a 16-byte name): an open and
    // two reads, where `read_to_string` asks the size, then reads in growing steps (8
    // calls; it is read for every agent a worker starts).
    use std::io::Read;
    let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 2048];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(std::str::from_utf8(&buf[..len]).ok()?)
}

/// Fields are counted after the command name, which may itself hold spaces and ')'.
fn parse_stat(stat: &str) -> Option<Stat> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After ")" come field 3 (state) onwards.
    let fields: Vec<&str> = after_comm.split_whitespace().take(22 - 2).collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let mut state = field(3)?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return None;
    };
    Some(Stat {
        state,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// The real uid of `pid` (the `Uid:` line of `/proc/<pid>/status`).
pub fn uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_uid(&status)
}

fn parse_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line["Uid:".len()..].split_whitespace().next()?.parse().ok()
}

/// How many inotify instances `pid` holds: its descriptors naming one (readable only for
/// our own processes; 0 when unreadable). Each costs its process a wait at close, and a
/// user has 128 by default.
#[cfg(any(test, feature = "internals"))]
pub fn inotify_instances(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:inotify")
                })
                .count()
        })
        .unwrap_or(0)
}

/// Whether `entry` (`NAME=value`) is one of `pid`'s environment strings. Readable only
/// for our own processes; a zombie has none.
pub fn environ_has(pid: u32, entry: &str) -> bool {
    fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry.as_bytes()))
}

/// The value of `pid`'s environment variable `name`, if it has it (readable only for
/// our own processes).
pub fn environ_value(pid: u32, name: &str) -> Option<Vec<u8>> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    env.split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .map(<[u8]>::to_vec)
}

/// The live processes of user `uid` that have `entry` (`NAME=value`) among their
/// environment strings: what is left of a task whose agents carry its marker. Reads
/// every process's status and (for those of `uid`) environment: for the rare question
/// whether a dead holder left anything behind, not for a hot path.
pub fn with_environ_entry(entry: &str, uid_wanted: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| uid(*pid) == Some(uid_wanted))
        .filter(|pid| stat(*pid).is_some_and(|s| !s.is_zombie()))
        .filter(|pid| environ_has(*pid, entry))
        .collect();
    found.sort_unstable();
    found
}

/// Every process visible now, with its stat.
pub fn snapshot() -> HashMap<u32, Stat> {
    snapshot_since(0, &HashSet::new())
}

/// The processes visible now that were created after the process `first` (itself
/// included), with their stats: pids are handed out in increasing order, so only pids
/// from `first` up need reading — unless they wrapped around since, which
/// `ns_last_pid` tells (then every process is read). Reading every process's stat
/// after each task would cost a millisecond or more on a busy machine. Pids in `skip`
/// are left out unread.
pub fn snapshot_since(first: u32, skip: &HashSet<u32>) -> HashMap<u32, Stat> {
    let wrapped = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_none_or(|last| last < first);
    let from = if wrapped { 0 } else { first };
    let Ok(dir) = fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid >= from && !skip.contains(pid))
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// The processes of `table` below `root` (children, their children…), root excluded.
pub fn descendants(table: &HashMap<u32, Stat>, root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, st) in table {
        children.entry(st.ppid).or_default().push(*pid);
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(p) = next.pop() {
        for c in children.get(&p).into_iter().flatten() {
            // A pid cycle cannot happen in one snapshot of a tree, but a torn read could.
            if *c != root && !found.contains(c) {
                found.push(*c);
                next.push(*c);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let s =
            "4711 (a) b (c)) S 42 4700 4700 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                state: 'S',
                ppid: 42,
                pgrp: 4700,
                sid: 4700,
                start_time: 123456
            })
        );
        assert_eq!(parse_stat("12 (x) Z 1"), None);
        let s =
            "4711 (a) b (c)) S 1 4712 4713 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                state: 'S',
                ppid: 1,
                pgrp: 4712,
                sid: 4713,
                start_time: 123456,
            })
        );
    }

    #[test]
    fn truncated_or_garbled_stat_lines_do_not_parse() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("4711 (x) S 1 2 3"), None);
        assert_eq!(
            parse_stat("4711 (x) SS 1 4712 4713 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 9"),
            None
        );
        assert_eq!(
            parse_stat("4711 (x) S one 4712 4713 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 9"),
            None
        );
    }

    #[test]
    fn own_stat_matches_what_the_process_knows() {
        let me = stat(std::process::id()).expect("procfs");
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw() as u32);
        assert_eq!(me.pgrp, nix::unistd::getpgrp().as_raw() as u32);
        assert_ne!(me.state, 'Z');
    }

    #[test]
    fn uid_is_the_real_one() {
        assert_eq!(parse_uid("Name:\tx\nUid:\t1000\t0\t0\t0\n"), Some(1000));
        assert_eq!(parse_uid("Name:\tx\n"), None);
    }

    #[test]
    fn our_own_process_is_described() {
        let me = std::process::id();
        let st = stat(me).expect("procfs");
        assert!(!st.is_zombie());
        assert_eq!(uid(me), Some(nix::unistd::getuid().as_raw()));
        let path = std::env::var("PATH").unwrap_or_default();
        assert!(environ_has(me, &format!("PATH={path}")) || path.is_empty());
        assert!(!environ_has(me, "NO_SUCH_VARIABLE_HERE=1"));
        let table = snapshot();
        assert!(table.contains_key(&me));
        assert!(descendants(&table, st.ppid).contains(&me));
    }
}
