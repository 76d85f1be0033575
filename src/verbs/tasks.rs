//! The `tasks` verb's filters as the CLI (`conductor tasks --since`) and the MCP `tasks` and `totals` tools both take them.

use std::time::SystemTime;

/// `since` as given: an RFC 3339 time, or a duration ago (`90s`, `2h`, `1d`); the error
/// says which forms are taken.
pub fn since(s: &str) -> Result<SystemTime, String> {
    if let Some(t) = crate::protocol::parse_rfc3339(s) {
        return Ok(t);
    }
    let d = crate::text::parse_duration(s)
        .map_err(|_| format!("{s:?} is neither a duration (90s, 2h, 1d) nor an RFC 3339 time"))?;
    Ok(SystemTime::now()
        .checked_sub(d)
        .unwrap_or(SystemTime::UNIX_EPOCH))
}
