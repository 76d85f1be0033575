//! Ages, sizes and outcomes for people (`3m`, `1.5 KiB`, `TIMED OUT`), ages for JSON (seconds).

use std::time::{Duration, SystemTime};

use serde::Serializer;

/// How long ago `t` was (zero for times in the future).
pub fn age_since(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// An age for people: `3s`, `4m`, `2h`, `3d`.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A size for people: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// How a task ended, as every view names it: `ok`, `FAILED`, `TIMED OUT`, `CANCELLED`,
/// `INTERRUPTED`, `REJECTED` (only success is lower case, so the rest stand out).
/// A result from an original client, without `outcome`, is `ok` or `FAILED`.
pub fn outcome_label(result: &crate::protocol::TaskResult) -> &'static str {
    use crate::protocol::Outcome;
    match result.outcome {
        Some(Outcome::Success) => "ok",
        Some(Outcome::Failure) => "FAILED",
        Some(Outcome::Timeout) => "TIMED OUT",
        Some(Outcome::Cancelled) => "CANCELLED",
        Some(Outcome::Interrupted) => "INTERRUPTED",
        Some(Outcome::Rejected) => "REJECTED",
        None if result.success => "ok",
        None => "FAILED",
    }
}

/// `850ms`, `12.3s`, `4m05s`: a run time at a glance.
pub fn format_took(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// Durations in JSON: seconds with millisecond precision.
pub(crate) fn secs<S: Serializer>(
    d: &Option<Duration>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64((d.as_millis() as f64) / 1000.0),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_read_well() {
        assert_eq!(format_age(Duration::from_secs(3)), "3s");
        assert_eq!(format_age(Duration::from_secs(4 * 60 + 59)), "4m");
        assert_eq!(format_age(Duration::from_secs(2 * 3600 + 1)), "2h");
        assert_eq!(format_age(Duration::from_secs(3 * 86_400)), "3d");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(format_took(850), "850ms");
        assert_eq!(format_took(12_340), "12.3s");
        assert_eq!(format_took(245_000), "4m05s");
    }

    #[test]
    fn outcomes_are_named_as_they_are() {
        use crate::protocol::{Outcome, TaskId, TaskResult};
        let label = |o| outcome_label(&TaskResult::failed(TaskId::from("t"), o, "x"));
        assert_eq!(label(Outcome::Timeout), "TIMED OUT");
        assert_eq!(label(Outcome::Cancelled), "CANCELLED");
        assert_eq!(label(Outcome::Interrupted), "INTERRUPTED");
        assert_eq!(label(Outcome::Failure), "FAILED");
    }
}
