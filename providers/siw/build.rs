//! Links the provider against our libibverbs, as rdma-core links its
//! providers against its own: the cdylib then NEEDs `libibverbs.so.1` and
//! binds the provider interface under `IBVERBS_PRIVATE_34`, so a library
//! without that version node refuses to load it instead of failing later.

use std::path::PathBuf;

/// A string only our libibverbs carries (its provider-ABI entry symbol).
const MARK: &[u8] = b"verbs_rs_provider_v1";

fn main() {
    println!("cargo:rerun-if-env-changed=IBVERBS_LIB_DIR");
    let asked = std::env::var("IBVERBS_LIB_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    // OUT_DIR is <profile>/build/siw-rs-<hash>/out: our libibverbs is built
    // into the same profile directory, or into release/ beside it.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let profile = out.join("../../..");
    let dirs: Vec<PathBuf> = match &asked {
        Some(d) => vec![d.clone()],
        None => vec![profile.clone(), profile.join("../release")],
    };
    for dir in &dirs {
        let lib = dir.join("libibverbs.so");
        println!("cargo:rerun-if-changed={}", lib.display());
        if is_ours(&lib) {
            println!("cargo:rustc-cdylib-link-arg={}", lib.display());
            return;
        }
    }
    if let Some(d) = asked {
        panic!(
            "the siw provider links against our libibverbs, and {}/libibverbs.so is \
             missing or not ours: build it first (`make`, or `cargo build --release -p \
             ibverbs` into the same target directory)",
            d.display()
        );
    }
    // Checks, clippy and the unit tests need no libibverbs; a library built
    // this way resolves the provider interface from whatever libibverbs
    // loaded it, without the version binding, so it is not installed.
    println!(
        "cargo:warning=siw-rs: our libibverbs.so not found in {} (set IBVERBS_LIB_DIR): \
         the cdylib is linked without it",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    );
}

fn is_ours(lib: &std::path::Path) -> bool {
    std::fs::read(lib)
        .map(|b| b.windows(MARK.len()).any(|w| w == MARK))
        .unwrap_or(false)
}
