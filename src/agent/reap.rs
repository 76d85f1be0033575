//! Reaping a finished task's leftovers: stopping what it left behind outside its process
//! group. Descendants that ran `setsid` (or `setpgid`) are reparented to us, the
//! subreaper, when their parent dies.

mod children;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::procfs::{self, Stat};

/// How long an escaped descendant gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_millis(300);
/// Give up on processes that do not die (uninterruptible sleep) after this long.
const REAP_BOUND: Duration = Duration::from_secs(5);

/// The leaders of this process's agents that are not reaped yet. A reap skips them
/// and the members of their groups without reading anything of them: with hundreds of
/// agents running, reading each sibling's `/proc` entries (its environment above all)
/// on every task's end cost seconds of system time per hundred tasks. An unreaped
/// leader's pid cannot be reused, so a pid found here is that agent.
static LIVE_LEADERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn live_leaders() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LIVE_LEADERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Note a spawned agent's leader (before anything may reap leftovers).
pub(super) fn register_leader(pid: u32) {
    live_leaders().push(pid);
}

/// Forget a leader: call before reaping it, so that its pid is never skipped once it
/// can belong to another process.
pub(super) fn forget_leader(pid: u32) {
    live_leaders().retain(|p| *p != pid);
}

/// A process table that reaps share: listing `/proc` with a thousand agents running
/// costs about a millisecond, and a burst ends hundreds of tasks at once.
struct SharedTable {
    /// When it began to be read: it shows every process as of some moment after this.
    started: Instant,
    /// The oldest pid it covers.
    from: u32,
    table: Arc<HashMap<u32, Stat>>,
}

static LAST_TABLE: Mutex<Option<SharedTable>> = Mutex::new(None);

/// The processes from `pgid` up, as of a moment after `asked`: the last table read if
/// it began after `asked` and covers `pgid`, else a new one. One reader at a time, so
/// reaps that ask while a table is being read take the next one together.
fn table_after(asked: Instant, pgid: u32) -> Arc<HashMap<u32, Stat>> {
    let mut last = LAST_TABLE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = last.as_ref() {
        if t.started > asked && t.from <= pgid {
            return Arc::clone(&t.table);
        }
    }
    let started = Instant::now();
    let skip: HashSet<u32> = live_leaders().iter().copied().collect();
    let table = Arc::new(procfs::snapshot_since(pgid, &skip));
    *last = Some(SharedTable {
        started,
        from: pgid,
        table: Arc::clone(&table),
    });
    table
}

/// After the agent's group `pgid` was killed and its leader reaped: stop and reap every
/// process left from the task. Ours are the children of this process (orphans land
/// here) that are in the group or carry the task's `marker` environment entry, and
/// everything below them. Returns how many escaped descendants were signalled.
///
/// When no thread orphans come to has a child but live agents' leaders, nothing of the
/// task is left and `/proc` is not read: see [`nothing_orphaned_here`].
pub(super) fn reap_leftovers(pgid: u32, marker: &str) -> usize {
    if nothing_orphaned_here() {
        return 0;
    }
    let me = crate::host::pid();
    let began = Instant::now();
    let mut termed: HashMap<u32, Instant> = HashMap::new();
    let mut escaped = 0;
    loop {
        // Everything of the task descends from the agent, the group's leader: no
        // process older than it can be ours. (Our own pid is older: never in the table.)
        let asked = Instant::now();
        let siblings: HashSet<u32> = live_leaders()
            .iter()
            .copied()
            .filter(|p| *p != pgid)
            .collect();
        let table = table_after(asked, pgid);
        let left = task_processes(&table, me, pgid, marker, &termed, &siblings);
        if left.is_empty() {
            return escaped;
        }
        let mut waiting = false;
        for pid in left {
            let st = table[&pid];
            if st.is_zombie() {
                if st.ppid == me {
                    let _ = waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WNOHANG));
                } else {
                    waiting = true; // Its parent reaps it, or it comes to us.
                }
                continue;
            }
            waiting = true;
            let in_group = st.pgrp == pgid;
            match termed.get(&pid) {
                // The group was already sent SIGKILL; it is on its way.
                _ if in_group => {}
                None => {
                    escaped += 1;
                    tracing::warn!("stopping pid {pid}: it left agent group {pgid} ({marker})");
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
                    termed.insert(pid, Instant::now());
                }
                Some(at) if at.elapsed() >= TERM_GRACE => {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
                Some(_) => {}
            }
        }
        if !waiting {
            continue;
        }
        if began.elapsed() >= REAP_BOUND {
            tracing::warn!("agent group {pgid}: processes still left after {REAP_BOUND:?}");
            return escaped;
        }
        // Processes die asynchronously and orphans are reparented to us as their
        // parents die: look again shortly.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether no thread that orphans come to has a child but live agents' leaders: the
/// main thread and the calling one (`/proc/self/task/<tid>/children`; `false` where the
/// kernel does not list children).
///
/// Why that proves a finished task left nothing (its leader reaped, its group killed):
/// every process of the task descends from the leader. When a process dies, its
/// children are moved to the nearest child subreaper up the chain — this process — and
/// there to its first live thread, the main one (the kernel walks the thread list from
/// the group leader). A dying process stays a child of ours (a zombie) until we reap it,
/// and its children are moved before it becomes one. So at every moment each live
/// process of the task is a child of the main thread or below one (or, for the leader
/// itself, of the thread that started it). Reading `/proc` instead cost about a tenth
/// of a many-slot worker's CPU in a burst of short tasks.
fn nothing_orphaned_here() -> bool {
    let only_leaders = |children: Option<Vec<u8>>| -> bool {
        let Some(children) = children else {
            return false;
        };
        let leaders = live_leaders();
        String::from_utf8_lossy(&children)
            .split_whitespace()
            .all(|p| p.parse::<u32>().is_ok_and(|p| leaders.contains(&p)))
    };
    let (main, me) = (crate::host::pid() as i32, crate::host::tid());
    only_leaders(children::of_main(main)) && (me == main || only_leaders(children::of_me(me)))
}

/// The processes in `table` that belong to the task: our children in its group, with
/// its marker, or signalled by us before (a zombie has no environment left to read);
/// and all their descendants. A process in another live agent's group is that agent's
/// (its own end kills the group).
fn task_processes(
    table: &HashMap<u32, Stat>,
    me: u32,
    pgid: u32,
    marker: &str,
    termed: &HashMap<u32, Instant>,
    siblings: &HashSet<u32>,
) -> Vec<u32> {
    let mut found: HashSet<u32> = HashSet::new();
    for (pid, st) in table {
        if st.ppid != me || found.contains(pid) {
            continue;
        }
        if siblings.contains(&st.pgrp) && !termed.contains_key(pid) {
            continue;
        }
        let ours = st.pgrp == pgid
            || termed.contains_key(pid)
            || (!st.is_zombie() && procfs::environ_has(*pid, marker));
        if ours {
            found.insert(*pid);
            found.extend(procfs::descendants(table, *pid));
        }
    }
    // Descendants we signalled that are not reparented yet are still ours.
    found.extend(termed.keys().filter(|p| table.contains_key(p)));
    found.into_iter().collect()
}
