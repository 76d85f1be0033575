//! The front end's own refusals: bad arguments and "not now", each with its exit class.

use crate::error::ExitClass;

/// An error of the command line itself, not of the library.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The arguments or input cannot be used as given.
    #[error("{0}")]
    Usage(String),
    /// Not now: something alive is in the way.
    #[error("{0}")]
    Refused(String),
}

impl CliError {
    pub fn exit_class(&self) -> ExitClass {
        match self {
            CliError::Usage(_) => ExitClass::Usage,
            CliError::Refused(_) => ExitClass::Refused,
        }
    }
}
