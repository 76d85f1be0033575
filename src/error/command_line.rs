//! Command lines in errors: what is wrong with one that cannot be split, and quoting one back in a message.

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
