//! One-line prompt previews, so every view shows what a task is rather than its id, and
//! agent text made safe to show (no escape sequences reach a log or a terminal).

/// How much of a prompt the views keep (each cuts it further to its screen).
pub const PREVIEW_CHARS: usize = 120;

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
}
