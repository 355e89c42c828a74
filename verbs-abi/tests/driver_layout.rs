//! Compares `verbs_abi::driver` with the C layouts of rdma-core 44's
//! internal provider interface recorded in `abi/rdma-core-44/driver_layout.txt`
//! (printed by `driver_layout_probe.c`, compiled against rdma-core 44's
//! source tree by `driver_layout_probe.sh`).
//!
//! Every struct named in the file must exist in Rust with the same size and
//! alignment, and every field path with the same offset and size; each
//! bitfield must sit in the byte and bit its Rust constant says; each
//! constant must have the same value.  The table below maps C paths to Rust
//! paths (they differ only for C's anonymous union in `verbs_qp`, Rust
//! keywords, and the one-u64 view of `ib_uverbs_attr`'s data union).
//!
//! The facts are found through `ABI_DIR`, else in the repository's
//! `abi/rdma-core-44`.

use core::ffi::{c_ulong, c_void};
use core::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::collections::HashMap;
use std::path::PathBuf;

use verbs_abi::driver::*;
use verbs_abi::*;

struct Layout {
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
/// listed field, through unions too.
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

/// libibverbs' private `struct verbs_ex_private` (ibverbs.h), mirrored here
/// only to check the numbers `driver.rs` documents: providers never see it.
#[repr(C)]
struct verbs_ex_private {
    unsupported_ioctls: [c_ulong; VERBS_OPS_NUM.div_ceil(c_ulong::BITS as usize)],
    driver_id: u32,
    use_ioctl_write: bool,
    ops: verbs_context_ops,
    imported: bool,
}

fn rust_layouts() -> Vec<Layout> {
    vec![
        layout!(list_node {
            "next" => next,
            "prev" => prev,
        }),
        layout!(list_head {
            "n" => n,
            "n.next" => n.next,
            "n.prev" => n.prev,
        }),
        layout!(verbs_match_ent {
            "driver_data" => driver_data,
            "u" => u,
            "u.modalias" => u.modalias,
            "u.driver_id" => u.driver_id,
            "vendor" => vendor,
            "device" => device,
            "kind" => kind,
        }),
        layout!(verbs_sysfs_dev {
            "entry" => entry,
            "entry.next" => entry.next,
            "entry.prev" => entry.prev,
            "provider_data" => provider_data,
            "match" => r#match,
            "flags" => flags,
            "sysfs_name" => sysfs_name,
            "sysfs_cdev" => sysfs_cdev,
            "ibdev_name" => ibdev_name,
            "ibdev_path" => ibdev_path,
            "modalias" => modalias,
            "node_guid" => node_guid,
            "driver_id" => driver_id,
            "node_type" => node_type,
            "ibdev_idx" => ibdev_idx,
            "num_ports" => num_ports,
            "abi_ver" => abi_ver,
            "time_created" => time_created,
            "time_created.tv_sec" => time_created.tv_sec,
            "time_created.tv_nsec" => time_created.tv_nsec,
        }),
        layout!(verbs_device_ops {
            "name" => name,
            "match_min_abi_version" => match_min_abi_version,
            "match_max_abi_version" => match_max_abi_version,
            "match_table" => match_table,
            "static_providers" => static_providers,
            "match_device" => match_device,
            "alloc_context" => alloc_context,
            "import_context" => import_context,
            "alloc_device" => alloc_device,
            "uninit_device" => uninit_device,
        }),
        layout!(verbs_device {
            "device" => device,
            "ops" => ops,
            "refcount" => refcount,
            "entry" => entry,
            "entry.next" => entry.next,
            "entry.prev" => entry.prev,
            "sysfs" => sysfs,
            "core_support" => core_support,
        }),
        layout!(ibv_driver {
            "entry" => entry,
            "entry.next" => entry.next,
            "entry.prev" => entry.prev,
            "ops" => ops,
        }),
        layout!(verbs_context_ops {
            "advise_mr" => advise_mr,
            "alloc_dm" => alloc_dm,
            "alloc_mw" => alloc_mw,
            "alloc_null_mr" => alloc_null_mr,
            "alloc_parent_domain" => alloc_parent_domain,
            "alloc_pd" => alloc_pd,
            "alloc_td" => alloc_td,
            "async_event" => async_event,
            "attach_counters_point_flow" => attach_counters_point_flow,
            "attach_mcast" => attach_mcast,
            "bind_mw" => bind_mw,
            "close_xrcd" => close_xrcd,
            "cq_event" => cq_event,
            "create_ah" => create_ah,
            "create_counters" => create_counters,
            "create_cq" => create_cq,
            "create_cq_ex" => create_cq_ex,
            "create_flow" => create_flow,
            "create_flow_action_esp" => create_flow_action_esp,
            "create_qp" => create_qp,
            "create_qp_ex" => create_qp_ex,
            "create_rwq_ind_table" => create_rwq_ind_table,
            "create_srq" => create_srq,
            "create_srq_ex" => create_srq_ex,
            "create_wq" => create_wq,
            "dealloc_mw" => dealloc_mw,
            "dealloc_pd" => dealloc_pd,
            "dealloc_td" => dealloc_td,
            "dereg_mr" => dereg_mr,
            "destroy_ah" => destroy_ah,
            "destroy_counters" => destroy_counters,
            "destroy_cq" => destroy_cq,
            "destroy_flow" => destroy_flow,
            "destroy_flow_action" => destroy_flow_action,
            "destroy_qp" => destroy_qp,
            "destroy_rwq_ind_table" => destroy_rwq_ind_table,
            "destroy_srq" => destroy_srq,
            "destroy_wq" => destroy_wq,
            "detach_mcast" => detach_mcast,
            "free_context" => free_context,
            "free_dm" => free_dm,
            "get_srq_num" => get_srq_num,
            "import_dm" => import_dm,
            "import_mr" => import_mr,
            "import_pd" => import_pd,
            "modify_cq" => modify_cq,
            "modify_flow_action_esp" => modify_flow_action_esp,
            "modify_qp" => modify_qp,
            "modify_qp_rate_limit" => modify_qp_rate_limit,
            "modify_srq" => modify_srq,
            "modify_wq" => modify_wq,
            "open_qp" => open_qp,
            "open_xrcd" => open_xrcd,
            "poll_cq" => poll_cq,
            "post_recv" => post_recv,
            "post_send" => post_send,
            "post_srq_ops" => post_srq_ops,
            "post_srq_recv" => post_srq_recv,
            "query_device_ex" => query_device_ex,
            "query_ece" => query_ece,
            "query_port" => query_port,
            "query_qp" => query_qp,
            "query_qp_data_in_order" => query_qp_data_in_order,
            "query_rt_values" => query_rt_values,
            "query_srq" => query_srq,
            "read_counters" => read_counters,
            "reg_dm_mr" => reg_dm_mr,
            "reg_dmabuf_mr" => reg_dmabuf_mr,
            "reg_mr" => reg_mr,
            "req_notify_cq" => req_notify_cq,
            "rereg_mr" => rereg_mr,
            "resize_cq" => resize_cq,
            "set_ece" => set_ece,
            "unimport_dm" => unimport_dm,
            "unimport_mr" => unimport_mr,
            "unimport_pd" => unimport_pd,
        }),
        layout!(verbs_xrcd {
            "xrcd" => xrcd,
            "comp_mask" => comp_mask,
            "handle" => handle,
        }),
        layout!(verbs_srq {
            "srq" => srq,
            "srq_type" => srq_type,
            "xrcd" => xrcd,
            "cq" => cq,
            "srq_num" => srq_num,
        }),
        layout!(verbs_mr {
            "ibv_mr" => ibv_mr,
            "mr_type" => mr_type,
            "access" => access,
        }),
        layout!(verbs_qp {
            "qp" => u.qp,
            "qp_ex" => u.qp_ex,
            "comp_mask" => comp_mask,
            "xrcd" => xrcd,
        }),
        layout!(verbs_cq {
            "cq" => cq,
            "cq_ex" => cq_ex,
        }),
        layout!(verbs_flow_action {
            "action" => action,
            "handle" => handle,
            "type" => r#type,
        }),
        layout!(verbs_dm {
            "dm" => dm,
            "handle" => handle,
        }),
        layout!(verbs_counters {
            "counters" => counters,
            "handle" => handle,
        }),
        layout!(ib_uverbs_attr {
            "attr_id" => attr_id,
            "len" => len,
            "flags" => flags,
            "attr_data" => attr_data,
            "attr_data.enum_data" => attr_data.enum_data,
            "attr_data.enum_data.elem_id" => attr_data.enum_data.elem_id,
            "attr_data.enum_data.reserved" => attr_data.enum_data.reserved,
            "attr_data.reserved" => attr_data.reserved,
            "data" => data,
            "data_s64" => data,
        }),
        layout!(ib_uverbs_ioctl_hdr {
            "length" => length,
            "object_id" => object_id,
            "method_id" => method_id,
            "num_attrs" => num_attrs,
            "reserved1" => reserved1,
            "driver_id" => driver_id,
            "reserved2" => reserved2,
            "attrs" => attrs,
        }),
        layout!(ibv_command_buffer {
            "next" => next,
            "next_attr" => next_attr,
            "last_attr" => last_attr,
            "uhw_in_idx" => uhw_in_idx,
            "uhw_out_idx" => uhw_out_idx,
            "uhw_in_headroom_dwords" => uhw_in_headroom_dwords,
            "uhw_out_headroom_dwords" => uhw_out_headroom_dwords,
            "hdr" => hdr,
        }),
        layout!(verbs_ex_private {
            "unsupported_ioctls" => unsupported_ioctls,
            "driver_id" => driver_id,
            "use_ioctl_write" => use_ioctl_write,
            "ops" => ops,
            "imported" => imported,
        }),
    ]
}

/// `(struct, C bitfield name)` → (byte offset of the Rust storage, mask).
fn rust_bitfields() -> HashMap<(&'static str, &'static str), (usize, u8)> {
    let bits = offset_of!(ibv_command_buffer, bits);
    HashMap::from([
        (
            ("ibv_command_buffer", "buffer_error"),
            (bits, IBV_CMDB_BUFFER_ERROR),
        ),
        (
            ("ibv_command_buffer", "fallback_require_ex"),
            (bits, IBV_CMDB_FALLBACK_REQUIRE_EX),
        ),
        (
            ("ibv_command_buffer", "fallback_ioctl_only"),
            (bits, IBV_CMDB_FALLBACK_IOCTL_ONLY),
        ),
    ])
}

fn rust_constants() -> HashMap<&'static str, i128> {
    HashMap::from([
        ("IBVERBS_PABI_VERSION", IBVERBS_PABI_VERSION as i128),
        ("VERBS_OPS_NUM", VERBS_OPS_NUM as i128),
        ("IBV_SYSFS_NAME_MAX", IBV_SYSFS_NAME_MAX as i128),
        ("IBV_SYSFS_PATH_MAX", IBV_SYSFS_PATH_MAX as i128),
        ("VERBS_LOG_LEVEL_NONE", VERBS_LOG_LEVEL_NONE as i128),
        ("VERBS_LOG_ERR", VERBS_LOG_ERR as i128),
        ("VERBS_LOG_WARN", VERBS_LOG_WARN as i128),
        ("VERBS_LOG_INFO", VERBS_LOG_INFO as i128),
        ("VERBS_LOG_DEBUG", VERBS_LOG_DEBUG as i128),
        ("VERBS_XRCD_HANDLE", VERBS_XRCD_HANDLE as i128),
        ("VERBS_XRCD_RESERVED", VERBS_XRCD_RESERVED as i128),
        (
            "CREATE_CQ_CMD_FLAGS_TS_IGNORED_EX",
            CREATE_CQ_CMD_FLAGS_TS_IGNORED_EX as i128,
        ),
        ("VERBS_QP_XRCD", VERBS_QP_XRCD as i128),
        ("VERBS_QP_EX", VERBS_QP_EX as i128),
        (
            "IBV_GID_TYPE_SYSFS_IB_ROCE_V1",
            IBV_GID_TYPE_SYSFS_IB_ROCE_V1 as i128,
        ),
        (
            "IBV_GID_TYPE_SYSFS_ROCE_V2",
            IBV_GID_TYPE_SYSFS_ROCE_V2 as i128,
        ),
        ("VERBS_QUERY_GID_ATTR_GID", VERBS_QUERY_GID_ATTR_GID as i128),
        (
            "VERBS_QUERY_GID_ATTR_TYPE",
            VERBS_QUERY_GID_ATTR_TYPE as i128,
        ),
        (
            "VERBS_QUERY_GID_ATTR_NDEV_IFINDEX",
            VERBS_QUERY_GID_ATTR_NDEV_IFINDEX as i128,
        ),
        ("IBV_MR_TYPE_MR", IBV_MR_TYPE_MR as i128),
        ("IBV_MR_TYPE_NULL_MR", IBV_MR_TYPE_NULL_MR as i128),
        ("IBV_MR_TYPE_IMPORTED_MR", IBV_MR_TYPE_IMPORTED_MR as i128),
        ("IBV_MR_TYPE_DMABUF_MR", IBV_MR_TYPE_DMABUF_MR as i128),
        (
            "IBV_FLOW_ACTION_UNSPECIFIED",
            IBV_FLOW_ACTION_UNSPECIFIED as i128,
        ),
        ("IBV_FLOW_ACTION_ESP", IBV_FLOW_ACTION_ESP as i128),
        ("VERBS_MATCH_SENTINEL", VERBS_MATCH_SENTINEL as i128),
        ("VERBS_MATCH_PCI", VERBS_MATCH_PCI as i128),
        ("VERBS_MATCH_MODALIAS", VERBS_MATCH_MODALIAS as i128),
        ("VERBS_MATCH_DRIVER_ID", VERBS_MATCH_DRIVER_ID as i128),
        ("VSYSFS_READ_MODALIAS", VSYSFS_READ_MODALIAS as i128),
        ("VSYSFS_READ_NODE_GUID", VSYSFS_READ_NODE_GUID as i128),
        ("_UHW_NO_INDEX", _UHW_NO_INDEX as i128),
    ])
}

