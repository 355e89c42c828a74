//! Compares every constant recorded by the enum probes with the Rust
//! constant of the same name: `abi/rdma-core-44/enums.txt` (the reference) and
//! `tests/data/enums_extra.txt` (everything else verbs-abi defines, printed
//! by a probe `tests/data/gen_tables.py` compiles against the same headers).  Also
//! checks that each C enum type's Rust alias has the same size.
//!
//! A name in those files without a Rust constant fails the test unless it
//! is in `DELIBERATELY_MISSING`.

use std::collections::HashMap;
use std::path::PathBuf;

use verbs_abi::*;

#[path = "tables/enum_table.rs"]
mod table;
use table::{rust_enum_sizes, rust_values};

/// (name, why it has no Rust constant).  Empty: everything is covered.
const DELIBERATELY_MISSING: &[(&str, &str)] = &[];

fn abi_dir() -> PathBuf {
    match std::env::var_os("ABI_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../abi/rdma-core-44"),
    }
}

struct CEnums {
    /// (enum name, sizeof).
    types: Vec<(String, usize)>,
    /// (constant name, value).
    values: Vec<(String, i64)>,
}

fn parse(path: &PathBuf) -> CEnums {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut out = CEnums {
        types: vec![],
        values: vec![],
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("enum ") {
            let (name, size) = rest
                .split_once(": sizeof=")
                .unwrap_or_else(|| panic!("bad line {line:?}"));
            out.types
                .push((name.to_string(), size.trim().parse().unwrap()));
        } else if line.starts_with("  ") {
            let (name, rest) = line
                .trim()
                .split_once('=')
                .unwrap_or_else(|| panic!("bad line {line:?}"));
            let value = rest.split_whitespace().next().unwrap();
            out.values
                .push((name.trim().to_string(), value.parse().unwrap()));
        }
    }
    out
}

fn compare(file: &PathBuf) -> (usize, Vec<String>) {
    let rust: HashMap<&str, i64> = rust_values().into_iter().collect();
    let sizes: HashMap<&str, usize> = rust_enum_sizes().into_iter().collect();
    let skipped: HashMap<&str, &str> = DELIBERATELY_MISSING.iter().copied().collect();
    let c = parse(file);
    let mut errors = Vec::new();
    for (name, value) in &c.values {
        match rust.get(name.as_str()) {
            Some(v) if v == value => {}
            Some(v) => errors.push(format!("{name}: C {value} Rust {v}")),
            None if skipped.contains_key(name.as_str()) => {}
            None => errors.push(format!("{name}: no Rust constant")),
        }
    }
    for (name, size) in &c.types {
        match sizes.get(name.as_str()) {
            Some(s) if s == size => {}
            Some(s) => errors.push(format!("enum {name}: sizeof C {size} Rust {s}")),
            None => errors.push(format!("enum {name}: no Rust type")),
        }
    }
    (c.values.len(), errors)
}

#[test]
fn reference_enum_values_match() {
    let (n, errors) = compare(&abi_dir().join("enums.txt"));
    assert!(
        errors.is_empty(),
        "{} differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(n >= 290, "only {n} values parsed from enums.txt");
}

#[test]
fn extra_enum_values_match() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/enums_extra.txt");
    let (n, errors) = compare(&file);
    assert!(
        errors.is_empty(),
        "{} differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(n >= 180, "only {n} values parsed from enums_extra.txt");
}

#[test]
fn negative_enums_are_signed() {
    // gcc makes these enums `int`; a C caller comparing with -1 relies on it.
    assert_eq!(IBV_NODE_UNKNOWN, -1);
    assert_eq!(IBV_TRANSPORT_UNKNOWN, -1);
    assert_eq!(IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, -5);
}
