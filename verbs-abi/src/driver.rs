//! rdma-core 44's *internal* provider interface as `#[repr(C)]` Rust: the
//! layouts of `<infiniband/driver.h>`, `<infiniband/cmd_ioctl.h>` and
//! libibverbs' `ibverbs.h` that a C provider such as
//! `librxe-rdmav34.so` was compiled against (x86_64 Linux, private ABI
//! `IBVERBS_PRIVATE_34`).
//!
//! These are not public ABI: rdma-core changes them whenever it bumps the
//! private ABI number (`IBVERBS_PABI_VERSION`, the `34` in
//! `verbs_register_driver_34` and in the providers' file names).  Every
//! layout here is checked against `abi/rdma-core-44/driver_layout.txt`
//! (printed by `driver_layout_probe.c`, compiled against rdma-core 44's own
//! headers) by `tests/driver_layout.rs`.
//!
//! The public types (`ibv_*`, `verbs_context`) come from [`crate::verbs`].
//! Names follow C.  Where C has an *anonymous* union, Rust needs a field
//! name; the invented names are:
//!
//! | C struct    | Rust field | members (C names)   |
//! |-------------|------------|---------------------|
//! | `verbs_qp`  | `u`        | `qp`, `qp_ex`       |
//!
//! `ib_uverbs_attr`'s anonymous union of two 8-byte integers (`data`,
//! `data_s64`) is the one field `data: u64`, with `data_s64()` accessors.
//! The three 1-bit bitfields of `ibv_command_buffer` are the byte `bits`
//! with the masks `IBV_CMDB_*`.
//!
//! `verbs_cq` is nothing but an anonymous union, so it is a Rust `union`
//! with the C member names (`vcq.cq`, `vcq.cq_ex`).
//!
//! Types that exist in other rdma-core versions but not in 44:
//! `verbs_mw`, `verbs_flow` and `enum verbs_srq_mask`.
//!
//! # `struct verbs_ex_private` (ibverbs.h; not provider ABI)
//!
//! `verbs_context.priv` points to it.  libibverbs allocates and reads it;
//! providers never look inside (they only pass the `verbs_context`), so our
//! libibverbs may put anything there.  For reference, rdma-core 44's layout
//! on x86_64 (checked by `tests/driver_layout.rs` against the probe's
//! output) is 640 bytes, alignment 8:
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 16   | `unsigned long unsupported_ioctls[2]` (one bit per op, 76 ops) |
//! | 16     | 4    | `uint32_t driver_id`                                         |
//! | 20     | 1    | `bool use_ioctl_write`                                       |
//! | 24     | 608  | `struct verbs_context_ops ops` (the merged table)            |
//! | 632    | 1    | `bool imported`                                              |
#![allow(clippy::type_complexity)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::ManuallyDrop;
use core::sync::atomic::AtomicI32;

use libc::{dev_t, timespec};

use crate::verbs::*;

// ---------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------

/// The private ABI number this file describes (`IBVERBS_PABI_VERSION`).
pub const IBVERBS_PABI_VERSION: u32 = 34;
/// The symbol a provider's constructor calls to register its
/// `verbs_device_ops` (C: `verbs_register_driver`, a macro that pastes in
/// `IBVERBS_PABI_VERSION`).
pub const VERBS_REGISTER_DRIVER_SYMBOL: &core::ffi::CStr = c"verbs_register_driver_34";
/// The version node libibverbs exports the private symbols under.
pub const IBVERBS_PRIVATE_VERSION_NODE: &core::ffi::CStr = c"IBVERBS_PRIVATE_34";
/// Suffix of a provider's file name (`lib<name>-rdmav34.so`).
pub const VERBS_PROVIDER_SUFFIX: &core::ffi::CStr = c"-rdmav34.so";

// `verbs_log` levels (anonymous enum).
pub const VERBS_LOG_LEVEL_NONE: u32 = 0;
pub const VERBS_LOG_ERR: u32 = 1;
pub const VERBS_LOG_WARN: u32 = 2;
pub const VERBS_LOG_INFO: u32 = 3;
pub const VERBS_LOG_DEBUG: u32 = 4;

