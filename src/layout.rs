//! Where every file lives: root resolution, worker slots and all protocol paths.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::protocol::TaskId;

mod slot;
mod slot_list;
pub use slot::{Slot, MAX_SLOTS};
pub use slot_list::SlotList;

/// Environment variable naming the root directory.
pub use crate::env::ENV_HOME;

/// The conductor root and every path under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    path: PathBuf,
}

impl Root {
    /// A root at `path`, made absolute against the current directory: agents run in
    /// their project directory, and every path handed to them (or opened by their
    /// process before exec) must mean the same there.
    pub fn new(path: impl Into<PathBuf>) -> Root {
        let path = path.into();
        Root {
            path: std::path::absolute(&path).unwrap_or(path),
        }
    }

    /// `explicit` if given, else `$CONDUCTOR_HOME`, else `~/.claude-code/orchestrator`
    /// ([`Error::NoHome`] when HOME is not set either).
    pub fn resolve(explicit: Option<&Path>) -> Result<Root> {
        if let Some(p) = explicit {
            return Ok(Root::new(p));
        }
        if let Some(p) = std::env::var_os(ENV_HOME).filter(|v| !v.is_empty()) {
            return Ok(Root::new(p));
        }
        match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => Ok(Root::new(
                PathBuf::from(home)
                    .join(".claude-code")
                    .join("orchestrator"),
            )),
            None => Err(Error::NoHome {
                variable: crate::env::ENV_HOME,
            }),
        }
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fail with [`Error::NoRoot`] unless this is a conductor root: a directory with
    /// `workers/` in it (what `conductor init` and every worker make), so a mistyped
    /// `--root` is refused instead of silently becoming a new, empty root.
    pub fn require_existing(&self) -> Result<()> {
        // One look answers both questions (a `submit` asks twice: each was two `stat`s).
        match std::fs::metadata(self.workers_dir()) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(self.not_ours())
            }
            _ => Err(Error::NoRoot {
                path: self.path.clone(),
            }),
        }
    }

    /// [`Error::RootNotOurs`] when the root exists but this user may not look inside it
    /// (another user's root reads as no root at all otherwise); a root not made yet is
    /// no error.
    pub fn require_accessible(&self) -> Result<()> {
        match std::fs::metadata(self.workers_dir()) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(self.not_ours()),
            _ => Ok(()),
        }
    }

    /// [`Error::RootNotOurs`], naming the root's owner and this user.
    fn not_ours(&self) -> Error {
        use std::os::unix::fs::MetadataExt;
        let name = |uid: u32| {
            nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map_or_else(
                    || format!("uid {uid}"),
                    |u| format!("{} (uid {uid})", u.name),
                )
        };
        let owner = std::fs::metadata(&self.path)
            .map(|m| name(m.uid()))
            .unwrap_or_else(|_| "another user".to_string());
        Error::RootNotOurs {
            path: self.path.clone(),
            owner,
            me: name(nix::unistd::getuid().as_raw()),
        }
    }

    /// The root's `config.json`.
    pub fn config_file(&self) -> PathBuf {
        self.path.join("config.json")
    }

    /// `workers/`: one directory per worker slot.
    pub fn workers_dir(&self) -> PathBuf {
        self.path.join("workers")
    }

    /// The files of worker slot `slot`.
    pub fn worker(&self, slot: Slot) -> WorkerPaths {
        WorkerPaths {
            slot,
            dir: self.workers_dir().join(slot.to_string()),
        }
    }

    /// `queue/`: the shared queue any idle worker takes from.
    pub fn queue_dir(&self) -> PathBuf {
        self.path.join("queue")
    }

    /// Where a submit writes a task before renaming it into `pending/`.
    pub fn queue_tmp(&self) -> PathBuf {
        self.queue_dir().join("tmp")
    }

    /// `queue/pending/`: submitted tasks no worker has taken yet.
    pub fn queue_pending(&self) -> PathBuf {
        self.queue_dir().join("pending")
    }

    /// Every queued task's result, whichever worker ran it (links to the worker's copy).
    pub fn queue_results(&self) -> PathBuf {
        self.queue_dir().join("results")
    }

    /// Queue entries that could not be accepted, each with a `.reason`.
    pub fn queue_rejected(&self) -> PathBuf {
        self.queue_dir().join("rejected")
    }

    /// Where roots from before the root-wide registry ([`Root::ids_dir`]) kept the
    /// ids submitted to the queue; read only.
    pub fn queue_ids(&self) -> PathBuf {
        self.queue_dir().join("ids")
    }

    /// The root's shared directories, the one list of them: what workers, the queue, the
    /// id registry and the locks need. `queue::init_root` makes them (all but the
    /// legacy [`Root::queue_ids`], read only); `trust::verify_shared` checks those that
    /// exist, in this order.
    pub fn shared_dirs(&self) -> [PathBuf; 15] {
        [
            self.ids_dir(),
            self.workers_dir(),
            self.queue_dir(),
            self.queue_tmp(),
            self.queue_pending(),
            self.queue_results(),
            self.queue_rejected(),
            self.queue_ids(),
            self.queue_served(),
            self.keys_dir(),
            self.slots_dir(),
            self.agents_dir(),
            self.groups_dir(),
            self.paused_dir(),
            self.gates_dir(),
        ]
    }

    /// The root-wide task-id registry (see [`crate::ids`]): every id used on the root.
    pub fn ids_dir(&self) -> PathBuf {
        self.path.join("ids")
    }

    /// `ids/<id>`: where task `id` went.
    pub fn id_entry(&self, id: &TaskId) -> PathBuf {
        self.ids_dir().join(id.to_string())
    }

    /// When each key was last served (file mtimes), for fair scheduling.
    pub fn queue_served(&self) -> PathBuf {
        self.queue_dir().join("served")
    }

    /// Where the per-key locks live (one running task per key).
    pub fn keys_dir(&self) -> PathBuf {
        self.path.join("keys")
    }

    /// The lock held while a task with key `key` runs.
    pub fn key_lock(&self, key: &str) -> PathBuf {
        self.keys_dir().join(format!("{key}.lock"))
    }

    /// `agents/`: a file per agent preset whose account is usage-limited, root-wide.
    pub fn agents_dir(&self) -> PathBuf {
        self.path.join("agents")
    }

    /// `agents/<preset>.limited`: until when workers take no task of that preset.
    pub fn agent_limit(&self, preset: &str) -> PathBuf {
        self.agents_dir().join(format!("{preset}.limited"))
    }

    /// Where the run-slot locks of `maxRunning` live.
    pub fn slots_dir(&self) -> PathBuf {
        self.path.join("slots")
    }

    /// Run slot `i` of `maxRunning`.
    pub fn slot_lock(&self, i: u32) -> PathBuf {
        self.slots_dir().join(format!("{i}.lock"))
    }

    /// `groups/`: each group's definition (`<name>.json`) and its run slots
    /// (`<name>.<i>.lock/`), the group's own cap on running tasks.
    pub fn groups_dir(&self) -> PathBuf {
        self.path.join("groups")
    }

    /// Group `name`'s definition.
    pub fn group_file(&self, name: &str) -> PathBuf {
        self.groups_dir().join(format!("{name}.json"))
    }

    /// Run slot `i` of group `name`'s own limit.
    pub fn group_slot_lock(&self, name: &str, i: u32) -> PathBuf {
        self.groups_dir().join(format!("{name}.{i}.lock"))
    }

    /// `ports/`: a lock per port of `portRange` handed to a running worktree task
    /// (`<port>.lock`, held for the task as its key is).
    pub fn ports_dir(&self) -> PathBuf {
        self.path.join("ports")
    }

    /// The lock a task holds on TCP port `port` while it runs.
    pub fn port_lock(&self, port: u16) -> PathBuf {
        self.ports_dir().join(format!("{port}.lock"))
    }

    /// `spend/`: the day's spend ledger, `<YYYY-MM-DD>.jsonl` (local date), a line per
    /// finished task that reported a cost.
    pub fn spend_dir(&self) -> PathBuf {
        self.path.join("spend")
    }

    /// `paused/`: a file per pause in force (`all`, `slot-N`, `key-K`, `group-G`).
    pub fn paused_dir(&self) -> PathBuf {
        self.path.join("paused")
    }

    /// Gates of other long-lived roles (e.g. one launcher per tmux session).
    pub fn gates_dir(&self) -> PathBuf {
        self.path.join(".locks")
    }

    /// The slot's paths, if it exists; else [`Error::NoRoot`] when there is no root at
    /// all, or [`Error::NoSuchSlot`]: a task is never left in a slot made by mistake.
    pub fn existing_slot(&self, slot: Slot) -> Result<WorkerPaths> {
        let w = self.worker(slot);
        if w.dir.is_dir() {
            return Ok(w);
        }
        self.require_existing()?;
        Err(Error::NoSuchSlot {
            slot: slot.0,
            root: self.path().to_path_buf(),
        })
    }

    /// The `queue/pending/` entry of task `id`, if it waits there (entries are named
    /// `…~<id>.json`).
    pub fn pending_entry(&self, id: &TaskId) -> Result<Option<PathBuf>> {
        let suffix = format!("~{id}.json");
        Ok(crate::fsio::read_dir_if_exists(&self.queue_pending())?
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(&suffix)))
            .map(|e| e.path()))
    }

    /// The slots under `workers/`, in order. Entries that are not slot numbers are
    /// skipped; no root yet means no slots.
    pub fn slots(&self) -> Result<Vec<Slot>> {
        let dir = self.workers_dir();
        let Some(entries) = crate::fsio::read_dir_if_exists(&dir)? else {
            return Ok(Vec::new());
        };
        let mut slots = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list", &dir, e))?;
            let name = entry.file_name();
            match name.to_str().map(str::parse::<Slot>) {
                // The entry's type from the listing (no stat per slot: the elected
                // sweeper lists a thousand slots every interval); a link is followed.
                Some(Ok(slot)) if is_dir_entry(&entry) => slots.push(slot),
                _ => tracing::debug!("ignoring {:?} in {}", name, dir.display()),
            }
        }
        slots.sort();
        Ok(slots)
    }
}

