//! Timestamps as the protocol files carry them: RFC 3339, UTC, milliseconds.

use std::time::SystemTime;

/// The current time in RFC 3339 with milliseconds, UTC (as JavaScript's `toISOString`).
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Format a time in RFC 3339 with milliseconds, UTC.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parse an RFC 3339 timestamp: `Z` (ours, JavaScript's) or a numeric offset such as
/// `+02:00` (other tools'), with or without fractional seconds.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    if let Some(base) = s.strip_suffix('Z').or_else(|| s.strip_suffix('z')) {
        return humantime::parse_rfc3339_weak(base).ok();
    }
    // A numeric offset: the last six characters, `±HH:MM`.
    let split = s.len().checked_sub(6)?;
    let (base, offset) = (s.get(..split)?, s.get(split..)?);
    let sign = match offset.as_bytes()[0] {
        b'+' => 1i64,
        b'-' => -1i64,
        _ => return humantime::parse_rfc3339_weak(s).ok(),
    };
    let hours: i64 = offset.get(1..3)?.parse().ok()?;
    let minutes: i64 = offset.get(4..6)?.parse().ok()?;
    let local = humantime::parse_rfc3339_weak(base).ok()?;
    // Local time = UTC + offset, so UTC = local - offset.
    let shift = std::time::Duration::from_secs(((hours * 60 + minutes) * 60) as u64);
    if sign > 0 {
        local.checked_sub(shift)
    } else {
        local.checked_add(shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_with_offsets_name_the_same_instant() {
        let z = parse_rfc3339("2024-01-14T12:34:56.789Z").unwrap();
        assert_eq!(parse_rfc3339("2024-01-14T14:34:56.789+02:00"), Some(z));
        assert_eq!(parse_rfc3339("2024-01-14T07:04:56.789-05:30"), Some(z));
        assert_eq!(parse_rfc3339(&rfc3339(z)), Some(z));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