/// C: `enum verbs_xrcd_mask` (bits of `verbs_xrcd.comp_mask`).
pub type verbs_xrcd_mask = c_uint;
pub const VERBS_XRCD_HANDLE: verbs_xrcd_mask = 1 << 0;
pub const VERBS_XRCD_RESERVED: verbs_xrcd_mask = 1 << 1;

/// C: `enum create_cq_cmd_flags` (last argument of `ibv_cmd_create_cq_ex`).
pub type create_cq_cmd_flags = c_uint;
pub const CREATE_CQ_CMD_FLAGS_TS_IGNORED_EX: create_cq_cmd_flags = 1 << 0;

/// C: `enum verbs_qp_mask` (bits of `verbs_qp.comp_mask`).
pub type verbs_qp_mask = c_uint;
pub const VERBS_QP_XRCD: verbs_qp_mask = 1 << 0;
pub const VERBS_QP_EX: verbs_qp_mask = 1 << 1;

/// C: `enum ibv_gid_type_sysfs` (`ibv_query_gid_type`).
pub type ibv_gid_type_sysfs = c_uint;
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: ibv_gid_type_sysfs = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: ibv_gid_type_sysfs = 1;

/// C: `enum verbs_query_gid_attr_mask` (`__ibv_query_gid_ex`'s fallback mask).
pub type verbs_query_gid_attr_mask = c_uint;
pub const VERBS_QUERY_GID_ATTR_GID: verbs_query_gid_attr_mask = 1 << 0;
pub const VERBS_QUERY_GID_ATTR_TYPE: verbs_query_gid_attr_mask = 1 << 1;
pub const VERBS_QUERY_GID_ATTR_NDEV_IFINDEX: verbs_query_gid_attr_mask = 1 << 2;

/// C: `enum ibv_mr_type` (`verbs_mr.mr_type`).
pub type ibv_mr_type = c_uint;
pub const IBV_MR_TYPE_MR: ibv_mr_type = 0;
pub const IBV_MR_TYPE_NULL_MR: ibv_mr_type = 1;
pub const IBV_MR_TYPE_IMPORTED_MR: ibv_mr_type = 2;
pub const IBV_MR_TYPE_DMABUF_MR: ibv_mr_type = 3;

/// C: `enum ibv_flow_action_type` (`verbs_flow_action.type`).
pub type ibv_flow_action_type = c_uint;
pub const IBV_FLOW_ACTION_UNSPECIFIED: ibv_flow_action_type = 0;
pub const IBV_FLOW_ACTION_ESP: ibv_flow_action_type = 1;

// `verbs_match_ent.kind` (anonymous enum; stored in a `uint8_t`).
/// Ends a match table.
pub const VERBS_MATCH_SENTINEL: u8 = 0;
/// Match on PCI `vendor`/`device`.
pub const VERBS_MATCH_PCI: u8 = 1;
/// Match `u.modalias` (an fnmatch pattern) against the device's modalias.
pub const VERBS_MATCH_MODALIAS: u8 = 2;
/// Match `u.driver_id` (`enum rdma_driver_id`) against the kernel's.
pub const VERBS_MATCH_DRIVER_ID: u8 = 3;

// `verbs_sysfs_dev.flags` (anonymous enum).
/// `modalias` has been read.
pub const VSYSFS_READ_MODALIAS: c_uint = 1 << 0;
/// `node_guid` has been read.
pub const VSYSFS_READ_NODE_GUID: c_uint = 1 << 1;

/// `ibv_command_buffer.uhw_in_idx`/`uhw_out_idx` when there is no UHW
/// attribute (C: `_UHW_NO_INDEX`).
pub const _UHW_NO_INDEX: u8 = 0xFF;

// ---------------------------------------------------------------------------
// ccan/list.h
// ---------------------------------------------------------------------------

/// ccan's intrusive doubly linked list link (`struct list_node`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct list_node {
    pub next: *mut list_node,
    pub prev: *mut list_node,
}

/// ccan's list head (`struct list_head`): a `list_node` named `n`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct list_head {
    pub n: list_node,
}

// ---------------------------------------------------------------------------
// Objects wrapped by the core (driver.h)
// ---------------------------------------------------------------------------

#[repr(C)]
pub struct verbs_xrcd {
    pub xrcd: ibv_xrcd,
    /// `VERBS_XRCD_*` bits.
    pub comp_mask: u32,
    pub handle: u32,
}

