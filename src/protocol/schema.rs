//! The files' schema version (`SCHEMA`): written, defaulted when absent, and a newer
//! one refused; and timestamps read leniently.

use std::path::Path;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::error::{Error, FileProblem, Result};

/// The schema version of files this conductor writes.
pub const SCHEMA: u32 = 1;

pub(super) fn schema_v1() -> u32 {
    SCHEMA
}

/// Refuse a file written by a newer conductor instead of guessing at it.
pub(crate) fn check_schema(path: &Path, found: u32) -> Result<()> {
    if found > SCHEMA {
        return Err(Error::bad(
            path,
            FileProblem::Schema {
                found: found.into(),
                supported: SCHEMA,
            },
        ));
    }
    Ok(())
}

/// Accept a timestamp as a string (ours, JavaScript's) or a number (Python's `time.time()`).
pub(super) fn lenient_timestamp<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}
