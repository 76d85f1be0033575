//! The library's error type: every failure names the file and the operation.

mod command_line;
mod exit;
mod types;
pub use command_line::CommandLineProblem;
pub use exit::{ExitClass, EXIT_CODES_HELP};
pub use types::{Error, FileProblem, Result};

/// Split `line` into words as a shell would (no expansion), refusing an empty line or
/// unbalanced quotes; `what` names the command in the error ("agent", "orchestrator").
pub(crate) fn split_command_line(what: &'static str, line: &str) -> Result<Vec<String>> {
    let bad = |problem| Error::BadCommandLine {
        what,
        line: line.to_string(),
        problem,
    };
    let words = shlex::split(line).ok_or_else(|| bad(CommandLineProblem::UnbalancedQuotes))?;
    if words.is_empty() {
        return Err(bad(CommandLineProblem::Empty));
    }
    Ok(words)
}