#[repr(C)]
pub struct verbs_srq {
    pub srq: ibv_srq,
    pub srq_type: ibv_srq_type,
    pub xrcd: *mut verbs_xrcd,
    pub cq: *mut ibv_cq,
    pub srq_num: u32,
}

#[repr(C)]
pub struct verbs_mr {
    pub ibv_mr: ibv_mr,
    pub mr_type: ibv_mr_type,
    pub access: c_int,
}

/// C's anonymous union at the start of `verbs_qp`.
#[repr(C)]
pub union verbs_qp_u {
    pub qp: ManuallyDrop<ibv_qp>,
    pub qp_ex: ManuallyDrop<ibv_qp_ex>,
}

#[repr(C)]
pub struct verbs_qp {
    /// C: anonymous union of `qp` and `qp_ex` (`ibv_qp_ex` starts with
    /// `qp_base`, so both name the same `ibv_qp`).
    pub u: verbs_qp_u,
    /// `VERBS_QP_*` bits.
    pub comp_mask: u32,
    pub xrcd: *mut verbs_xrcd,
}

impl verbs_qp {
    /// C: `vqp->qp`.
    pub fn qp(&mut self) -> *mut ibv_qp {
        (self as *mut Self).cast()
    }

    /// C: `vqp->qp_ex`.
    pub fn qp_ex(&mut self) -> *mut ibv_qp_ex {
        (self as *mut Self).cast()
    }
}

/// C: `struct verbs_cq`, whose only member is an anonymous union.
#[repr(C)]
pub union verbs_cq {
    pub cq: ManuallyDrop<ibv_cq>,
    pub cq_ex: ManuallyDrop<ibv_cq_ex>,
}

#[repr(C)]
pub struct verbs_flow_action {
    pub action: ibv_flow_action,
    pub handle: u32,
    pub r#type: ibv_flow_action_type,
}

#[repr(C)]
pub struct verbs_dm {
    pub dm: ibv_dm,
    pub handle: u32,
}

#[repr(C)]
pub struct verbs_counters {
    pub counters: ibv_counters,
    pub handle: u32,
}

// ---------------------------------------------------------------------------
// Device matching and discovery
// ---------------------------------------------------------------------------

/// C: the union `u` of `verbs_match_ent`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union verbs_match_ent_u {
    pub modalias: *const c_char,
    pub driver_id: u64,
}

/// One row of a provider's match table; a row of kind
/// `VERBS_MATCH_SENTINEL` ends it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct verbs_match_ent {
    pub driver_data: *mut c_void,
    pub u: verbs_match_ent_u,
    pub vendor: u16,
    pub device: u16,
    /// `VERBS_MATCH_*`.
    pub kind: u8,
}

impl verbs_match_ent {
    /// `u.driver_id` (meaningful when `kind == VERBS_MATCH_DRIVER_ID`).
    pub fn driver_id(&self) -> u64 {
        // SAFETY: both union members are plain 8-byte values; reading the
        // integer view of a pointer is always defined.
        unsafe { self.u.driver_id }
    }

    /// `u.modalias` (meaningful when `kind == VERBS_MATCH_MODALIAS`).
    pub fn modalias(&self) -> *const c_char {
        // SAFETY: as above; a pointer read from an integer has no
        // provenance but is only compared or passed back to C.
        unsafe { self.u.modalias }
    }

    /// The PCI `(vendor, device)` pair (meaningful for `VERBS_MATCH_PCI`).
    pub fn pci_ids(&self) -> (u16, u16) {
        (self.vendor, self.device)
    }

    /// Whether this row ends the table.
    pub fn is_sentinel(&self) -> bool {
        self.kind == VERBS_MATCH_SENTINEL
    }
}

/// An RDMA device found in sysfs, as libibverbs hands it to a provider's
/// `match_device`/`alloc_device`.
#[repr(C)]
pub struct verbs_sysfs_dev {
    pub entry: list_node,
    pub provider_data: *mut c_void,
    /// The provider's table row that matched (set by libibverbs).
    pub r#match: *const verbs_match_ent,
    /// `VSYSFS_*` bits.
    pub flags: c_uint,
    /// The uverbs device, e.g. `uverbs0`.
    pub sysfs_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub sysfs_cdev: dev_t,
    /// The IB device, e.g. `rxe0`.
    pub ibdev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub modalias: [c_char; 512],
    pub node_guid: u64,
    /// `enum rdma_driver_id`.
    pub driver_id: u32,
    pub node_type: ibv_node_type,
    pub ibdev_idx: c_int,
    pub num_ports: u32,
    pub abi_ver: u32,
    pub time_created: timespec,
}