struct CType {
    name: String,
    size: usize,
    align: usize,
    fields: Vec<(String, usize, usize)>,
    /// (name, byte, bit, width).
    bitfields: Vec<(String, usize, u32, u32)>,
}

struct Facts {
    types: Vec<CType>,
    constants: Vec<(String, i128)>,
}

fn facts_file() -> PathBuf {
    match std::env::var_os("ABI_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../abi/rdma-core-44"),
    }
    .join("driver_layout.txt")
}

/// The number after `key` (possibly after spaces), e.g. `off=  28`.
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

fn parse() -> Facts {
    let path = facts_file();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut types: Vec<CType> = Vec::new();
    let mut constants = Vec::new();
    let mut in_constants = false;
    for line in text.lines() {
        if line.starts_with("# constants") {
            in_constants = true;
        } else if let Some(rest) = line.strip_prefix("struct ") {
            in_constants = false;
            types.push(CType {
                name: rest.split(':').next().unwrap().to_string(),
                size: num_after(line, "sizeof="),
                align: num_after(line, "alignof="),
                fields: vec![],
                bitfields: vec![],
            });
        } else if in_constants && line.starts_with("  ") {
            // `  NAME = 34 (0x22)`
            let (name, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("bad constant line {line:?}"));
            let value = value.split_whitespace().next().unwrap();
            constants.push((
                name.trim().to_string(),
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            ));
        } else if line.starts_with("  ") && !line.starts_with("  --") {
            let cur = types
                .last_mut()
                .unwrap_or_else(|| panic!("field before any struct: {line:?}"));
            let path = line.split_whitespace().next().unwrap().to_string();
            if line.contains("(bitfield)") {
                cur.bitfields.push((
                    path,
                    num_after(line, "byte="),
                    num_after(line, "bit=") as u32,
                    num_after(line, "width=") as u32,
                ));
            } else {
                cur.fields
                    .push((path, num_after(line, "off="), num_after(line, "size=")));
            }
        }
    }
    Facts { types, constants }
}

