//! The import graph of `src/`: no circle, and no import from a lower floor to a higher one.
//!
//! docs/ARCHITECTURE.md ("Floors") explains the floors; [`FLOORS`] is the same table, and a
//! new top-level module must be given a floor here before this test passes. The graph is
//! read from the sources with a small lexer of our own: `use` trees and `crate::`,
//! `super::`, `self::` paths in code that is not a `#[cfg(test)]` module (tests may
//! reach anywhere), resolved to the file that defines the module they name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its floor; a module imports only from its own
/// floor or lower ones.
const FLOORS: &[(&str, &[&str])] = &[
    ("ground", &["error", "text", "procfs", "host"]),
    (
        "files",
        &["fsio", "fs_kind", "workdir", "protocol", "watch"],
    ),
    (
        "primitives",
        &[
            "env", "preset", "layout", "dirlock", "gate", "config", "ids", "trust", "agent",
            "worktree", "budget",
        ],
    ),
    (
        "services",
        &[
            "wait",
            "queue",
            "ledger",
            "inspect",
            "maintenance",
            "doctor",
            "client",
            "hooks",
        ],
    ),
    (
        "roles",
        &[
            "recovery",
            "tasks",
            "review",
            "orchestrator",
            "worker",
            "pool",
            "approval",
        ],
    ),
    ("verbs", &["verbs"]),
    ("surface", &["launch", "mcp", "cli"]),
];

/// Modules of one floor that must not import each other this way round: the MCP server
/// stands beside the CLI on the verbs, not on the CLI (issue 36).
const APART: &[(&str, &str)] = &[("mcp", "cli")];

/// A module, as its path below the crate root (`["agent", "spawn"]`; `[]` is lib.rs).
type ModPath = Vec<String>;

fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code without comments, string and character literals (each literal becomes `""`),
/// so that a path inside a message or a comment is not taken for an import. Line breaks
/// inside what is removed are kept, so the code has the lines of the text
/// (`rooms.rs` measures them).
pub(crate) fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let len = rest.find("*/").map_or(rest.len(), |e| e + 2);
            out.extend(line_breaks(&rest[..len]));
            i += len;
        } else if let Some(len) = raw_string_len(rest) {
            out.push_str("\"\"");
            out.extend(line_breaks(&rest[..len]));
            i += len;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            out.extend(line_breaks(&text[i..(j + 1).min(b.len())]));
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '"'), or a lifetime ('a), which stays.
            let len = if b.get(i + 1) == Some(&b'\\') {
                rest[2..].find('\'').map(|e| e + 3)
            } else {
                rest[1..]
                    .char_indices()
                    .nth(1)
                    .filter(|&(_, c)| c == '\'')
                    .map(|(e, _)| e + 2)
            };
            match len {
                Some(len) => {
                    out.push_str("' '");
                    i += len;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn line_breaks(removed: &str) -> impl Iterator<Item = char> + '_ {
    removed.chars().filter(|&c| c == '\n')
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`) starting `s`, if one does.
fn raw_string_len(s: &str) -> Option<usize> {
    let after_r = s.strip_prefix('r').or_else(|| s.strip_prefix("br"))?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    let end = body.find(&close)?;
    Some(s.len() - body.len() + end + close.len())
}

/// The code without its `#[cfg(test)]` items (a test module may import from anywhere).
pub(crate) fn without_test_items(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let after = at + "#[cfg(test)]".len();
        let end = match (out[after..].find('{'), out[after..].find(';')) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                let mut depth = 0;
                let mut end = out.len();
                for (k, c) in out[after + open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = after + open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (_, Some(semi)) => after + semi + 1,
            _ => out.len(),
        };
        out.replace_range(at..end, "");
    }
    out
}

/// Every path a `use` tree names: `a::{b, c::{d}}` → `a::b`, `a::c::d`.
fn expand_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        if !tree.is_empty() {
            out.push(format!("{prefix}{tree}"));
        }
        return;
    };
    let head = format!("{prefix}{}", &tree[..open]);
    let body = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut depth = 0;
    let mut start = 0;
    for (k, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_use(&body[start..k], &head, out);
                start = k + 1;
            }
            _ => {}
        }
    }
    expand_use(&body[start..], &head, out);
}

