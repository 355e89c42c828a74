//! Compares the Rust types with the C layouts recorded by the probes:
//! `abi/rdma-core-44/layout.txt` (rdma-core 44 as built by Debian, the reference)
//! and `tests/data/layout_extra.txt` (the types that file does not list,
//! printed by a probe `tests/data/gen_tables.py` compiles against the same
//! headers).
//!
//! Every struct and every field path named in those files must exist in
//! Rust with the same offset and size; the structs must have the same size
//! and alignment.  The mapping from C path to Rust path is the table in
//! `tables/layout_table.rs`.
//!
//! The facts are found through `ABI_DIR`, else in the repository's
//! `abi/rdma-core-44`.

use core::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::collections::HashMap;
use std::path::PathBuf;

use verbs_abi::*;

pub struct Layout {
    name: &'static str,
    size: usize,
    align: usize,
    /// (C field path, Rust offset, Rust size).
    fields: Vec<(&'static str, usize, usize)>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// `layout!(ty { "c.path" => rust.path, ... })` measures `ty` and each
/// listed field.  Works through unions, where `size_of_val` of a field would
/// need a read.
macro_rules! layout {
    ($t:ident { $($c:literal => $($f:ident).+ ,)* }) => {{
        let probe = MaybeUninit::<$t>::uninit();
        let base = probe.as_ptr();
        Layout {
            name: stringify!($t),
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$((
                $c,
                offset_of!($t, $($f).+),
                // SAFETY: `addr_of!` only computes an address inside
                // `probe`; nothing is read and no reference is created, so
                // the memory being uninitialised does not matter.
                size_of_pointee(unsafe { core::ptr::addr_of!((*base).$($f).+) }),
            )),*],
        }
    }};
}

#[path = "tables/layout_table.rs"]
mod table;
use table::rust_layouts;

struct CType {
    name: String,
    size: usize,
    align: usize,
    fields: Vec<(String, usize, usize)>,
}

fn abi_dir() -> PathBuf {
    match std::env::var_os("ABI_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../abi/rdma-core-44"),
    }
}

fn num_after(line: &str, key: &str) -> usize {
    let rest = &line[line
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("bad number after {key} in {line:?}"))
}

fn parse(path: &PathBuf) -> Vec<CType> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut out: Vec<CType> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line
            .strip_prefix("struct ")
            .or_else(|| line.strip_prefix("union "))
        {
            let name = rest.split(':').next().unwrap().to_string();
            out.push(CType {
                name,
                size: num_after(line, "sizeof="),
                align: num_after(line, "alignof="),
                fields: vec![],
            });
        } else if line.starts_with("  ") && line.contains(" off=") {
            let path = line.split_whitespace().next().unwrap().to_string();
            let cur = out
                .last_mut()
                .unwrap_or_else(|| panic!("field before any struct: {line:?}"));
            cur.fields
                .push((path, num_after(line, "off="), num_after(line, "size=")));
        }
    }
    out
}

/// Returns one message per difference.
fn compare(file: &PathBuf) -> (usize, Vec<String>) {
    let rust: HashMap<&str, Layout> = rust_layouts().into_iter().map(|l| (l.name, l)).collect();
    let c_types = parse(file);
    let mut errors = Vec::new();
    for c in &c_types {
        let Some(r) = rust.get(c.name.as_str()) else {
            errors.push(format!("{}: no Rust layout entry", c.name));
            continue;
        };
        if (r.size, r.align) != (c.size, c.align) {
            errors.push(format!(
                "{}: size/align C {}/{} Rust {}/{}",
                c.name, c.size, c.align, r.size, r.align
            ));
        }
        let rf: HashMap<&str, (usize, usize)> =
            r.fields.iter().map(|&(p, o, s)| (p, (o, s))).collect();
        for (path, off, size) in &c.fields {
            match rf.get(path.as_str()) {
                None => errors.push(format!("{}.{}: field missing in Rust", c.name, path)),
                Some(&(ro, rs)) if (ro, rs) != (*off, *size) => errors.push(format!(
                    "{}.{}: offset/size C {}/{} Rust {}/{}",
                    c.name, path, off, size, ro, rs
                )),
                Some(_) => {}
            }
        }
    }
    (c_types.len(), errors)
}

#[test]
fn reference_layouts_match() {
    let (n, errors) = compare(&abi_dir().join("layout.txt"));
    assert!(
        errors.is_empty(),
        "{} layout differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    // layout.txt lists 40 structs; fewer means the parser lost some.
    assert!(n >= 40, "only {n} structs parsed from layout.txt");
}

#[test]
fn extra_layouts_match() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/layout_extra.txt");
    let (n, errors) = compare(&file);
    assert!(
        errors.is_empty(),
        "{} layout differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(n >= 50, "only {n} types parsed from layout_extra.txt");
}

#[test]
fn verbs_context_ends_with_ibv_context() {
    // verbs.h reaches the extended ops by subtracting this offset from an
    // `ibv_context *`, and `sz` must sit right before the context.
    assert_eq!(
        offset_of!(verbs_context, context) + size_of::<ibv_context>(),
        size_of::<verbs_context>()
    );
    assert_eq!(
        offset_of!(verbs_context, sz) + size_of::<usize>(),
        offset_of!(verbs_context, context)
    );
    assert_eq!(VERBS_ABI_IS_EXTENDED as usize, usize::MAX);
    assert_eq!(IBV_ALLOCATOR_USE_DEFAULT as usize, usize::MAX);
}

#[test]
fn extended_objects_start_with_base_object() {
    assert_eq!(offset_of!(ibv_qp_ex, qp_base), 0);
    // ibv_cq_ex is cast to ibv_cq: the common prefix must line up.
    assert_eq!(offset_of!(ibv_cq_ex, comp_mask), size_of::<ibv_cq>());
    assert_eq!(
        offset_of!(ibv_cq_ex, async_events_completed),
        offset_of!(ibv_cq, async_events_completed)
    );
}

#[test]
fn zeroed_is_all_zero_and_usable() {
    let wr = ibv_send_wr::zeroed();
    assert!(wr.next.is_null());
    assert_eq!(wr.imm_data(), 0);
    let ops = ibv_context_ops::default();
    assert!(ops.post_send.is_none());
    let attr = ibv_qp_attr::zeroed();
    // SAFETY: `ibv_qp_attr` is plain data; viewing it as bytes reads only
    // initialised memory of exactly its size.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&attr as *const ibv_qp_attr).cast::<u8>(),
            size_of::<ibv_qp_attr>(),
        )
    };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn anonymous_union_accessors_share_storage() {
    let mut wc = ibv_wc::zeroed();
    wc.set_imm_data(0x1234_5678);
    assert_eq!(wc.invalidated_rkey(), 0x1234_5678);
    let mut wr = ibv_send_wr::zeroed();
    wr.set_invalidate_rkey(0xdead_beef);
    assert_eq!(wr.imm_data(), 0xdead_beef);
}

#[test]
fn gid_helpers() {
    let mut raw = [0u8; 16];
    raw[0] = 0xfe;
    raw[1] = 0x80;
    raw[15] = 1;
    let gid = ibv_gid::from_raw(raw);
    assert_eq!(gid.raw(), raw);
    assert_eq!(gid, ibv_gid::from_raw(raw));
    assert_ne!(gid, ibv_gid::zeroed());
    assert_eq!(
        format!("{gid:?}"),
        "fe80:0000:0000:0000:0000:0000:0000:0001"
    );
}