#[test]
fn driver_layouts_match() {
    let facts = parse();
    let rust: HashMap<&str, Layout> = rust_layouts().into_iter().map(|l| (l.name, l)).collect();
    let bitfields = rust_bitfields();
    let mut errors = Vec::new();
    let mut fields_checked = 0;
    let mut bitfields_checked = 0;
    for c in &facts.types {
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
            fields_checked += 1;
            match rf.get(path.as_str()) {
                None => errors.push(format!("{}.{}: field missing in Rust", c.name, path)),
                Some(&(ro, rs)) if (ro, rs) != (*off, *size) => errors.push(format!(
                    "{}.{}: offset/size C {}/{} Rust {}/{}",
                    c.name, path, off, size, ro, rs
                )),
                Some(_) => {}
            }
        }
        // A Rust table row the file does not list would go unchecked.
        for (path, _, _) in &r.fields {
            if !c.fields.iter().any(|(p, _, _)| p == path) {
                errors.push(format!("{}.{}: not in the C facts", c.name, path));
            }
        }
        for (name, byte, bit, width) in &c.bitfields {
            bitfields_checked += 1;
            match bitfields.get(&(c.name.as_str(), name.as_str())) {
                None => errors.push(format!("{}.{}: bitfield missing in Rust", c.name, name)),
                Some(&(rbyte, mask)) => {
                    let want = (((1u32 << width) - 1) << bit) as u8;
                    if (rbyte, mask) != (*byte, want) {
                        errors.push(format!(
                            "{}.{}: bitfield C byte {} mask {:#x}, Rust byte {} mask {:#x}",
                            c.name, name, byte, want, rbyte, mask
                        ));
                    }
                }
            }
        }
    }
    for name in rust.keys() {
        if !facts.types.iter().any(|c| c.name == *name) {
            errors.push(format!("{name}: in the Rust table, not in the C facts"));
        }
    }
    assert!(
        errors.is_empty(),
        "{} driver layout differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    // Fewer means the parser lost something.
    assert!(
        facts.types.len() >= 20,
        "only {} structs parsed",
        facts.types.len()
    );
    assert!(fields_checked >= 185, "only {fields_checked} fields parsed");
    assert_eq!(bitfields_checked, 3);
}