/// What a provider registers (`verbs_register_driver_34(&ops)` from its
/// ELF constructor).
#[repr(C)]
pub struct verbs_device_ops {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    /// Ends with a `VERBS_MATCH_SENTINEL` row; may be null.
    pub match_table: *const verbs_match_ent,
    /// Only in static builds; null in shared providers.
    pub static_providers: *mut *const verbs_device_ops,
    pub match_device: Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> bool>,
    pub alloc_context: Option<
        unsafe extern "C" fn(
            device: *mut ibv_device,
            cmd_fd: c_int,
            private_data: *mut c_void,
        ) -> *mut verbs_context,
    >,
    pub import_context:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut verbs_context>,
    pub alloc_device:
        Option<unsafe extern "C" fn(sysfs_dev: *mut verbs_sysfs_dev) -> *mut verbs_device>,
    pub uninit_device: Option<unsafe extern "C" fn(device: *mut verbs_device)>,
}

/// A provider's device: allocated by `alloc_device`, starts with the public
/// `ibv_device`.
#[repr(C)]
pub struct verbs_device {
    /// Must be first: `ibv_device *` and `verbs_device *` are the same
    /// address.
    pub device: ibv_device,
    pub ops: *const verbs_device_ops,
    /// C: `atomic_int`.
    pub refcount: AtomicI32,
    pub entry: list_node,
    pub sysfs: *mut verbs_sysfs_dev,
    pub core_support: u64,
}

/// libibverbs' private list entry for a registered provider (init.c; never
/// seen by providers).
#[repr(C)]
pub struct ibv_driver {
    pub entry: list_node,
    pub ops: *const verbs_device_ops,
}

/// C: `verbs_driver_init_func` (the pre-`verbs_device_ops` entry point;
/// declared by driver.h 44 but no longer called).
pub type verbs_driver_init_func = Option<
    unsafe extern "C" fn(uverbs_sys_path: *const c_char, abi_version: c_int) -> *mut verbs_device,
>;

// ---------------------------------------------------------------------------
// The provider's operation table
// ---------------------------------------------------------------------------