/// The paths a file's code refers to through the crate: its `use` trees, and paths
/// spelled out from `crate::`, `super::` or `self::`.
fn referenced_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut use_spans: Vec<std::ops::Range<usize>> = Vec::new();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let boundary = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = &rest[at + 4..];
        if boundary {
            if let Some(end) = after.find(';') {
                expand_use(&after[..end], "", &mut paths);
                let start = code.len() - after.len();
                use_spans.push(start..start + end);
            }
        }
        rest = after;
    }
    // A path from a child module named without `self::` (`submit::run(a)`): any
    // identifier that starts a path; the resolver keeps those naming a child module.
    let mut from = 0;
    while let Some(at) = code[from..].find("::") {
        let at = from + at;
        from = at + 2;
        let start = code[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_ident(c))
            .last()
            .map_or(at, |(k, _)| k);
        let before = code[..start].chars().next_back();
        if start == at || before.is_some_and(|c| c == ':' || is_ident(c)) {
            continue;
        }
        if matches!(&code[start..at], "crate" | "super" | "self")
            || use_spans.iter().any(|u| u.contains(&start))
        {
            continue;
        }
        let len = code[start..]
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(code.len() - start);
        paths.push(code[start..start + len].trim_end_matches(':').to_string());
    }
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            // A `use` tree is read whole above (`use super::{a, b}` is no import of
            // `super` itself).
            if code[..at].chars().next_back().is_some_and(is_ident)
                || use_spans.iter().any(|u| u.contains(&at))
            {
                continue;
            }
            let len = code[at..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(code.len() - at);
            paths.push(code[at..at + len].trim_end_matches(':').to_string());
        }
    }
    paths
}

struct Crate {
    modules: BTreeSet<ModPath>,
    /// `Client` → `client`: what lib.rs re-exports at the crate root.
    reexports: BTreeMap<String, String>,
}

impl Crate {
    /// The module (file) a path from `here` lands in: the longest prefix that is a
    /// module of the crate. `None` for paths outside the crate (std, dependencies).
    fn resolve(&self, here: &ModPath, path: &str) -> Option<ModPath> {
        let mut segs: Vec<String> = path
            .split("::")
            .map(|s| s.split(" as ").next().unwrap().trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let mut base: ModPath = here.clone();
        match segs.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                segs.remove(0);
            }
            Some("super" | "self") => {
                while let Some(s) = segs.first().map(String::as_str) {
                    match s {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    segs.remove(0);
                }
            }
            // A child module named without `self::`.
            Some(first) => {
                let mut child = here.clone();
                child.push(first.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
            }
            None => return None,
        }
        if base.is_empty() {
            if let Some(target) = segs.first().and_then(|s| self.reexports.get(s)) {
                if !self.modules.contains(&vec![segs[0].clone()]) {
                    segs.insert(0, target.clone());
                }
            }
        }
        let full: ModPath = base.into_iter().chain(segs).collect();
        (0..=full.len())
            .rev()
            .map(|k| full[..k].to_vec())
            .find(|m| self.modules.contains(m))
    }
}

/// file → the files it imports, leaving out a module's own ancestors and descendants.
fn import_graph() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    import_graph_with(false)
}

/// file → the files it imports; with `family`, a module's imports from its own parent
/// and children count too (declaring a child with `mod` is no import), but not the
/// crate root's: lib.rs is the facade every module reaches through.
fn import_graph_with(family: bool) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: BTreeMap<ModPath, String> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            (module_path(&src, f), code_only(&text))
        })
        .collect();
    let mut reexports = BTreeMap::new();
    for path in referenced_paths(&sources[&Vec::new()]) {
        if let Some((module, name)) = path.split_once("::") {
            if !name.contains("::") {
                let name = name.split(" as ").last().unwrap().trim();
                reexports.insert(name.to_string(), module.to_string());
            }
        }
    }
    let krate = Crate {
        modules: sources.keys().cloned().collect(),
        reexports,
    };
    let mut graph = BTreeMap::new();
    for (here, code) in &sources {
        let targets: BTreeSet<ModPath> = referenced_paths(&without_test_items(code))
            .iter()
            .filter_map(|p| krate.resolve(here, p))
            .filter(|t| {
                if family {
                    t != here && !t.is_empty() && !here.is_empty()
                } else {
                    !t.starts_with(here) && !here.starts_with(t)
                }
            })
            .collect();
        graph.insert(here.clone(), targets);
    }
    graph
}

/// The strongly connected components of more than one node (Tarjan).
fn circles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        found: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(v: &N, g: &BTreeMap<N, BTreeSet<N>>, s: &mut State<N>) {
        let i = s.index.len();
        s.index.insert(v.clone(), i);
        s.low.insert(v.clone(), i);
        s.stack.push(v.clone());
        for w in g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, g, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.found
}

fn floor_of(module: &str) -> Option<(usize, &'static str)> {
    FLOORS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&module))
        .map(|(i, (name, _))| (i, *name))
}

#[test]
fn the_sources_have_no_import_circle() {
    let files = import_graph();
    let shown = |m: &ModPath| m.join("/");
    let file_circles: Vec<Vec<String>> = circles(&files)
        .iter()
        .map(|c| c.iter().map(shown).collect())
        .collect();
    assert!(
        file_circles.is_empty(),
        "files import each other in a circle: {file_circles:?}"
    );

    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in &files {
        let Some(from) = from.first() else { continue };
        for t in to.iter().filter_map(|t| t.first()).filter(|t| *t != from) {
            modules.entry(from.clone()).or_default().insert(t.clone());
        }
    }
    let module_circles = circles(&modules);
    assert!(
        module_circles.is_empty(),
        "modules import each other in a circle: {module_circles:?}"
    );
}