#[test]
fn driver_constants_match() {
    let facts = parse();
    let rust = rust_constants();
    let mut errors = Vec::new();
    for (name, value) in &facts.constants {
        match rust.get(name.as_str()) {
            None => errors.push(format!("{name}: no Rust constant")),
            Some(r) if r != value => errors.push(format!("{name}: C {value} Rust {r}")),
            Some(_) => {}
        }
    }
    assert!(
        errors.is_empty(),
        "{} constant differences:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert_eq!(facts.constants.len(), rust.len(), "constants parsed");
}

#[test]
fn ops_table_is_all_pointers() {
    assert_eq!(VERBS_OPS_NUM, 76);
    assert_eq!(
        size_of::<verbs_context_ops>(),
        VERBS_OPS_NUM * size_of::<*const c_void>()
    );
    assert!(verbs_context_ops::default().post_send.is_none());
}

#[test]
fn container_rules() {
    // Providers cast between these without container_of.
    assert_eq!(offset_of!(verbs_device, device), 0);
    assert_eq!(offset_of!(verbs_qp, u), 0);
    assert_eq!(offset_of!(verbs_mr, ibv_mr), 0);
    assert_eq!(offset_of!(verbs_srq, srq), 0);
    assert_eq!(offset_of!(verbs_xrcd, xrcd), 0);
    let mut vqp = verbs_qp::zeroed();
    let p = core::ptr::addr_of_mut!(vqp).cast::<ibv_qp>();
    assert_eq!(vqp.qp(), p);
    assert_eq!(vqp.qp_ex().cast::<ibv_qp>(), p);
}

#[test]
fn accessors() {
    let mut e = verbs_match_ent::zeroed();
    assert!(e.is_sentinel());
    e.u.driver_id = 7;
    e.kind = VERBS_MATCH_DRIVER_ID;
    assert_eq!(e.driver_id(), 7);
    e.vendor = 0x15b3;
    e.device = 0x1017;
    assert_eq!(e.pci_ids(), (0x15b3, 0x1017));
    e.u.modalias = c"rdma_device:*".as_ptr();
    assert_eq!(e.modalias(), c"rdma_device:*".as_ptr());

    let mut cmd = ibv_command_buffer::zeroed();
    cmd.set_bit(IBV_CMDB_FALLBACK_REQUIRE_EX, true);
    assert!(cmd.fallback_require_ex() && !cmd.buffer_error() && !cmd.fallback_ioctl_only());
    cmd.set_bit(IBV_CMDB_FALLBACK_REQUIRE_EX, false);
    assert_eq!(cmd.bits, 0);

    let mut a = ib_uverbs_attr::zeroed();
    a.set_data_s64(-1);
    assert_eq!(a.data, u64::MAX);
    assert_eq!(a.data_s64(), -1);
}
