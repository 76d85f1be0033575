//! The house in its rooms: no file of `src/` over [`FILE_LINES`] lines of non-test code,
//! no function over [`FN_LINES`] lines.
//!
//! A file's non-test code is every line of it outside its `#[cfg(test)]` items (doc
//! comments and blank lines count: they are read too). A function runs from the line of
//! its `fn` to its closing brace. The rooms that were over their size when this test
//! came (issue 36) are listed with the size they had; each may only shrink. A listed room
//! that shrank must have its entry lowered (or removed, once it fits), so growth cannot
//! slip back in under an old allowance.

use std::collections::BTreeMap;
use std::path::Path;

use crate::architecture::{code_only, rust_files, without_test_items};

const FILE_LINES: usize = 600;
const FN_LINES: usize = 80;

/// Files over [`FILE_LINES`], with the size each may not exceed.
const OVERSIZED_FILES: &[(&str, usize)] = &[];

/// Functions over [`FN_LINES`] (file, name), with the size each may not exceed.
const OVERSIZED_FNS: &[(&str, &str, usize)] = &[];

/// Each file of `src/` (path below it, `/`-separated) and its code without comments,
/// literals or test items, in the lines of the file.
fn sources() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let code = without_test_items(&code_only(&std::fs::read_to_string(f).unwrap()));
            (rel, code)
        })
        .collect()
}

fn file_lines(code: &str) -> usize {
    code.trim_end().lines().count()
}

/// Every function with a body in `code`: (name, lines from its `fn` to its closing brace).
fn functions(code: &str) -> Vec<(String, usize)> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ") {
        let at = from + at;
        from = at + 3;
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = code[from..].trim_start();
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            continue; // `fn(` in a type
        }
        let (Some(open), semi) = (code[from..].find('{'), code[from..].find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < open) {
            continue; // a declaration without a body
        }
        let open = from + open;
        let mut depth = 0usize;
        let mut close = code.len();
        for (k, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = code[at..close].matches('\n').count() + 1;
        out.push((name, lines));
    }
    out
}

#[test]
fn no_file_grows_past_its_room() {
    let allowed: BTreeMap<&str, usize> = OVERSIZED_FILES.iter().copied().collect();
    let mut problems = Vec::new();
    let sources = sources();
    for (file, code) in &sources {
        let lines = file_lines(code);
        match allowed.get(file.as_str()) {
            None if lines > FILE_LINES => problems.push(format!(
                "src/{file} has {lines} lines of non-test code (at most {FILE_LINES}): split it"
            )),
            Some(&max) if lines > max => problems.push(format!(
                "src/{file} grew to {lines} lines of non-test code (allowed {max}, as it \
                 was; the limit is {FILE_LINES}): split it"
            )),
            Some(_) if lines <= FILE_LINES => problems.push(format!(
                "src/{file} fits its room now ({lines} lines): remove it from OVERSIZED_FILES"
            )),
            Some(&max) if lines < max => problems.push(format!(
                "src/{file} shrank to {lines} lines: lower its OVERSIZED_FILES entry from {max}"
            )),
            _ => {}
        }
    }
    for (file, _) in OVERSIZED_FILES {
        if !sources.contains_key(*file) {
            problems.push(format!(
                "src/{file} is gone: remove it from OVERSIZED_FILES"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_function_grows_past_its_room() {
    let allowed: BTreeMap<(&str, &str), usize> = OVERSIZED_FNS
        .iter()
        .map(|&(f, n, max)| ((f, n), max))
        .collect();
    let mut longest: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut problems = Vec::new();
    for (file, code) in sources() {
        for (name, lines) in functions(&code) {
            let key = (file.clone(), name.clone());
            let entry = longest.entry(key).or_default();
            *entry = (*entry).max(lines);
            let limit = allowed
                .get(&(file.as_str(), name.as_str()))
                .copied()
                .unwrap_or(FN_LINES);
            if lines > limit {
                problems.push(format!(
                    "fn {name} in src/{file} has {lines} lines (at most {limit}): split it"
                ));
            }
        }
    }
    for (&(file, name), &max) in &allowed {
        match longest.get(&(file.to_string(), name.to_string())) {
            None => problems.push(format!(
                "fn {name} in src/{file} is gone: remove it from OVERSIZED_FNS"
            )),
            Some(&lines) if lines <= FN_LINES => problems.push(format!(
                "fn {name} in src/{file} fits its room now ({lines} lines): remove it from \
                 OVERSIZED_FNS"
            )),
            Some(&lines) if lines < max => problems.push(format!(
                "fn {name} in src/{file} shrank to {lines} lines: lower its OVERSIZED_FNS \
                 entry from {max}"
            )),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_measure_counts_code_not_tests_and_finds_each_function() {
    let text = "/// doc\nfn a() {\n    let s = \"{\n}\";\n}\n\n#[cfg(test)]\nmod tests {\n    \
                fn t() {}\n}\n";
    let code = without_test_items(&code_only(text));
    assert_eq!(file_lines(&code), 5, "{code:?}");
    assert_eq!(functions(&code), vec![("a".to_string(), 4)]);
    let decl = code_only("trait T { fn x(&self); fn y(&self) -> u8 { 1 } }\n");
    assert_eq!(functions(&decl), vec![("y".to_string(), 1)]);
}
