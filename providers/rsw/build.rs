fn main() {
    // The only C in the provider: accesses to application memory that
    // must survive a fault (see csrc/guard.c).
    println!("cargo:rerun-if-changed=csrc/guard.c");
    cc::Build::new()
        .file("csrc/guard.c")
        .flag("-fvisibility=hidden")
        .warnings(true)
        .compile("rswguard");
}
