//! Text for people, on the ground floor: prompt previews, agent text without escape
//! sequences, lines fitted to a width, and ages, sizes and run times (`3m`, `1.5 KiB`,
//! `4m05s`); ages for JSON in seconds. Nothing here knows the crate's types.

use serde::Serializer;
use std::time::{Duration, SystemTime};

/// How much of a prompt the views keep (each cuts it further to its screen).
pub const PREVIEW_CHARS: usize = 120;

/// The first line of `s` that is not blank, trimmed.
pub fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// The prompt's start on one line: whitespace runs folded to one space, cut to at most
/// `max_chars` characters with `…` marking the cut (the `…` counts towards `max_chars`).
pub fn prompt_preview(prompt: &str, max_chars: usize) -> String {
    let folded = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    fit(&folded, max_chars)
}

/// `text` cut to at most `max_chars` characters, `…` marking a cut.
pub fn fit(text: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some(_) => {
            let (cut, _) = text
                .char_indices()
                .nth(max_chars - 1)
                .expect("more than max_chars characters");
            format!("{}…", &text[..cut])
        }
    }
}

/// `line` without control characters but tabs, and without whole escape sequences
/// (`ESC [ … final`, or `ESC` and the one character after it): an agent's colours and
/// cursor moves must not reach a log file or the terminal a view draws on.
pub fn without_escapes(line: &str) -> String {
    let mut clean = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.next() == Some('[') {
                    for f in chars.by_ref() {
                        if ('@'..='~').contains(&f) {
                            break;
                        }
                    }
                }
            }
            '\t' => clean.push(c),
            c if c.is_control() => {}
            c => clean.push(c),
        }
    }
    clean
}

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

/// A limit as it would be typed (`1w`, `1d12h`, `90s`): whole units, largest first, so
/// `--older-than 1w` is echoed `1w`, not `7days`.
pub fn format_span(d: Duration) -> String {
    const UNITS: [(u64, &str); 5] = [
        (604_800, "w"),
        (86_400, "d"),
        (3600, "h"),
        (60, "m"),
        (1, "s"),
    ];
    let mut left = d.as_secs();
    if left == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (size, unit) in UNITS {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    out
}

/// `1 warning`, `2 warnings`: a count with its noun agreeing.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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

/// How many single-character insertions, deletions or substitutions turn `a` into `b`
/// (Levenshtein), for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Parse a duration given as seconds (`30`, `1.5`) or in words (`90s`, `5m`, `1h30m`).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        return std::time::Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a usable number of seconds"));
    }
    humantime::parse_duration(s.trim()).map_err(|_| {
        format!(
            "{s:?} is not a duration: give seconds (30, 1.5) or a number and a unit (90s, 5m, \
             1h30m, 7d)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_fold_whitespace_and_cut_within_the_width() {
        assert_eq!(prompt_preview("  fix\n\tthe   bug ", 40), "fix the bug");
        assert_eq!(prompt_preview("abcdef", 6), "abcdef");
        assert_eq!(prompt_preview("abcdefg", 6), "abcde…");
        assert_eq!(prompt_preview("ééééééé", 3).chars().count(), 3);
        assert_eq!(prompt_preview("abc", 0), "");
        assert_eq!(prompt_preview("abc", 1), "…");
    }

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
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1, "warning", "warnings"), "1 warning");
        assert_eq!(count(0, "warning", "warnings"), "0 warnings");
        assert_eq!(count(2, "repository", "repositories"), "2 repositories");
    }

    #[test]
    fn spans_read_as_they_are_typed() {
        assert_eq!(format_span(Duration::from_secs(7 * 86_400)), "1w");
        assert_eq!(format_span(Duration::from_secs(24 * 3600)), "1d");
        assert_eq!(format_span(Duration::from_secs(36 * 3600)), "1d12h");
        assert_eq!(format_span(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_span(Duration::from_millis(500)), "500ms");
    }
}
