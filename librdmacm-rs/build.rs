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
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