/// Whether a listed entry is a directory (or a link to one).
fn is_dir_entry(entry: &std::fs::DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_symlink() => entry.path().is_dir(),
        Ok(t) => t.is_dir(),
        Err(_) => entry.path().is_dir(),
    }
}

/// Paths inside one worker slot directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPaths {
    /// The slot.
    pub slot: Slot,
    /// The slot's directory, `workers/<slot>/`.
    pub dir: PathBuf,
}

impl WorkerPaths {
    /// The inbox's name.
    pub const TASK: &'static str = "task.json";
    /// The cancel file's name.
    pub const CANCEL: &'static str = "cancel";
    /// The names whose change wakes the slot's worker: the inbox and the cancel file.
    /// Both worker kinds watch (or poll) these, and gc never removes them.
    pub const WAKE_NAMES: [&'static str; 2] = [Self::TASK, Self::CANCEL];

    /// The files named by [`Self::WAKE_NAMES`]: what a poller stats for the slot (a
    /// directory's mtime would change with every status write).
    pub fn wake_files(&self) -> [PathBuf; 2] {
        Self::WAKE_NAMES.map(|name| self.dir.join(name))
    }
    /// `task.json`: the inbox, one undelivered task.
    pub fn task(&self) -> PathBuf {
        self.dir.join(Self::TASK)
    }
    /// `running.json`: the task the worker took and runs.
    pub fn running(&self) -> PathBuf {
        self.dir.join("running.json")
    }
    /// `status.json`: the worker's state.
    pub fn status(&self) -> PathBuf {
        self.dir.join("status.json")
    }
    /// `result.json`: the slot's latest result.
    pub fn result(&self) -> PathBuf {
        self.dir.join("result.json")
    }
    /// `results/`: every result, one file per task id.
    pub fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }
    /// `results/<id>.json`: task `id`'s result.
    pub fn result_for(&self, id: &TaskId) -> PathBuf {
        self.results_dir().join(format!("{id}.json"))
    }
    /// Every task as it was run, kept beside its result until gc.
    pub fn tasks_dir(&self) -> PathBuf {
        self.dir.join("tasks")
    }
    /// The copy of task `id` as it ran, kept beside its result.
    pub fn task_record(&self, id: &TaskId) -> PathBuf {
        self.tasks_dir().join(format!("{id}.json"))
    }
    /// A finished run's log (what `output.log` held while it ran).
    pub fn task_log(&self, id: &TaskId) -> PathBuf {
        self.tasks_dir().join(format!("{id}.log"))
    }
    /// A finished `stream-json` run's raw stdout (what `output.jsonl` held).
    pub fn task_stream(&self, id: &TaskId) -> PathBuf {
        self.tasks_dir().join(format!("{id}.jsonl"))
    }
    /// The live log: the running agent's stdout (rendered, for a `stream-json` run)
    /// and its stderr lines, marked.
    pub fn output_log(&self) -> PathBuf {
        self.dir.join("output.log")
    }
    /// The running `stream-json` agent's raw stdout.
    pub fn output_stream(&self) -> PathBuf {
        self.dir.join("output.jsonl")
    }
    /// The file whose arrival asks the worker to cancel the running task.
    pub fn cancel(&self) -> PathBuf {
        self.dir.join(Self::CANCEL)
    }
    /// `.lock/`: held by whoever serves (or recovers) the slot.
    pub fn lock_dir(&self) -> PathBuf {
        self.dir.join(".lock")
    }
    /// The gate file that keeps a second worker from serving the slot.
    pub fn worker_gate(&self) -> PathBuf {
        self.dir.join(".worker.lock")
    }
    /// Replaced files waiting to be freed off the hot path (the worker's own).
    pub fn trash_dir(&self) -> PathBuf {
        self.dir.join(".trash")
    }
    /// An inbox file being rejected: out of the inbox, not yet in `rejected/`. Never a
    /// task to run (recovery finishes the rejection).
    pub fn rejecting(&self) -> PathBuf {
        self.dir.join("rejecting.json")
    }
    /// The running agent's pid, written before the agent may exec (see
    /// [`crate::protocol::AgentRecord`]).
    pub fn agent_record(&self) -> PathBuf {
        self.dir.join(".agent.json")
    }
    /// Where a task the worker refused to parse is moved, for a person to read.
    pub fn rejected_dir(&self) -> PathBuf {
        self.dir.join("rejected")
    }

    /// Create the slot's directories (`results/`, `tasks/`, `rejected/`), 0700.
    /// Idempotent; a slot at or over [`MAX_SLOTS`] is refused. The root is not checked
    /// here: callers check it once for many slots (per slot, starting a thousand slots
    /// was quadratic).
    pub fn create_dirs(&self) -> Result<()> {
        Slot::checked(self.slot.0)?;
        for dir in [self.results_dir(), self.tasks_dir(), self.rejected_dir()] {
            crate::fsio::ensure_dir(&dir)?;
        }
        Ok(())
    }

    /// [`WorkerPaths::create_dirs`], and an `idle` status if the slot has none yet.
    /// Idempotent.
    pub fn create_files(&self) -> Result<()> {
        use crate::fsio::{self, Durability};
        use crate::protocol::{Status, WorkerState};
        self.create_dirs()?;
        let idle = fsio::to_json_bytes(&Status::new(WorkerState::Idle));
        match fsio::write_new(&self.status(), &idle, Durability::Atomic) {
            Err(e) if e.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => Ok(()),
            other => other,
        }
    }
}
