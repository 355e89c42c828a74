// Shared by the build scripts of libibverbs-rs and librdmacm-rs (pulled in
// with `include!`): turns a crate's exports.txt into a GNU version script
// and tells rustc to link the cdylib with it and with the given SONAME.

/// Reads `exports.txt` from the crate root, writes `<OUT_DIR>/<stem>.map`
/// and passes it, the SONAME and `-z now`-friendly flags to the linker.
fn link_with_version_script(soname: &str) {
    use std::fmt::Write as _;
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    let list = std::path::Path::new(&manifest).join("exports.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    let text = std::fs::read_to_string(&list).expect("read exports.txt");

    let mut script = String::new();
    let mut open: Option<String> = None;
    let mut first = true;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("node ") {
            if let Some(parent) = open.take() {
                script.push_str(&parent);
            }
            let mut words = rest.split_whitespace();
            let name = words.next().expect("node name");
            let parent = words.next();
            write!(script, "{name} {{\n  global:\n").unwrap();
            // Everything not listed stays private to the library; one
            // `local: *` is enough and belongs to the first node.
            let tail = if first { "  local: *;\n" } else { "" };
            first = false;
            open = Some(match parent {
                Some(p) => format!("{tail}}} {p};\n\n"),
                None => format!("{tail}}};\n\n"),
            });
        } else {
            writeln!(script, "    {trimmed};").unwrap();
        }
    }
    if let Some(parent) = open.take() {
        script.push_str(&parent);
    }

    let stem = soname.split('.').next().unwrap_or("lib");
    let map = std::path::Path::new(&out_dir).join(format!("{stem}.map"));
    std::fs::write(&map, script).expect("write version script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
}