/// Folders whose children may still import their `mod.rs`'s own items while the `mod.rs`
/// uses theirs: none is left. Each was cut by moving what the children share out of the
/// parent into a sibling: `cli/`'s shared arguments to `cli/args.rs`, `worker/`'s
/// `Shared`, `SlotServer` and `Pickup` to `worker/slot_server.rs`, `worker/supervise`'s
/// `Run` and `Stop` to `worker/supervise/run.rs`, `worker/worktree`'s `conclude` to
/// `worker/worktree/conclude.rs` (issue 36). Keep it empty: a folder with a circle fails
/// the test below.
const INSIDE_CIRCLES_ALLOWED: &[&str] = &[];

/// Inside a folder too, no circle: a child does not import its parent's own items while
/// the parent uses the child's (shared helpers live in a sibling, e.g. `cli/args.rs`).
/// A circle is the folder's of its shortest member (the parent).
#[test]
fn no_folder_has_an_import_circle_inside() {
    let files = import_graph_with(true);
    let mut wrong = Vec::new();
    let mut allowed_seen = BTreeSet::new();
    for circle in circles(&files) {
        let mut names: Vec<String> = circle.iter().map(|m| m.join("/")).collect();
        names.sort();
        let folder = circle.iter().min_by_key(|m| m.len()).unwrap().join("/");
        if INSIDE_CIRCLES_ALLOWED.contains(&folder.as_str()) {
            allowed_seen.insert(folder);
        } else {
            wrong.push(format!(
                "{}\n  {}",
                names.join(" "),
                upward_edges(&files, &names)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "files import each other in a circle inside a folder (a parent and its children \
         counted; move what the children share out of the parent into a sibling):\n{}",
        wrong.join("\n")
    );
    let stale: Vec<&&str> = INSIDE_CIRCLES_ALLOWED
        .iter()
        .filter(|f| !allowed_seen.contains(**f))
        .collect();
    assert!(
        stale.is_empty(),
        "no circle is left inside {stale:?}: take them off INSIDE_CIRCLES_ALLOWED"
    );
}

/// The edges of circle `c` from a child up to its own parent: the ones to cut.
fn upward_edges(files: &BTreeMap<ModPath, BTreeSet<ModPath>>, c: &[String]) -> String {
    let mut up = Vec::new();
    for (from, to) in files {
        let name = from.join("/");
        if !c.contains(&name) {
            continue;
        }
        for t in to
            .iter()
            .filter(|t| from.starts_with(t) && c.contains(&t.join("/")))
        {
            up.push(format!("{name} -> {}", t.join("/")));
        }
    }
    up.join(", ")
}

#[test]
fn no_module_imports_from_a_higher_floor() {
    let files = import_graph();
    let mut wrong = Vec::new();
    for (from, to) in &files {
        let Some(module) = from.first() else { continue };
        let Some((floor, floor_name)) = floor_of(module) else {
            wrong.push(format!(
                "src/{module} has no floor: give it one in tests/integration/architecture.rs \
                 and docs/ARCHITECTURE.md"
            ));
            continue;
        };
        for target in to.iter().filter_map(|t| t.first()) {
            match floor_of(target) {
                Some((higher, name)) if higher > floor => wrong.push(format!(
                    "{} ({floor_name}) imports {target} ({name})",
                    from.join("/")
                )),
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_mcp_server_imports_nothing_from_the_cli() {
    let files = import_graph();
    let mut wrong = Vec::new();
    for (from, to) in &files {
        for (module, apart) in APART {
            if from.first().map(String::as_str) != Some(*module) {
                continue;
            }
            for target in to
                .iter()
                .filter(|t| t.first().map(String::as_str) == Some(*apart))
            {
                wrong.push(format!(
                    "src/{} imports src/{}",
                    from.join("/"),
                    target.join("/")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports between modules kept apart ({APART:?}):\n{}",
        wrong.join("\n")
    );
}

/// The leaves: the error type and text helpers name nothing of the crate (the rest of
/// the ground floor imports only from the ground floor, as the floors test checks).
#[test]
fn the_leaves_import_nothing_from_the_crate() {
    let files = import_graph();
    for module in ["error", "text"] {
        let imports = &files[&vec![module.to_string()]];
        assert!(imports.is_empty(), "src/{module}.rs imports {imports:?}");
    }
}

#[test]
fn the_lexer_sees_imports_only_in_code() {
    let code = code_only(
        "use crate::a::{b, c::{d as e}};\n// crate::comment\nlet s = \"crate::string\";\n\
         let r = r#\"crate::raw\"#; let c = '\"'; fn f<'a>(x: &'a str) { crate::z::call(); child::g() }",
    );
    let mut paths = referenced_paths(&code);
    paths.sort();
    assert_eq!(
        paths,
        [
            "child::g",
            "crate::a::b",
            "crate::a::c::d as e",
            "crate::z::call"
        ]
    );
    let test_code = "fn f() {}\n#[cfg(test)]\nmod tests { use crate::x; }\nfn g() {}";
    assert_eq!(without_test_items(test_code), "fn f() {}\n\nfn g() {}");
}
