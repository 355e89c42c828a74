include!("../tools/version_script.rs");

fn main() {
    link_with_version_script("librdmacm.so.1");
    // The library runs a CM thread for the life of the process; unloading
    // its code under that thread (dlclose) must never happen.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");

    // librdmacm sits on libibverbs' exported C API only, as rdma-core's
    // does. Our libibverbs is built into the same cargo profile directory
    // (OUT_DIR is <profile>/build/rdmacm-<hash>/out) unless the caller
    // points elsewhere.
    println!("cargo:rerun-if-env-changed=IBVERBS_LIB_DIR");
    let dir = match std::env::var("IBVERBS_LIB_DIR") {
        Ok(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => {
            let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
            out.join("../../..")
        }
    };
    // Link that very file, never whatever `-libverbs` finds first on the
    // search path (Debian's libibverbs-dev would do): a librdmacm built
    // against rdma-core's libibverbs loads ours only by accident.
    let lib = dir.join("libibverbs.so");
    println!("cargo:rerun-if-changed={}", lib.display());
    let ours = std::fs::read(&lib)
        .map(|b| b.windows(MARK.len()).any(|w| w == MARK))
        .unwrap_or(false);
    if !ours {
        panic!(
            "librdmacm links against our libibverbs, and {} is {}: build it first \
             (`make`, or `cargo build --release -p ibverbs` into the same target \
             directory), or point IBVERBS_LIB_DIR at its directory",
            lib.display(),
            if lib.exists() { "not ours" } else { "missing" }
        );
    }
    println!("cargo:rustc-cdylib-link-arg={}", lib.display());
}

/// A string only our libibverbs carries (its provider-ABI entry symbol).
const MARK: &[u8] = b"verbs_rs_provider_v1";
