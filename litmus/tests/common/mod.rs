//! What the integration tests share: the list of shipped litmus tests.

use std::path::PathBuf;

/// Every shipped litmus test (`tests/litmus/*.litmus` at the repository root), sorted by name.
pub fn shipped_files() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/litmus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("the shipped tests are in {dir}: {e}"))
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "litmus"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "the shipped tests are in {dir}");
    files
}
