//! What kind of failure an error is, and so the exit code each binary ends with.

use super::types::Error;

/// What kind of failure an error is, and so the binaries' exit code. Every exit code
/// conductor's binaries use is defined here, once; `--help` and the README list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitClass {
    /// Everything went well.
    Ok,
    /// An error, a failed task, or an expired `--timeout`.
    Failure,
    /// Bad usage: arguments, slot names, input files, no conductor root.
    Usage,
    /// Refused: something alive is in the way (busy inbox, slot already served, nested
    /// start, a session in use).
    Refused,
    /// Nobody serves it: a wait no live worker would answer, or whose worker died with
    /// the task in hand and nobody recovers it.
    Nobody,
    /// A person is wanted: `wait --any` woke for a task that needs approval or a daily
    /// budget spent, not for a task's end.
    NeedsPerson,
    /// Stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2.
    Interrupted,
}

/// The exit codes, as `--help` lists them (each binary's `after_help`).
pub const EXIT_CODES_HELP: &str = "Exit codes: 0 ok, 1 error, failed task or --timeout expired, 2 usage (bad arguments, missing files, no conductor root), 3 refused (busy inbox, slot already served, nested start), 4 nobody serves it (a wait no live worker would answer, or whose worker died and nobody recovers its task), 5 a person is wanted (`wait --any`: a task needs approval, or a daily budget is spent), 130 interrupted (Ctrl-C)";

impl ExitClass {
    /// The process exit code of this class.
    pub const fn code(self) -> i32 {
        match self {
            ExitClass::Ok => 0,
            ExitClass::Failure => 1,
            ExitClass::Usage => 2,
            ExitClass::Refused => 3,
            ExitClass::Nobody => 4,
            ExitClass::NeedsPerson => 5,
            ExitClass::Interrupted => 130,
        }
    }
}

impl Error {
    /// Which kind of failure this is (and so the binaries' exit code).
    pub(crate) fn exit_class(&self) -> ExitClass {
        use Error::*;
        match self {
            GateHeld { .. }
            | InboxBusy { .. }
            | Nested { .. }
            | SlotBusy { .. }
            | NotPublished { .. }
            | TooDeep { .. }
            | CancelMidWrite { .. }
            | CancelKeptMoving { .. }
            | NotEditable { .. }
            | NoQuestion { .. }
            | BranchExists { .. }
            | RepoDirty { .. }
            | WorkNotMerged { .. }
            | DetachedHead { .. }
            | GroupInUse { .. } => ExitClass::Refused,
            InvalidSlot { .. }
            | NoSuchSlot { .. }
            | SlotTooLarge { .. }
            | InvalidTask { .. }
            | IdTaken { .. }
            | BadCommandLine { .. }
            | NotADirectory { .. }
            | UnknownPreset { .. }
            | AgentNotFound { .. }
            | NoHome { .. }
            | NoRoot { .. }
            | RootGone { .. }
            | RootNotOurs { .. }
            | NoTaskRecord { .. }
            | NotRetryable { .. }
            | NoSuchTask { .. }
            | AmbiguousId { .. }
            | UnknownDependency { .. }
            | DependencyGone { .. }
            | UnknownGroup { .. }
            | AfterNeedsQueue { .. }
            | BadTaskDir { .. }
            | BadArgument { .. }
            | BadEnvVar { .. }
            | NoSlots { .. }
            | BadSlotList { .. }
            | NotAFileName { .. }
            | NotARepository { .. }
            | BareRepository { .. }
            | BadBase { .. }
            | NoWorktree { .. }
            | TaskUnfinished { .. }
            | BranchGone { .. } => ExitClass::Usage,
            NobodyServes { .. }
            | WorkerDied { .. }
            | DependencyUnserved { .. }
            | PresetUnserved { .. } => ExitClass::Nobody,
            Io { .. }
            | BadFile { .. }
            | LockLost { .. }
            | Timeout { .. }
            | Watch { .. }
            | WorkerGone { .. }
            | Spawn { .. }
            | Command { .. }
            | CallFailed { .. }
            | RetryMissing { .. }
            | UncommittedNotCopied { .. }
            | NotDiscarded { .. }
            | WorktreeFolder { .. }
            | MergeConflict { .. } => ExitClass::Failure,
        }
    }
}
