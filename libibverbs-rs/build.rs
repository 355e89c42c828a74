include!("../tools/version_script.rs");

fn main() {
    link_with_version_script("libibverbs.so.1");
    // Compile-time defaults, overridable at run time by IBV_CONFIG_DIR and
    // relative lookup beside the loaded library (see src/driver.rs).
    println!("cargo:rerun-if-env-changed=RSV_SYSCONFDIR");
    println!("cargo:rerun-if-env-changed=RSV_PROVIDER_DIR");
}
