//! The library's public surface stays small and is what the examples use: counted in
//! rustdoc's JSON of the default build (no `internals`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The most public items the default build may have: every module, function, method,
/// struct, enum, variant, field, constant and type alias of this crate rustdoc
/// documents (re-exports and trait impls not counted). 651 when this bound was set
/// (2,380 when every module was public); raise it only for an item a client needs.
const MAX_PUBLIC_ITEMS: usize = 700;

/// The crate root's public names, as re-exported in src/lib.rs.
const ROOT_NAMES: &[&str] = &[
    "AgentCommand",
    "Client",
    "CommandLineProblem",
    "Config",
    "Error",
    "FileProblem",
    "Orchestrator",
    "Outcome",
    "Progress",
    "Queue",
    "Result",
    "Root",
    "Slot",
    "Status",
    "Task",
    "TaskId",
    "TaskResult",
    "Worker",
    "WorkerOptions",
    "WorkerPaths",
    "WorkerState",
    "programs",
    "types",
    "verbs",
];

/// rustdoc's JSON of the library as a user builds it (default features), made with the
/// stable toolchain (`RUSTC_BOOTSTRAP` lets it take `--output-format json`) into a
/// target directory of its own; `None` (with the reason) when it cannot be made.
fn rustdoc_json() -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/debug/deps/integration-HASH → target; a directory of its own inside it,
    // because dependencies built under RUSTC_BOOTSTRAP would replace the ones the other
    // test targets (the doctests) link, with metadata the plain toolchain refuses.
    let target: PathBuf = exe
        .ancestors()
        .nth(3)
        .ok_or("no target directory above the test binary")?
        .join("api-rustdoc");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["rustdoc", "--lib", "--locked", "-q", "--target-dir"])
        .arg(&target)
        .args(["--", "-Zunstable-options", "--output-format", "json"])
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("run cargo rustdoc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo rustdoc --output-format json failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let path = target.join("doc").join("conductor.json");
    let bytes = std::fs::read(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("parse {}: {e}", path.display()))
}

/// This crate's public items by kind (variants count though rustdoc gives them no
/// visibility of their own).
fn public_items(doc: &Value) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for item in doc["index"].as_object().expect("index").values() {
        if item["crate_id"] != 0 {
            continue;
        }
        let kind = item["inner"]
            .as_object()
            .and_then(|o| o.keys().next())
            .cloned()
            .unwrap_or_default();
        if kind == "use" || kind == "impl" {
            continue;
        }
        if item["visibility"] == "public" || kind == "variant" {
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    kinds
}

/// The names public at the crate root.
fn root_names(doc: &Value) -> Vec<String> {
    let index = &doc["index"];
    let root = &index[doc["root"].to_string().trim_matches('"')];
    let mut names: Vec<String> = root["inner"]["module"]["items"]
        .as_array()
        .expect("root items")
        .iter()
        .filter_map(|id| {
            let item = &index[id.to_string().trim_matches('"')];
            item["inner"]["use"]["name"]
                .as_str()
                .or(item["name"].as_str())
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Every `conductor::NAME` an example names, `use conductor::{A, B}` included.
fn names_used(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in source.match_indices("conductor::") {
        let rest = &source[i + "conductor::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|n| {
                let n = n.trim();
                n[..n.find("::").unwrap_or(n.len())].to_string()
            }));
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            names.push(rest[..end].to_string());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

#[test]
fn public_surface_stays_small_and_examples_use_only_it() {
    let doc = match rustdoc_json() {
        Ok(doc) => doc,
        Err(reason) => return crate::prereq::skip_or_fail(&reason),
    };
    let kinds = public_items(&doc);
    let total: usize = kinds.values().sum();
    assert!(
        total <= MAX_PUBLIC_ITEMS,
        "the default build has {total} public items ({kinds:?}), more than \
         {MAX_PUBLIC_ITEMS}: keep new items pub(crate), or reach them through the \
         `internals` feature (docs/ARCHITECTURE.md, \"The public API\")"
    );
    assert!(total > 100, "implausibly few public items: {kinds:?}");

    let root = root_names(&doc);
    assert_eq!(
        root, ROOT_NAMES,
        "the crate root's public names changed: update ROOT_NAMES (and the docs) if meant"
    );

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let mut sources = vec![lib];
    for entry in std::fs::read_dir(&examples).expect("examples/") {
        sources.push(entry.expect("examples/ entry").path());
    }
    for path in sources {
        let text = std::fs::read_to_string(&path).expect("read source");
        // lib.rs: only its doc example speaks as a user.
        let text: String = if path.ends_with("lib.rs") {
            text.lines()
                .filter_map(|l| l.strip_prefix("//!"))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            text
        };
        for name in names_used(&text) {
            assert!(
                root.contains(&name),
                "{} uses conductor::{name}, which only the `internals` feature makes \
                 public: examples must compile against the public API",
                path.display()
            );
        }
    }
}
