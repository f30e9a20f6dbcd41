//! docs/operations.md's metric tables and the code cannot drift: every
//! `switchyard_*` metric name the code records is documented, and every
//! documented one is recorded somewhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every string literal that is exactly a metric name (`"switchyard_..."`).
fn names_in_code() -> BTreeSet<String> {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["storage/src", "gateway/src", "cluster/src", "protocols"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut names = BTreeSet::new();
    for file in files {
        if file.components().any(|c| c.as_os_str() == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for piece in text.split('"').skip(1).step_by(2) {
            let is_name = piece.starts_with("switchyard_")
                && piece
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if is_name {
                names.insert(piece.to_string());
            }
        }
    }
    names
}

/// The first column of the metric tables: rows like "| `switchyard_x` | ...".
fn names_in_docs() -> BTreeSet<String> {
    let text = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("| `switchyard_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("switchyard_{name}"))
        .collect()
}

#[test]
fn every_metric_in_the_code_is_documented_and_back() {
    let code = names_in_code();
    let docs = names_in_docs();
    assert!(code.len() > 30, "found only {code:?}");
    let undocumented: Vec<_> = code.difference(&docs).collect();
    let stale: Vec<_> = docs.difference(&code).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "docs/operations.md is out of step with the code:\n  recorded but not documented: {undocumented:?}\n  documented but recorded nowhere: {stale:?}"
    );
}