/// Every operation a provider can supply, passed to `verbs_set_ops`.  Kept
/// sorted by name in C; 76 entries in rdma-core 44.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct verbs_context_ops {
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: ibv_advise_mr_advice,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    pub alloc_dm: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_alloc_dm_attr,
        ) -> *mut ibv_dm,
    >,
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw>,
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_parent_domain_init_attr,
        ) -> *mut ibv_pd,
    >,
    pub alloc_pd: Option<unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd>,
    pub alloc_td: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_td_init_attr,
        ) -> *mut ibv_td,
    >,
    pub async_event:
        Option<unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event)>,
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            attr: *mut ibv_counter_attach_attr,
            flow: *mut ibv_flow,
        ) -> c_int,
    >,
    pub attach_mcast:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    pub cq_event: Option<unsafe extern "C" fn(cq: *mut ibv_cq)>,
    pub create_ah:
        Option<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah>,
    pub create_counters: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_counters_init_attr,
        ) -> *mut ibv_counters,
    >,
    pub create_cq: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            cqe: c_int,
            channel: *mut ibv_comp_channel,
            comp_vector: c_int,
        ) -> *mut ibv_cq,
    >,
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    pub create_flow: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut ibv_flow_attr) -> *mut ibv_flow,
    >,
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> *mut ibv_flow_action,
    >,
    pub create_qp:
        Option<unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp>,
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_rwq_ind_table_init_attr,
        ) -> *mut ibv_rwq_ind_table,
    >,
    pub create_srq: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            srq_init_attr: *mut ibv_srq_init_attr,
        ) -> *mut ibv_srq,
    >,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub create_wq: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            wq_init_attr: *mut ibv_wq_init_attr,
        ) -> *mut ibv_wq,
    >,
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    pub dealloc_pd: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int>,
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
    pub dereg_mr: Option<unsafe extern "C" fn(vmr: *mut verbs_mr) -> c_int>,
    pub destroy_ah: Option<unsafe extern "C" fn(ah: *mut ibv_ah) -> c_int>,
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut ibv_counters) -> c_int>,
    pub destroy_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int>,
    pub destroy_flow: Option<unsafe extern "C" fn(flow: *mut ibv_flow) -> c_int>,
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut ibv_flow_action) -> c_int>,
    pub destroy_qp: Option<unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int>,
    pub destroy_rwq_ind_table:
        Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
    pub destroy_srq: Option<unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int>,
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut ibv_wq) -> c_int>,
    pub detach_mcast:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int>,
    pub free_context: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut ibv_dm) -> c_int>,
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    pub import_dm:
        Option<unsafe extern "C" fn(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm>,
    pub import_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr>,
    pub import_pd:
        Option<unsafe extern "C" fn(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd>,
    pub modify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
    pub modify_flow_action_esp: Option<
        unsafe extern "C" fn(
            action: *mut ibv_flow_action,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> c_int,
    >,
    pub modify_qp: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int,
    >,
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int>,
    pub modify_srq: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            srq_attr: *mut ibv_srq_attr,
            srq_attr_mask: c_int,
        ) -> c_int,
    >,
    pub modify_wq:
        Option<unsafe extern "C" fn(wq: *mut ibv_wq, wq_attr: *mut ibv_wq_attr) -> c_int>,
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp,
    >,
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_xrcd_init_attr,
        ) -> *mut ibv_xrcd,
    >,
    pub poll_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
    pub post_recv: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_recv_wr,
            bad_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub post_send: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_send_wr,
            bad_wr: *mut *mut ibv_send_wr,
        ) -> c_int,
    >,
    pub post_srq_ops: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            op: *mut ibv_ops_wr,
            bad_op: *mut *mut ibv_ops_wr,
        ) -> c_int,
    >,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut ibv_device_attr_ex,
            attr_size: usize,
        ) -> c_int,
    >,
    pub query_ece: Option<unsafe extern "C" fn(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int>,
    pub query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut ibv_port_attr,
        ) -> c_int,
    >,
    pub query_qp: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            attr: *mut ibv_qp_attr,
            attr_mask: c_int,
            init_attr: *mut ibv_qp_init_attr,
        ) -> c_int,
    >,
    pub query_qp_data_in_order:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int>,
    pub query_rt_values: Option<
        unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int,
    >,
    pub query_srq:
        Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int>,
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    pub reg_dmabuf_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            offset: u64,
            length: usize,
            iova: u64,
            fd: c_int,
            access: c_int,
        ) -> *mut ibv_mr,
    >,
    pub reg_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            hca_va: u64,
            access: c_int,
        ) -> *mut ibv_mr,
    >,
    pub req_notify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
    pub rereg_mr: Option<
        unsafe extern "C" fn(
            vmr: *mut verbs_mr,
            flags: c_int,
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            access: c_int,
        ) -> c_int,
    >,
    pub resize_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, cqe: c_int) -> c_int>,
    pub set_ece: Option<unsafe extern "C" fn(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int>,
    pub unimport_dm: Option<unsafe extern "C" fn(dm: *mut ibv_dm)>,
    pub unimport_mr: Option<unsafe extern "C" fn(mr: *mut ibv_mr)>,
    pub unimport_pd: Option<unsafe extern "C" fn(pd: *mut ibv_pd)>,
}

/// Number of operations in `verbs_context_ops` (C: `VERBS_OPS_NUM`).
pub const VERBS_OPS_NUM: usize =
    core::mem::size_of::<verbs_context_ops>() / core::mem::size_of::<*const c_void>();

// ---------------------------------------------------------------------------
// cmd_ioctl.h
// ---------------------------------------------------------------------------

/// C: `ib_uverbs_attr.attr_data.enum_data`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_attr_enum_data {
    pub elem_id: u8,
    pub reserved: u8,
}

/// C: the union `attr_data` of `ib_uverbs_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_uverbs_attr_data {
    pub enum_data: ib_uverbs_attr_enum_data,
    pub reserved: u16,
}

