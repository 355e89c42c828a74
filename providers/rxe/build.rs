//! Links the provider against our libibverbs, as rdma-core links its
//! providers against its own: the shared object then NEEDs libibverbs.so.1
//! and binds `verbs_register_driver_34` and the `ibv_cmd_*` commands under
//! the `IBVERBS_PRIVATE_34` version node, so a libibverbs of another
//! private ABI refuses to load it instead of crashing in it.

fn main() {
    // The provider's constructor registers it with the libibverbs that
    // loaded it; unloading its code while that library still holds its
    // device table (dlclose) must never happen.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");

    // Our libibverbs is built into the same cargo profile directory
    // (OUT_DIR is <profile>/build/rxe-rs-<hash>/out) unless the caller
    // points elsewhere (the Makefile does, to the release directory).
    println!("cargo:rerun-if-env-changed=IBVERBS_LIB_DIR");
    let dir = match std::env::var("IBVERBS_LIB_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => {
            let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
            out.join("../../..")
        }
    };
    let lib = dir.join("libibverbs.so");
    println!("cargo:rerun-if-changed={}", lib.display());
    let ours = std::fs::read(&lib)
        .map(|b| b.windows(MARK.len()).any(|w| w == MARK))
        .unwrap_or(false);
    if ours {
        // That very file, never whatever `-libverbs` finds first on the
        // search path (Debian's libibverbs-dev would do).
        println!("cargo:rustc-cdylib-link-arg={}", lib.display());
        return;
    }
    let why = format!(
        "{} is {}: build it first (`make`, or `cargo build -p ibverbs` into the same \
         target directory), or point IBVERBS_LIB_DIR at its directory",
        lib.display(),
        if lib.exists() { "not ours" } else { "missing" }
    );
    // A release provider must carry the dependency (make installs it);
    // a debug build is for `cargo test` and `cargo clippy`, whose unit
    // tests never load libibverbs, so there a warning is enough.
    if std::env::var("PROFILE").as_deref() == Ok("release") {
        panic!("the rxe provider links against our libibverbs, and {why}");
    }
    println!("cargo:warning=librxe_rs.so left without its libibverbs.so.1 dependency: {why}");
}

/// A string only our libibverbs carries (its provider-ABI entry symbol).
const MARK: &[u8] = b"verbs_rs_provider_v1";
