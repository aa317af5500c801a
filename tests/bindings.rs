//! Host-only checks on the committed bindings: `src/sys/bindings.rs` must have been generated from
//! the current `wrapper.h`, and its first line must name the header versions it came from.

use sha2::{Digest, Sha256};
use std::path::Path;

const PREFIX: &str = "// cudagraph-bindings: ";
const HASH_MARK: &str = "; wrapper.h sha256 ";
const REGEN: &str = "run scripts/regen-bindings to regenerate src/sys/bindings.rs";

fn header_line() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sys/bindings.rs");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let first = text.lines().next().unwrap_or_default().to_owned();
    assert!(
        first.starts_with(PREFIX),
        "first line of src/sys/bindings.rs is not a `{PREFIX}...` header line: {first:?}; {REGEN}"
    );
    first
}

/// Splits the header line into its version list and the wrapper.h hash.
fn parts(line: &str) -> (&str, &str) {
    line[PREFIX.len()..]
        .split_once(HASH_MARK)
        .unwrap_or_else(|| panic!("no `{HASH_MARK}` in the header line {line:?}; {REGEN}"))
}

#[test]
fn wrapper_hash_matches() {
    let line = header_line();
    let (_, recorded) = parts(&line);
    assert!(
        recorded.len() == 64 && recorded.bytes().all(|b| b.is_ascii_hexdigit()),
        "the header line's wrapper.h sha256 is not 64 hex digits: {recorded:?}; {REGEN}"
    );
    let wrapper = Path::new(env!("CARGO_MANIFEST_DIR")).join("wrapper.h");
    let bytes =
        std::fs::read(&wrapper).unwrap_or_else(|e| panic!("reading {}: {e}", wrapper.display()));
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        recorded.to_ascii_lowercase(),
        actual,
        "wrapper.h changed since src/sys/bindings.rs was generated; {REGEN}"
    );
}

#[test]
fn header_names_the_five_versions() {
    let line = header_line();
    let (versions, _) = parts(&line);
    let libraries: Vec<(&str, &str)> = versions
        .split(", ")
        .map(|entry| {
            entry
                .split_once(' ')
                .unwrap_or_else(|| panic!("malformed `name version` entry {entry:?} in {line:?}"))
        })
        .collect();
    let names: Vec<&str> = libraries.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        ["cuda-runtime", "cufft", "nvrtc", "nccl", "cublas"],
        "header line {line:?}; {REGEN}"
    );
    for (name, version) in libraries {
        let numbers: Vec<&str> = version.split('.').collect();
        assert!(
            numbers.len() >= 3
                && numbers
                    .iter()
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
            "{name} version {version:?} in the header line is not a dotted version number"
        );
    }
}