/// One ioctl attribute (kernel `struct ib_uverbs_attr`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_uverbs_attr {
    /// Command-specific attribute id.
    pub attr_id: u16,
    /// Length of the buffer `data` points to (pointer and IDR-array
    /// attributes).
    pub len: u16,
    /// `UVERBS_ATTR_F_*`.
    pub flags: u16,
    pub attr_data: ib_uverbs_attr_data,
    /// C: the anonymous union `{ __aligned_u64 data; __s64 data_s64; }`,
    /// here its unsigned member; [`ib_uverbs_attr::data_s64`] is the signed
    /// view of the same 8 bytes.  A pointer, inline data, an IDR handle or
    /// (as `data_s64`) a file descriptor.
    pub data: u64,
}

impl ib_uverbs_attr {
    /// C: `attr.data_s64` (used by the FD_IN/FD_OUT attributes).
    pub fn data_s64(&self) -> i64 {
        self.data as i64
    }

    /// C: `attr.data_s64 = v`.
    pub fn set_data_s64(&mut self, v: i64) {
        self.data = v as u64;
    }
}

/// The header of `RDMA_VERBS_IOCTL` (kernel `struct ib_uverbs_ioctl_hdr`),
/// followed in memory by `num_attrs` attributes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_uverbs_ioctl_hdr {
    pub length: u16,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
    pub reserved1: u64,
    pub driver_id: u32,
    pub reserved2: u32,
    /// C: flexible array member `attrs[]`.
    pub attrs: [ib_uverbs_attr; 0],
}

/// `ibv_command_buffer.buffer_error` (bit 0 of `bits`).
pub const IBV_CMDB_BUFFER_ERROR: u8 = 1 << 0;
/// `ibv_command_buffer.fallback_require_ex` (bit 1 of `bits`).
pub const IBV_CMDB_FALLBACK_REQUIRE_EX: u8 = 1 << 1;
/// `ibv_command_buffer.fallback_ioctl_only` (bit 2 of `bits`).
pub const IBV_CMDB_FALLBACK_IOCTL_ONLY: u8 = 1 << 2;

/// A block of ioctl attributes, linked toward the frame that issues the
/// ioctl (a provider passes its own block as the `link` of the `ibv_cmd_*`
/// calls).  In C the array of blocks extends `hdr.attrs`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_command_buffer {
    pub next: *mut ibv_command_buffer,
    pub next_attr: *mut ib_uverbs_attr,
    pub last_attr: *mut ib_uverbs_attr,
    pub uhw_in_idx: u8,
    pub uhw_out_idx: u8,
    pub uhw_in_headroom_dwords: u8,
    pub uhw_out_headroom_dwords: u8,
    /// C: the bitfields `buffer_error:1`, `fallback_require_ex:1`,
    /// `fallback_ioctl_only:1` (bits 0, 1, 2: `IBV_CMDB_*`).
    pub bits: u8,
    pub hdr: ib_uverbs_ioctl_hdr,
}

impl ibv_command_buffer {
    pub fn buffer_error(&self) -> bool {
        self.bits & IBV_CMDB_BUFFER_ERROR != 0
    }
    pub fn fallback_require_ex(&self) -> bool {
        self.bits & IBV_CMDB_FALLBACK_REQUIRE_EX != 0
    }
    pub fn fallback_ioctl_only(&self) -> bool {
        self.bits & IBV_CMDB_FALLBACK_IOCTL_ONLY != 0
    }
    pub fn set_bit(&mut self, bit: u8, on: bool) {
        if on {
            self.bits |= bit;
        } else {
            self.bits &= !bit;
        }
    }
}

crate::verbs::impl_zeroed!(
    list_node,
    list_head,
    verbs_xrcd,
    verbs_srq,
    verbs_mr,
    verbs_qp,
    verbs_cq,
    verbs_flow_action,
    verbs_dm,
    verbs_counters,
    verbs_match_ent,
    verbs_sysfs_dev,
    verbs_device_ops,
    verbs_device,
    ibv_driver,
    verbs_context_ops,
    ib_uverbs_attr_data,
    ib_uverbs_attr,
    ib_uverbs_ioctl_hdr,
    ibv_command_buffer,
);
