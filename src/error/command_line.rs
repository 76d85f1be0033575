//! Command lines in errors: splitting one as a shell would (and what is wrong with it), and quoting one back in a message.

use super::{Error, Result};

/// What is wrong with a command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandLineProblem {
    /// Its quotes do not pair up, so it cannot be split into words.
    UnbalancedQuotes,
    /// It has no words at all.
    Empty,
}

impl CommandLineProblem {
    pub(super) fn describe(self, line: &str) -> String {
        match self {
            CommandLineProblem::UnbalancedQuotes => format!("{line:?} has unbalanced quotes"),
            CommandLineProblem::Empty => "is empty".to_string(),
        }
    }
}

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

/// `program args…`, quoted as a shell would need it, for error messages.
pub(super) fn command_line(program: &str, args: &[String]) -> String {
    let words = std::iter::once(program).chain(args.iter().map(String::as_str));
    shlex::try_join(words).unwrap_or_else(|_| format!("{program} {}", args.join(" ")))
}

pub(super) fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}
