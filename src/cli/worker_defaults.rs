//! What a worker started without DIR and without an agent says about the defaults it took.

use std::path::Path;

/// `conductor worker 0` alone serves the current directory with `claude -p`, which lets
/// Claude Code edit files there: say so on stderr, and how to choose, rather than do it
/// silently. Given a DIR or an agent (`--agent`, `--preset`: `chosen`), nothing is said.
pub(super) fn say_defaults(chosen: bool, dir: &Path, line: &str) {
    if let Some(note) = defaults_note(chosen, dir, line) {
        eprintln!("{note}");
    }
}

fn defaults_note(chosen: bool, dir: &Path, line: &str) -> Option<String> {
    if chosen {
        return None;
    }
    Some(format!(
        "note: no DIR and no agent given: serving the current directory {} with the default \
         agent `{line}` (it may edit files there); to choose, give them: `conductor-worker \
         N DIR --agent CMD` or `--preset codex|gemini|command`",
        dir.display()
    ))
}
