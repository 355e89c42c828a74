//! The Linux kernel's RDMA user ABI (`/usr/include/rdma/`, linux-libc-dev
//! 6.1) as `#[repr(C)]` Rust: the commands written to `/dev/infiniband/uverbsN`
//! (`ib_user_verbs.h`), the ioctl interface (`rdma_user_ioctl_cmds.h`,
//! `ib_user_ioctl_verbs.h`, `ib_user_ioctl_cmds.h`), the RDMA netlink ids
//! (`rdma_netlink.h`) and the user ABI of the software providers rxe
//! (`rdma_user_rxe.h`) and siw (`siw-abi.h`).
//!
//! Names are the kernel's, struct for struct and field for field; C's enums
//! are plain constants.  Checked against the headers by
//! `tests/uverbs_layout.rs` (size, alignment, every field's offset and size,
//! every constant's value).
//!
//! How C constructs are carried over:
//! * A flexible array member at the end of a struct (`driver_data[]`,
//!   `wc[]`, `send_wr[]`, ...) is omitted; a comment names it.  Where the
//!   member raised the struct's alignment to 8 (an `__aligned_u64` array, or
//!   an array of structs that hold one), the struct is `align(8)` so that
//!   size and alignment stay those of C.  The payload follows the struct in
//!   the command buffer at `size_of::<T>()`.
//! * A union of two same-width integers (`ex` { `imm_data`,
//!   `invalidate_rkey` }, `ib_uverbs_attr`'s { `data`, `data_s64` }) is one
//!   integer field with the union's name (or the first member's name, for an
//!   anonymous union), plus accessors where the views differ.
//! * A union of different shapes is a Rust `union` (`ib_uverbs_send_wr::wr`).
//! * The anonymous `{ type, size, reserved }` struct that the flow specs
//!   overlay on their `hdr` is left out: use `hdr.type`.
//! * `__be16`/`__be32`/`__be64` are `u16`/`u32`/`u64` holding big-endian
//!   values (aliases from [`crate::verbs`]).
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use core::mem::size_of;

use crate::verbs::{__be16, __be32, __be64, impl_zeroed};

// ===========================================================================
// ib_user_verbs.h
// ===========================================================================

/// Increment this value if any changes that break userspace ABI
/// compatibility are made.
pub const IB_USER_VERBS_ABI_VERSION: u32 = 6;
pub const IB_USER_VERBS_CMD_THRESHOLD: u32 = 50;

// enum ib_uverbs_write_cmds
pub const IB_USER_VERBS_CMD_GET_CONTEXT: u32 = 0;
pub const IB_USER_VERBS_CMD_QUERY_DEVICE: u32 = 1;
pub const IB_USER_VERBS_CMD_QUERY_PORT: u32 = 2;
pub const IB_USER_VERBS_CMD_ALLOC_PD: u32 = 3;
pub const IB_USER_VERBS_CMD_DEALLOC_PD: u32 = 4;
pub const IB_USER_VERBS_CMD_CREATE_AH: u32 = 5;
pub const IB_USER_VERBS_CMD_MODIFY_AH: u32 = 6;
pub const IB_USER_VERBS_CMD_QUERY_AH: u32 = 7;
pub const IB_USER_VERBS_CMD_DESTROY_AH: u32 = 8;
pub const IB_USER_VERBS_CMD_REG_MR: u32 = 9;
pub const IB_USER_VERBS_CMD_REG_SMR: u32 = 10;
pub const IB_USER_VERBS_CMD_REREG_MR: u32 = 11;
pub const IB_USER_VERBS_CMD_QUERY_MR: u32 = 12;
pub const IB_USER_VERBS_CMD_DEREG_MR: u32 = 13;
pub const IB_USER_VERBS_CMD_ALLOC_MW: u32 = 14;
pub const IB_USER_VERBS_CMD_BIND_MW: u32 = 15;
pub const IB_USER_VERBS_CMD_DEALLOC_MW: u32 = 16;
pub const IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: u32 = 17;
pub const IB_USER_VERBS_CMD_CREATE_CQ: u32 = 18;
pub const IB_USER_VERBS_CMD_RESIZE_CQ: u32 = 19;
pub const IB_USER_VERBS_CMD_DESTROY_CQ: u32 = 20;
pub const IB_USER_VERBS_CMD_POLL_CQ: u32 = 21;
pub const IB_USER_VERBS_CMD_PEEK_CQ: u32 = 22;
pub const IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: u32 = 23;
pub const IB_USER_VERBS_CMD_CREATE_QP: u32 = 24;
pub const IB_USER_VERBS_CMD_QUERY_QP: u32 = 25;
pub const IB_USER_VERBS_CMD_MODIFY_QP: u32 = 26;
pub const IB_USER_VERBS_CMD_DESTROY_QP: u32 = 27;
pub const IB_USER_VERBS_CMD_POST_SEND: u32 = 28;
pub const IB_USER_VERBS_CMD_POST_RECV: u32 = 29;
pub const IB_USER_VERBS_CMD_ATTACH_MCAST: u32 = 30;
pub const IB_USER_VERBS_CMD_DETACH_MCAST: u32 = 31;
pub const IB_USER_VERBS_CMD_CREATE_SRQ: u32 = 32;
pub const IB_USER_VERBS_CMD_MODIFY_SRQ: u32 = 33;
pub const IB_USER_VERBS_CMD_QUERY_SRQ: u32 = 34;
pub const IB_USER_VERBS_CMD_DESTROY_SRQ: u32 = 35;
pub const IB_USER_VERBS_CMD_POST_SRQ_RECV: u32 = 36;
pub const IB_USER_VERBS_CMD_OPEN_XRCD: u32 = 37;
pub const IB_USER_VERBS_CMD_CLOSE_XRCD: u32 = 38;
pub const IB_USER_VERBS_CMD_CREATE_XSRQ: u32 = 39;
pub const IB_USER_VERBS_CMD_OPEN_QP: u32 = 40;

// Extended commands (sent with IB_USER_VERBS_CMD_FLAG_EXTENDED)
pub const IB_USER_VERBS_EX_CMD_QUERY_DEVICE: u32 = IB_USER_VERBS_CMD_QUERY_DEVICE;
pub const IB_USER_VERBS_EX_CMD_CREATE_CQ: u32 = IB_USER_VERBS_CMD_CREATE_CQ;
pub const IB_USER_VERBS_EX_CMD_CREATE_QP: u32 = IB_USER_VERBS_CMD_CREATE_QP;
pub const IB_USER_VERBS_EX_CMD_MODIFY_QP: u32 = IB_USER_VERBS_CMD_MODIFY_QP;
pub const IB_USER_VERBS_EX_CMD_CREATE_FLOW: u32 = IB_USER_VERBS_CMD_THRESHOLD;
pub const IB_USER_VERBS_EX_CMD_DESTROY_FLOW: u32 = 51;
pub const IB_USER_VERBS_EX_CMD_CREATE_WQ: u32 = 52;
pub const IB_USER_VERBS_EX_CMD_MODIFY_WQ: u32 = 53;
pub const IB_USER_VERBS_EX_CMD_DESTROY_WQ: u32 = 54;
pub const IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL: u32 = 55;
pub const IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL: u32 = 56;
pub const IB_USER_VERBS_EX_CMD_MODIFY_CQ: u32 = 57;

pub const IB_USER_VERBS_CMD_COMMAND_MASK: u32 = 0xff;
pub const IB_USER_VERBS_CMD_FLAG_EXTENDED: u32 = 0x8000_0000;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_async_event_desc {
    pub element: u64,
    /// enum ib_event_type
    pub event_type: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_comp_event_desc {
    pub cq_handle: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_cq_moderation_caps {
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub reserved: u32,
}

/// Starts every write() command; `in_words`/`out_words` count 32-bit words
/// (for extended commands, 8-byte words excluding the headers).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_cmd_hdr {
    pub command: u32,
    pub in_words: u16,
    pub out_words: u16,
}

/// Follows [`ib_uverbs_cmd_hdr`] in extended commands.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_cmd_hdr {
    pub response: u64,
    pub provider_in_words: u16,
    pub provider_out_words: u16,
    pub cmd_hdr_reserved: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_get_context {
    pub response: u64,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_get_context_resp {
    pub async_fd: u32,
    pub num_comp_vectors: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_device {
    pub response: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_device_resp {
    pub fw_ver: u64,
    pub node_guid: __be64,
    pub sys_image_guid: __be64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub reserved: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_query_device {
    pub comp_mask: u32,
    pub reserved: u32,
}

/// The anonymous `per_transport_caps` struct of [`ib_uverbs_odp_caps`].
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_odp_caps_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ib_uverbs_odp_caps_per_transport_caps,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_rss_caps {
    /// Bit `1 << qp_type` set for each supported `enum ib_qp_type`.
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_tm_caps {
    /// Max size of rendezvous request message
    pub max_rndv_hdr_size: u32,
    /// Max number of entries in tag matching list
    pub max_num_tags: u32,
    /// TM flags
    pub flags: u32,
    /// Max number of outstanding list operations
    pub max_ops: u32,
    /// Max number of SGE in tag matching entry
    pub max_sge: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_query_device_resp {
    pub base: ib_uverbs_query_device_resp,
    pub comp_mask: u32,
    pub response_length: u32,
    pub odp_caps: ib_uverbs_odp_caps,
    pub timestamp_mask: u64,
    /// in kHz
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_caps: ib_uverbs_rss_caps,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_caps: ib_uverbs_tm_caps,
    pub cq_moderation_caps: ib_uverbs_cq_moderation_caps,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_port {
    pub response: u64,
    pub port_num: u8,
    pub reserved: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_port_resp {
    /// see ib_uverbs_query_port_cap_flags
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    /// see ib_uverbs_query_port_flags
    pub flags: u8,
    pub reserved: u8,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_alloc_pd {
    pub response: u64,
}

/// Followed by `__u32 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_alloc_pd_resp {
    pub pd_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_dealloc_pd {
    pub pd_handle: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_open_xrcd {
    pub response: u64,
    pub fd: u32,
    pub oflags: u32,
}

/// Followed by `__u32 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_open_xrcd_resp {
    pub xrcd_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_close_xrcd {
    pub xrcd_handle: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_reg_mr {
    pub response: u64,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// Followed by `__u32 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_reg_mr_resp {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_rereg_mr {
    pub response: u64,
    pub mr_handle: u32,
    pub flags: u32,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_rereg_mr_resp {
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_dereg_mr {
    pub mr_handle: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_alloc_mw {
    pub response: u64,
    pub pd_handle: u32,
    pub mw_type: u8,
    pub reserved: [u8; 3],
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_alloc_mw_resp {
    pub mw_handle: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_dealloc_mw {
    pub mw_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_comp_channel {
    pub response: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_comp_channel_resp {
    pub fd: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_cq {
    pub response: u64,
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub reserved: u32,
}

// enum ib_uverbs_ex_create_cq_flags
pub const IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION: u32 = 1 << 0;
pub const IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN: u32 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_cq {
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub comp_mask: u32,
    /// bitmask of ib_uverbs_ex_create_cq_flags
    pub flags: u32,
    pub reserved: u32,
}

/// Followed by `__aligned_u64 driver_data[0]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_cq_resp {
    pub cq_handle: u32,
    pub cqe: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_cq_resp {
    pub base: ib_uverbs_create_cq_resp,
    pub comp_mask: u32,
    pub response_length: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_resize_cq {
    pub response: u64,
    pub cq_handle: u32,
    pub cqe: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_resize_cq_resp {
    pub cqe: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_poll_cq {
    pub response: u64,
    pub cq_handle: u32,
    pub ne: u32,
}

// enum ib_uverbs_wc_opcode
pub const IB_UVERBS_WC_SEND: u32 = 0;
pub const IB_UVERBS_WC_RDMA_WRITE: u32 = 1;
pub const IB_UVERBS_WC_RDMA_READ: u32 = 2;
pub const IB_UVERBS_WC_COMP_SWAP: u32 = 3;
pub const IB_UVERBS_WC_FETCH_ADD: u32 = 4;
pub const IB_UVERBS_WC_BIND_MW: u32 = 5;
pub const IB_UVERBS_WC_LOCAL_INV: u32 = 6;
pub const IB_UVERBS_WC_TSO: u32 = 7;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C: `union { __be32 imm_data; __u32 invalidate_rkey; } ex`.
    pub ex: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// Followed by `struct ib_uverbs_wc wc[]` (omitted; `count` entries).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_poll_cq_resp {
    pub count: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_req_notify_cq {
    pub cq_handle: u32,
    pub solicited_only: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_cq {
    pub response: u64,
    pub cq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_cq_resp {
    pub comp_events_reported: u32,
    pub async_events_reported: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,

    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,

    // ib_qp_cap
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,

    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_qp {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: u8,
    pub qp_type: u8,
    pub is_srq: u8,
    pub reserved: u8,
}

// enum ib_uverbs_create_qp_mask
pub const IB_UVERBS_CREATE_QP_MASK_IND_TABLE: u32 = 1 << 0;
pub const IB_UVERBS_CREATE_QP_SUP_COMP_MASK: u32 = IB_UVERBS_CREATE_QP_MASK_IND_TABLE;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_qp {
    pub user_handle: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: u8,
    pub qp_type: u8,
    pub is_srq: u8,
    pub reserved: u8,
    pub comp_mask: u32,
    pub create_flags: u32,
    pub rwq_ind_tbl_handle: u32,
    pub source_qpn: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_open_qp {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub qpn: u32,
    pub qp_type: u8,
    pub reserved: [u8; 7],
}

/// Also the response of open_qp.  Followed by `__u32 driver_data[0]`
/// (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_qp_resp {
    pub qp_handle: u32,
    pub qpn: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_qp_resp {
    pub base: ib_uverbs_create_qp_resp,
    pub comp_mask: u32,
    pub response_length: u32,
}

/// Must remain a multiple of 8 bytes to keep the alignment of the modify QP
/// parameters.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_qp_dest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_qp {
    pub response: u64,
    pub qp_handle: u32,
    pub attr_mask: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_qp_resp {
    pub dest: ib_uverbs_qp_dest,
    pub alt_dest: ib_uverbs_qp_dest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

/// Followed by `__aligned_u64 driver_data[0]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_modify_qp {
    pub dest: ib_uverbs_qp_dest,
    pub alt_dest: ib_uverbs_qp_dest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_modify_qp {
    pub base: ib_uverbs_modify_qp,
    pub rate_limit: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_modify_qp_resp {
    pub comp_mask: u32,
    pub response_length: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_qp {
    pub response: u64,
    pub qp_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_qp_resp {
    pub events_reported: u32,
}

/// Only documents the ABI (the kernel uses `ib_sge`, laid out the same).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

// enum ib_uverbs_wr_opcode
pub const IB_UVERBS_WR_RDMA_WRITE: u32 = 0;
pub const IB_UVERBS_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IB_UVERBS_WR_SEND: u32 = 2;
pub const IB_UVERBS_WR_SEND_WITH_IMM: u32 = 3;
pub const IB_UVERBS_WR_RDMA_READ: u32 = 4;
pub const IB_UVERBS_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const IB_UVERBS_WR_LOCAL_INV: u32 = 7;
pub const IB_UVERBS_WR_BIND_MW: u32 = 8;
pub const IB_UVERBS_WR_SEND_WITH_INV: u32 = 9;
pub const IB_UVERBS_WR_TSO: u32 = 10;
pub const IB_UVERBS_WR_RDMA_READ_WITH_INV: u32 = 11;
pub const IB_UVERBS_WR_MASKED_ATOMIC_CMP_AND_SWP: u32 = 12;
pub const IB_UVERBS_WR_MASKED_ATOMIC_FETCH_AND_ADD: u32 = 13;

/// `ib_uverbs_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// `ib_uverbs_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// `ib_uverbs_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_send_wr_ud {
    pub ah: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub reserved: u32,
}

/// The `wr` union of [`ib_uverbs_send_wr`].  `Default` is all zeroes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_uverbs_send_wr_wr {
    pub rdma: ib_uverbs_send_wr_rdma,
    pub atomic: ib_uverbs_send_wr_atomic,
    pub ud: ib_uverbs_send_wr_ud,
}
impl_zeroed!(ib_uverbs_send_wr_wr);

impl core::fmt::Debug for ib_uverbs_send_wr_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Which member is live depends on the opcode; print none.
        f.write_str("ib_uverbs_send_wr_wr { .. }")
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_send_wr {
    pub wr_id: u64,
    pub num_sge: u32,
    /// see enum ib_uverbs_wr_opcode
    pub opcode: u32,
    pub send_flags: u32,
    /// C: `union { __be32 imm_data; __u32 invalidate_rkey; } ex`.
    pub ex: u32,
    pub wr: ib_uverbs_send_wr_wr,
}

/// Followed by `struct ib_uverbs_send_wr send_wr[]` (omitted), then the
/// scatter/gather entries.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_send {
    pub response: u64,
    pub qp_handle: u32,
    pub wr_count: u32,
    pub sge_count: u32,
    pub wqe_size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_send_resp {
    pub bad_wr: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_recv_wr {
    pub wr_id: u64,
    pub num_sge: u32,
    pub reserved: u32,
}

/// Followed by `struct ib_uverbs_recv_wr recv_wr[]` (omitted), then the
/// scatter/gather entries.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_recv {
    pub response: u64,
    pub qp_handle: u32,
    pub wr_count: u32,
    pub sge_count: u32,
    pub wqe_size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_recv_resp {
    pub bad_wr: u32,
}

/// Followed by `struct ib_uverbs_recv_wr recv[]` (omitted), then the
/// scatter/gather entries.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_srq_recv {
    pub response: u64,
    pub srq_handle: u32,
    pub wr_count: u32,
    pub sge_count: u32,
    pub wqe_size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_post_srq_recv_resp {
    pub bad_wr: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_ah {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub reserved: u32,
    pub attr: ib_uverbs_ah_attr,
}

/// Followed by `__u32 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_ah_resp {
    pub ah_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_ah {
    pub ah_handle: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_attach_mcast {
    pub gid: [u8; 16],
    pub qp_handle: u32,
    pub mlid: u16,
    pub reserved: u16,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_detach_mcast {
    pub gid: [u8; 16],
    pub qp_handle: u32,
    pub mlid: u16,
    pub reserved: u16,
}

/// Followed by the spec (`__aligned_u64 flow_spec_data[0]`, omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_hdr {
    pub r#type: u32,
    pub size: u16,
    pub reserved: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_eth_filter {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ether_type: __be16,
    pub vlan_tag: __be16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_eth {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_eth_filter,
    pub mask: ib_uverbs_flow_eth_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_ipv4_filter {
    pub src_ip: __be32,
    pub dst_ip: __be32,
    pub proto: u8,
    pub tos: u8,
    pub ttl: u8,
    pub flags: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_ipv4 {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_ipv4_filter,
    pub mask: ib_uverbs_flow_ipv4_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_tcp_udp_filter {
    pub dst_port: __be16,
    pub src_port: __be16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_tcp_udp {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_tcp_udp_filter,
    pub mask: ib_uverbs_flow_tcp_udp_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_ipv6_filter {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub flow_label: __be32,
    pub next_hdr: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_ipv6 {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_ipv6_filter,
    pub mask: ib_uverbs_flow_ipv6_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_action_tag {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub tag_id: u32,
    pub reserved1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_action_drop {
    pub hdr: ib_uverbs_flow_spec_hdr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_action_handle {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub handle: u32,
    pub reserved1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_action_count {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub handle: u32,
    pub reserved1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_tunnel_filter {
    pub tunnel_id: __be32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_tunnel {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_tunnel_filter,
    pub mask: ib_uverbs_flow_tunnel_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_esp_filter {
    pub spi: u32,
    pub seq: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_esp {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_spec_esp_filter,
    pub mask: ib_uverbs_flow_spec_esp_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_gre_filter {
    /// Bits 0-15 at offset 0 of a GRE header: C, reserved, K, S, reserved,
    /// version.
    pub c_ks_res0_ver: __be16,
    pub protocol: __be16,
    pub key: __be32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_gre {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_gre_filter,
    pub mask: ib_uverbs_flow_gre_filter,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_mpls_filter {
    /// The whole MPLS label: label (0:19), traffic class (20:22), bottom of
    /// stack (23), TTL (24:31).
    pub label: __be32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_spec_mpls {
    pub hdr: ib_uverbs_flow_spec_hdr,
    pub val: ib_uverbs_flow_mpls_filter,
    pub mask: ib_uverbs_flow_mpls_filter,
}

/// Followed by `num_of_specs` specs (`struct ib_uverbs_flow_spec_hdr
/// flow_specs[]`, omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_attr {
    pub r#type: u32,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub reserved: [u8; 2],
    pub port: u8,
    pub flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_flow {
    pub comp_mask: u32,
    pub qp_handle: u32,
    pub flow_attr: ib_uverbs_flow_attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_flow_resp {
    pub comp_mask: u32,
    pub flow_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_flow {
    pub comp_mask: u32,
    pub flow_handle: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_srq {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_xsrq {
    pub response: u64,
    pub user_handle: u64,
    pub srq_type: u32,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub max_num_tags: u32,
    pub xrcd_handle: u32,
    pub cq_handle: u32,
}

/// Followed by `__u32 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_create_srq_resp {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srqn: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_modify_srq {
    pub srq_handle: u32,
    pub attr_mask: u32,
    pub max_wr: u32,
    pub srq_limit: u32,
}

/// Followed by `__aligned_u64 driver_data[]` (omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_srq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_srq_resp {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_srq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_destroy_srq_resp {
    pub events_reported: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_wq {
    pub comp_mask: u32,
    pub wq_type: u32,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub cq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    /// Use enum ib_wq_flags
    pub create_flags: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_wq_resp {
    pub comp_mask: u32,
    pub response_length: u32,
    pub wq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub wqn: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_destroy_wq {
    pub comp_mask: u32,
    pub wq_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_destroy_wq_resp {
    pub comp_mask: u32,
    pub response_length: u32,
    pub events_reported: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_modify_wq {
    pub attr_mask: u32,
    pub wq_handle: u32,
    pub wq_state: u32,
    pub curr_wq_state: u32,
    /// Use enum ib_wq_flags
    pub flags: u32,
    /// Use enum ib_wq_flags
    pub flags_mask: u32,
}

/// Prevent memory allocation rather than max expected size
pub const IB_USER_VERBS_MAX_LOG_IND_TBL_SIZE: u32 = 0x0d;

/// Followed by `1 << log_ind_tbl_size` WQ handles (`__u32 wq_handles[]`,
/// omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_rwq_ind_table {
    pub comp_mask: u32,
    pub log_ind_tbl_size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_create_rwq_ind_table_resp {
    pub comp_mask: u32,
    pub response_length: u32,
    pub ind_tbl_handle: u32,
    pub ind_tbl_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_destroy_rwq_ind_table {
    pub comp_mask: u32,
    pub ind_tbl_handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_cq_moderation {
    pub cq_count: u16,
    pub cq_period: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ex_modify_cq {
    pub cq_handle: u32,
    pub attr_mask: u32,
    pub attr: ib_uverbs_cq_moderation,
    pub reserved: u32,
}

pub const IB_DEVICE_NAME_MAX: u32 = 64;

// enum ib_uverbs_device_cap_flags.  Bits 9, 15, 16, 19, 22, 27, 30, 31, 32,
// 33, 35 and 37 may be set by old kernels and should not be used.
pub const IB_UVERBS_DEVICE_RESIZE_MAX_WR: u64 = 1 << 0;
pub const IB_UVERBS_DEVICE_BAD_PKEY_CNTR: u64 = 1 << 1;
pub const IB_UVERBS_DEVICE_BAD_QKEY_CNTR: u64 = 1 << 2;
pub const IB_UVERBS_DEVICE_RAW_MULTI: u64 = 1 << 3;
pub const IB_UVERBS_DEVICE_AUTO_PATH_MIG: u64 = 1 << 4;
pub const IB_UVERBS_DEVICE_CHANGE_PHY_PORT: u64 = 1 << 5;
pub const IB_UVERBS_DEVICE_UD_AV_PORT_ENFORCE: u64 = 1 << 6;
pub const IB_UVERBS_DEVICE_CURR_QP_STATE_MOD: u64 = 1 << 7;
pub const IB_UVERBS_DEVICE_SHUTDOWN_PORT: u64 = 1 << 8;
pub const IB_UVERBS_DEVICE_PORT_ACTIVE_EVENT: u64 = 1 << 10;
pub const IB_UVERBS_DEVICE_SYS_IMAGE_GUID: u64 = 1 << 11;
pub const IB_UVERBS_DEVICE_RC_RNR_NAK_GEN: u64 = 1 << 12;
pub const IB_UVERBS_DEVICE_SRQ_RESIZE: u64 = 1 << 13;
pub const IB_UVERBS_DEVICE_N_NOTIFY_CQ: u64 = 1 << 14;
pub const IB_UVERBS_DEVICE_MEM_WINDOW: u64 = 1 << 17;
pub const IB_UVERBS_DEVICE_UD_IP_CSUM: u64 = 1 << 18;
pub const IB_UVERBS_DEVICE_XRC: u64 = 1 << 20;
pub const IB_UVERBS_DEVICE_MEM_MGT_EXTENSIONS: u64 = 1 << 21;
pub const IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2A: u64 = 1 << 23;
pub const IB_UVERBS_DEVICE_MEM_WINDOW_TYPE_2B: u64 = 1 << 24;
pub const IB_UVERBS_DEVICE_RC_IP_CSUM: u64 = 1 << 25;
/// Deprecated. Please use IB_UVERBS_RAW_PACKET_CAP_IP_CSUM.
pub const IB_UVERBS_DEVICE_RAW_IP_CSUM: u64 = 1 << 26;
pub const IB_UVERBS_DEVICE_MANAGED_FLOW_STEERING: u64 = 1 << 29;
/// Deprecated. Please use IB_UVERBS_RAW_PACKET_CAP_SCATTER_FCS.
pub const IB_UVERBS_DEVICE_RAW_SCATTER_FCS: u64 = 1 << 34;
pub const IB_UVERBS_DEVICE_PCI_WRITE_END_PADDING: u64 = 1 << 36;

// enum ib_uverbs_raw_packet_caps
pub const IB_UVERBS_RAW_PACKET_CAP_CVLAN_STRIPPING: u32 = 1 << 0;
pub const IB_UVERBS_RAW_PACKET_CAP_SCATTER_FCS: u32 = 1 << 1;
pub const IB_UVERBS_RAW_PACKET_CAP_IP_CSUM: u32 = 1 << 2;
pub const IB_UVERBS_RAW_PACKET_CAP_DELAY_DROP: u32 = 1 << 3;

// ===========================================================================
// ib_user_ioctl_verbs.h
// ===========================================================================

pub const IB_UVERBS_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
pub const IB_UVERBS_ACCESS_OPTIONAL_LAST: u32 = 1 << 29;

// enum ib_uverbs_core_support
pub const IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS: u32 = 1 << 0;

// enum ib_uverbs_access_flags
pub const IB_UVERBS_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
pub const IB_UVERBS_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IB_UVERBS_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IB_UVERBS_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
pub const IB_UVERBS_ACCESS_MW_BIND: u32 = 1 << 4;
pub const IB_UVERBS_ACCESS_ZERO_BASED: u32 = 1 << 5;
pub const IB_UVERBS_ACCESS_ON_DEMAND: u32 = 1 << 6;
pub const IB_UVERBS_ACCESS_HUGETLB: u32 = 1 << 7;
pub const IB_UVERBS_ACCESS_RELAXED_ORDERING: u32 = IB_UVERBS_ACCESS_OPTIONAL_FIRST;
pub const IB_UVERBS_ACCESS_OPTIONAL_RANGE: u32 =
    ((IB_UVERBS_ACCESS_OPTIONAL_LAST << 1) - 1) & !(IB_UVERBS_ACCESS_OPTIONAL_FIRST - 1);

// enum ib_uverbs_srq_type
pub const IB_UVERBS_SRQT_BASIC: u32 = 0;
pub const IB_UVERBS_SRQT_XRC: u32 = 1;
pub const IB_UVERBS_SRQT_TM: u32 = 2;

// enum ib_uverbs_wq_type
pub const IB_UVERBS_WQT_RQ: u32 = 0;

// enum ib_uverbs_wq_flags
pub const IB_UVERBS_WQ_FLAGS_CVLAN_STRIPPING: u32 = 1 << 0;
pub const IB_UVERBS_WQ_FLAGS_SCATTER_FCS: u32 = 1 << 1;
pub const IB_UVERBS_WQ_FLAGS_DELAY_DROP: u32 = 1 << 2;
pub const IB_UVERBS_WQ_FLAGS_PCI_WRITE_END_PADDING: u32 = 1 << 3;

// enum ib_uverbs_qp_type
pub const IB_UVERBS_QPT_RC: u32 = 2;
pub const IB_UVERBS_QPT_UC: u32 = 3;
pub const IB_UVERBS_QPT_UD: u32 = 4;
pub const IB_UVERBS_QPT_RAW_PACKET: u32 = 8;
pub const IB_UVERBS_QPT_XRC_INI: u32 = 9;
pub const IB_UVERBS_QPT_XRC_TGT: u32 = 10;
pub const IB_UVERBS_QPT_DRIVER: u32 = 0xFF;

// enum ib_uverbs_qp_create_flags
pub const IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK: u32 = 1 << 1;
pub const IB_UVERBS_QP_CREATE_SCATTER_FCS: u32 = 1 << 8;
pub const IB_UVERBS_QP_CREATE_CVLAN_STRIPPING: u32 = 1 << 9;
pub const IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING: u32 = 1 << 11;
pub const IB_UVERBS_QP_CREATE_SQ_SIG_ALL: u32 = 1 << 12;

// enum ib_uverbs_query_port_cap_flags
pub const IB_UVERBS_PCF_SM: u32 = 1 << 1;
pub const IB_UVERBS_PCF_NOTICE_SUP: u32 = 1 << 2;
pub const IB_UVERBS_PCF_TRAP_SUP: u32 = 1 << 3;
pub const IB_UVERBS_PCF_OPT_IPD_SUP: u32 = 1 << 4;
pub const IB_UVERBS_PCF_AUTO_MIGR_SUP: u32 = 1 << 5;
pub const IB_UVERBS_PCF_SL_MAP_SUP: u32 = 1 << 6;
pub const IB_UVERBS_PCF_MKEY_NVRAM: u32 = 1 << 7;
pub const IB_UVERBS_PCF_PKEY_NVRAM: u32 = 1 << 8;
pub const IB_UVERBS_PCF_LED_INFO_SUP: u32 = 1 << 9;
pub const IB_UVERBS_PCF_SM_DISABLED: u32 = 1 << 10;
pub const IB_UVERBS_PCF_SYS_IMAGE_GUID_SUP: u32 = 1 << 11;
pub const IB_UVERBS_PCF_PKEY_SW_EXT_PORT_TRAP_SUP: u32 = 1 << 12;
pub const IB_UVERBS_PCF_EXTENDED_SPEEDS_SUP: u32 = 1 << 14;
pub const IB_UVERBS_PCF_CM_SUP: u32 = 1 << 16;
pub const IB_UVERBS_PCF_SNMP_TUNNEL_SUP: u32 = 1 << 17;
pub const IB_UVERBS_PCF_REINIT_SUP: u32 = 1 << 18;
pub const IB_UVERBS_PCF_DEVICE_MGMT_SUP: u32 = 1 << 19;
pub const IB_UVERBS_PCF_VENDOR_CLASS_SUP: u32 = 1 << 20;
pub const IB_UVERBS_PCF_DR_NOTICE_SUP: u32 = 1 << 21;
pub const IB_UVERBS_PCF_CAP_MASK_NOTICE_SUP: u32 = 1 << 22;
pub const IB_UVERBS_PCF_BOOT_MGMT_SUP: u32 = 1 << 23;
pub const IB_UVERBS_PCF_LINK_LATENCY_SUP: u32 = 1 << 24;
pub const IB_UVERBS_PCF_CLIENT_REG_SUP: u32 = 1 << 25;
pub const IB_UVERBS_PCF_LINK_SPEED_WIDTH_TABLE_SUP: u32 = 1 << 27;
pub const IB_UVERBS_PCF_VENDOR_SPECIFIC_MADS_TABLE_SUP: u32 = 1 << 28;
pub const IB_UVERBS_PCF_MCAST_PKEY_TRAP_SUPPRESSION_SUP: u32 = 1 << 29;
pub const IB_UVERBS_PCF_MCAST_FDB_TOP_SUP: u32 = 1 << 30;
pub const IB_UVERBS_PCF_HIERARCHY_INFO_SUP: u32 = 1 << 31;
/// An internal flag, not an IBA flag (aliases IsOtherLocalChangesNoticeSupported).
pub const IB_UVERBS_PCF_IP_BASED_GIDS: u32 = 1 << 26;

// enum ib_uverbs_query_port_flags
pub const IB_UVERBS_QPF_GRH_REQUIRED: u32 = 1 << 0;

// enum ib_uverbs_flow_action_esp_keymat
pub const IB_UVERBS_FLOW_ACTION_ESP_KEYMAT_AES_GCM: u32 = 0;

// enum ib_uverbs_flow_action_esp_keymat_aes_gcm_iv_algo
pub const IB_UVERBS_FLOW_ACTION_IV_ALGO_SEQ: u32 = 0;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_action_esp_keymat_aes_gcm {
    pub iv: u64,
    /// Use enum ib_uverbs_flow_action_esp_keymat_aes_gcm_iv_algo
    pub iv_algo: u32,
    pub salt: u32,
    pub icv_len: u32,
    pub key_len: u32,
    pub aes_key: [u32; 256 / 32],
}

// enum ib_uverbs_flow_action_esp_replay
pub const IB_UVERBS_FLOW_ACTION_ESP_REPLAY_NONE: u32 = 0;
pub const IB_UVERBS_FLOW_ACTION_ESP_REPLAY_BMP: u32 = 1;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_action_esp_replay_bmp {
    pub size: u32,
}

// enum ib_uverbs_flow_action_esp_flags
/// Default (C: `0UL << n`).
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_INLINE_CRYPTO: u32 = 0;
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_FULL_OFFLOAD: u32 = 1 << 0;
/// Default (C: `0UL << n`).
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TUNNEL: u32 = 0;
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TRANSPORT: u32 = 1 << 1;
/// Default (C: `0UL << n`).
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_DECRYPT: u32 = 0;
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT: u32 = 1 << 2;
pub const IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ESN_NEW_WINDOW: u32 = 1 << 3;

/// One element of a list of filters that encapsulate the payload in ESP
/// tunnel mode.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_action_esp_encap {
    /// `RDMA_UAPI_PTR(void *, val_ptr)`: a `flow_xxxx_filter`.
    pub val_ptr: u64,
    /// `RDMA_UAPI_PTR(struct ib_uverbs_flow_action_esp_encap *, next_ptr)`.
    pub next_ptr: u64,
    /// Length of the filter `val_ptr` points to.
    pub len: u16,
    /// Use flow_spec_type enum
    pub r#type: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_flow_action_esp {
    pub spi: u32,
    pub seq: u32,
    pub tfc_pad: u32,
    pub flags: u32,
    pub hard_limit_pkts: u64,
}

// enum ib_uverbs_read_counters_flags
/// Prefer read values from driver cache.
pub const IB_UVERBS_READ_COUNTERS_PREFER_CACHED: u32 = 1 << 0;

// enum ib_uverbs_advise_mr_advice
pub const IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH: u32 = 0;
pub const IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE: u32 = 1;
pub const IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: u32 = 2;

// enum ib_uverbs_advise_mr_flag
pub const IB_UVERBS_ADVISE_MR_FLAG_FLUSH: u32 = 1 << 0;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_query_port_resp_ex {
    pub legacy_resp: ib_uverbs_query_port_resp,
    pub port_cap_flags2: u16,
    pub reserved: [u8; 6],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

// enum rdma_driver_id
pub const RDMA_DRIVER_UNKNOWN: u32 = 0;
pub const RDMA_DRIVER_MLX5: u32 = 1;
pub const RDMA_DRIVER_MLX4: u32 = 2;
pub const RDMA_DRIVER_CXGB3: u32 = 3;
pub const RDMA_DRIVER_CXGB4: u32 = 4;
pub const RDMA_DRIVER_MTHCA: u32 = 5;
pub const RDMA_DRIVER_BNXT_RE: u32 = 6;
pub const RDMA_DRIVER_OCRDMA: u32 = 7;
pub const RDMA_DRIVER_NES: u32 = 8;
pub const RDMA_DRIVER_I40IW: u32 = 9;
pub const RDMA_DRIVER_IRDMA: u32 = RDMA_DRIVER_I40IW;
pub const RDMA_DRIVER_VMW_PVRDMA: u32 = 10;
pub const RDMA_DRIVER_QEDR: u32 = 11;
pub const RDMA_DRIVER_HNS: u32 = 12;
pub const RDMA_DRIVER_USNIC: u32 = 13;
pub const RDMA_DRIVER_RXE: u32 = 14;
pub const RDMA_DRIVER_HFI1: u32 = 15;
pub const RDMA_DRIVER_QIB: u32 = 16;
pub const RDMA_DRIVER_EFA: u32 = 17;
pub const RDMA_DRIVER_SIW: u32 = 18;
pub const RDMA_DRIVER_ERDMA: u32 = 19;

// enum ib_uverbs_gid_type
pub const IB_UVERBS_GID_TYPE_IB: u32 = 0;
pub const IB_UVERBS_GID_TYPE_ROCE_V1: u32 = 1;
pub const IB_UVERBS_GID_TYPE_ROCE_V2: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_gid_entry {
    pub gid: [u64; 2],
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    /// 0 if there is no netdev associated with it.
    pub netdev_ifindex: u32,
}

// ===========================================================================
// rdma_user_ioctl_cmds.h
// ===========================================================================

/// Documentation/userspace-api/ioctl/ioctl-number.rst
pub const RDMA_IOCTL_MAGIC: u32 = 0x1b;

/// Linux's generic `_IOC(dir, type, nr, size)` (asm-generic/ioctl.h).
const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// `_IOWR(RDMA_IOCTL_MAGIC, 1, struct ib_uverbs_ioctl_hdr)`; pass it to
/// `ioctl(2)` on the uverbs fd (cast to the libc request type).
pub const RDMA_VERBS_IOCTL: u32 = ioc(3, RDMA_IOCTL_MAGIC, 1, size_of::<ib_uverbs_ioctl_hdr>());

// `flags` of ib_uverbs_attr
/// User input.
pub const UVERBS_ATTR_F_MANDATORY: u16 = 1 << 0;
/// Kernel output; ignore it (consider it set) in mandatory attributes.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// One attribute of an ioctl command.
///
/// C's `attr_data` union (`struct { __u8 elem_id; __u8 reserved; }
/// enum_data` / `__u16 reserved`) is the `u16` `attr_data`, see
/// [`Self::elem_id`]; the anonymous union of `__aligned_u64 data` and
/// `__s64 data_s64` is `data`, see [`Self::data_s64`].
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_attr {
    /// command specific type attribute
    pub attr_id: u16,
    /// only for pointers and IDRs array
    pub len: u16,
    /// combination of UVERBS_ATTR_F_XXXX
    pub flags: u16,
    pub attr_data: u16,
    /// ptr to command, inline data, idr/fd or ptr to __u32 array of IDRs
    pub data: u64,
}

impl ib_uverbs_attr {
    /// `attr_data.enum_data.elem_id` (the union's first byte).
    pub const fn elem_id(&self) -> u8 {
        self.attr_data.to_ne_bytes()[0]
    }

    /// Sets `attr_data.enum_data.elem_id`, clearing `enum_data.reserved`.
    pub fn set_elem_id(&mut self, elem_id: u8) {
        self.attr_data = u16::from_ne_bytes([elem_id, 0]);
    }

    /// `data_s64` (used by FD_IN and FD_OUT).
    pub const fn data_s64(&self) -> i64 {
        self.data as i64
    }

    /// Sets `data_s64`.
    pub fn set_data_s64(&mut self, v: i64) {
        self.data = v as u64;
    }
}

/// The ioctl header.  Followed by `num_attrs` attributes (`struct
/// ib_uverbs_attr attrs[]`, omitted); `length` covers header and attributes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ioctl_hdr {
    pub length: u16,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
    pub reserved1: u64,
    pub driver_id: u32,
    pub reserved2: u32,
}

// ===========================================================================
// ib_user_ioctl_cmds.h
// ===========================================================================

pub const UVERBS_ID_NS_MASK: u16 = 0xF000;
pub const UVERBS_ID_NS_SHIFT: u16 = 12;

pub const UVERBS_UDATA_DRIVER_DATA_NS: u16 = 1;
pub const UVERBS_UDATA_DRIVER_DATA_FLAG: u16 = 1 << UVERBS_ID_NS_SHIFT;

// enum uverbs_default_objects
/// No instances of DEVICE are allowed.
pub const UVERBS_OBJECT_DEVICE: u16 = 0;
pub const UVERBS_OBJECT_PD: u16 = 1;
pub const UVERBS_OBJECT_COMP_CHANNEL: u16 = 2;
pub const UVERBS_OBJECT_CQ: u16 = 3;
pub const UVERBS_OBJECT_QP: u16 = 4;
pub const UVERBS_OBJECT_SRQ: u16 = 5;
pub const UVERBS_OBJECT_AH: u16 = 6;
pub const UVERBS_OBJECT_MR: u16 = 7;
pub const UVERBS_OBJECT_MW: u16 = 8;
pub const UVERBS_OBJECT_FLOW: u16 = 9;
pub const UVERBS_OBJECT_XRCD: u16 = 10;
pub const UVERBS_OBJECT_RWQ_IND_TBL: u16 = 11;
pub const UVERBS_OBJECT_WQ: u16 = 12;
pub const UVERBS_OBJECT_FLOW_ACTION: u16 = 13;
pub const UVERBS_OBJECT_DM: u16 = 14;
pub const UVERBS_OBJECT_COUNTERS: u16 = 15;
pub const UVERBS_OBJECT_ASYNC_EVENT: u16 = 16;

// Driver data in and out, any method
pub const UVERBS_ATTR_UHW_IN: u16 = UVERBS_UDATA_DRIVER_DATA_FLAG;
pub const UVERBS_ATTR_UHW_OUT: u16 = UVERBS_UDATA_DRIVER_DATA_FLAG + 1;

// enum uverbs_methods_device
pub const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
pub const UVERBS_METHOD_INFO_HANDLES: u16 = 1;
pub const UVERBS_METHOD_QUERY_PORT: u16 = 2;
pub const UVERBS_METHOD_GET_CONTEXT: u16 = 3;
pub const UVERBS_METHOD_QUERY_CONTEXT: u16 = 4;
pub const UVERBS_METHOD_QUERY_GID_TABLE: u16 = 5;
pub const UVERBS_METHOD_QUERY_GID_ENTRY: u16 = 6;

// enum uverbs_attrs_invoke_write_cmd_attr_ids
pub const UVERBS_ATTR_CORE_IN: u16 = 0;
pub const UVERBS_ATTR_CORE_OUT: u16 = 1;
pub const UVERBS_ATTR_WRITE_CMD: u16 = 2;

// enum uverbs_attrs_query_port_cmd_attr_ids
pub const UVERBS_ATTR_QUERY_PORT_PORT_NUM: u16 = 0;
pub const UVERBS_ATTR_QUERY_PORT_RESP: u16 = 1;

// enum uverbs_attrs_get_context_attr_ids
pub const UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
pub const UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT: u16 = 1;

// enum uverbs_attrs_query_context_attr_ids
pub const UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
pub const UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT: u16 = 1;

// enum uverbs_attrs_create_cq_cmd_attr_ids
pub const UVERBS_ATTR_CREATE_CQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_CREATE_CQ_CQE: u16 = 1;
pub const UVERBS_ATTR_CREATE_CQ_USER_HANDLE: u16 = 2;
pub const UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL: u16 = 3;
pub const UVERBS_ATTR_CREATE_CQ_COMP_VECTOR: u16 = 4;
pub const UVERBS_ATTR_CREATE_CQ_FLAGS: u16 = 5;
pub const UVERBS_ATTR_CREATE_CQ_RESP_CQE: u16 = 6;
pub const UVERBS_ATTR_CREATE_CQ_EVENT_FD: u16 = 7;

// enum uverbs_attrs_destroy_cq_cmd_attr_ids
pub const UVERBS_ATTR_DESTROY_CQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_DESTROY_CQ_RESP: u16 = 1;

// enum uverbs_attrs_create_flow_action_esp
pub const UVERBS_ATTR_CREATE_FLOW_ACTION_ESP_HANDLE: u16 = 0;
pub const UVERBS_ATTR_FLOW_ACTION_ESP_ATTRS: u16 = 1;
pub const UVERBS_ATTR_FLOW_ACTION_ESP_ESN: u16 = 2;
pub const UVERBS_ATTR_FLOW_ACTION_ESP_KEYMAT: u16 = 3;
pub const UVERBS_ATTR_FLOW_ACTION_ESP_REPLAY: u16 = 4;
pub const UVERBS_ATTR_FLOW_ACTION_ESP_ENCAP: u16 = 5;

// enum uverbs_attrs_modify_flow_action_esp
pub const UVERBS_ATTR_MODIFY_FLOW_ACTION_ESP_HANDLE: u16 =
    UVERBS_ATTR_CREATE_FLOW_ACTION_ESP_HANDLE;

// enum uverbs_attrs_destroy_flow_action_esp
pub const UVERBS_ATTR_DESTROY_FLOW_ACTION_HANDLE: u16 = 0;

// enum uverbs_attrs_create_qp_cmd_attr_ids
pub const UVERBS_ATTR_CREATE_QP_HANDLE: u16 = 0;
pub const UVERBS_ATTR_CREATE_QP_XRCD_HANDLE: u16 = 1;
pub const UVERBS_ATTR_CREATE_QP_PD_HANDLE: u16 = 2;
pub const UVERBS_ATTR_CREATE_QP_SRQ_HANDLE: u16 = 3;
pub const UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE: u16 = 4;
pub const UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE: u16 = 5;
pub const UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE: u16 = 6;
pub const UVERBS_ATTR_CREATE_QP_USER_HANDLE: u16 = 7;
pub const UVERBS_ATTR_CREATE_QP_CAP: u16 = 8;
pub const UVERBS_ATTR_CREATE_QP_TYPE: u16 = 9;
pub const UVERBS_ATTR_CREATE_QP_FLAGS: u16 = 10;
pub const UVERBS_ATTR_CREATE_QP_SOURCE_QPN: u16 = 11;
pub const UVERBS_ATTR_CREATE_QP_EVENT_FD: u16 = 12;
pub const UVERBS_ATTR_CREATE_QP_RESP_CAP: u16 = 13;
pub const UVERBS_ATTR_CREATE_QP_RESP_QP_NUM: u16 = 14;

// enum uverbs_attrs_destroy_qp_cmd_attr_ids
pub const UVERBS_ATTR_DESTROY_QP_HANDLE: u16 = 0;
pub const UVERBS_ATTR_DESTROY_QP_RESP: u16 = 1;

// enum uverbs_methods_qp
pub const UVERBS_METHOD_QP_CREATE: u16 = 0;
pub const UVERBS_METHOD_QP_DESTROY: u16 = 1;

// enum uverbs_attrs_create_srq_cmd_attr_ids
pub const UVERBS_ATTR_CREATE_SRQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_CREATE_SRQ_PD_HANDLE: u16 = 1;
pub const UVERBS_ATTR_CREATE_SRQ_XRCD_HANDLE: u16 = 2;
pub const UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE: u16 = 3;
pub const UVERBS_ATTR_CREATE_SRQ_USER_HANDLE: u16 = 4;
pub const UVERBS_ATTR_CREATE_SRQ_MAX_WR: u16 = 5;
pub const UVERBS_ATTR_CREATE_SRQ_MAX_SGE: u16 = 6;
pub const UVERBS_ATTR_CREATE_SRQ_LIMIT: u16 = 7;
pub const UVERBS_ATTR_CREATE_SRQ_MAX_NUM_TAGS: u16 = 8;
pub const UVERBS_ATTR_CREATE_SRQ_TYPE: u16 = 9;
pub const UVERBS_ATTR_CREATE_SRQ_EVENT_FD: u16 = 10;
pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR: u16 = 11;
pub const UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE: u16 = 12;
pub const UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM: u16 = 13;

// enum uverbs_attrs_destroy_srq_cmd_attr_ids
pub const UVERBS_ATTR_DESTROY_SRQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_DESTROY_SRQ_RESP: u16 = 1;

// enum uverbs_methods_srq
pub const UVERBS_METHOD_SRQ_CREATE: u16 = 0;
pub const UVERBS_METHOD_SRQ_DESTROY: u16 = 1;

// enum uverbs_methods_cq
pub const UVERBS_METHOD_CQ_CREATE: u16 = 0;
pub const UVERBS_METHOD_CQ_DESTROY: u16 = 1;

// enum uverbs_attrs_create_wq_cmd_attr_ids
pub const UVERBS_ATTR_CREATE_WQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_CREATE_WQ_PD_HANDLE: u16 = 1;
pub const UVERBS_ATTR_CREATE_WQ_CQ_HANDLE: u16 = 2;
pub const UVERBS_ATTR_CREATE_WQ_USER_HANDLE: u16 = 3;
pub const UVERBS_ATTR_CREATE_WQ_TYPE: u16 = 4;
pub const UVERBS_ATTR_CREATE_WQ_EVENT_FD: u16 = 5;
pub const UVERBS_ATTR_CREATE_WQ_MAX_WR: u16 = 6;
pub const UVERBS_ATTR_CREATE_WQ_MAX_SGE: u16 = 7;
pub const UVERBS_ATTR_CREATE_WQ_FLAGS: u16 = 8;
pub const UVERBS_ATTR_CREATE_WQ_RESP_MAX_WR: u16 = 9;
pub const UVERBS_ATTR_CREATE_WQ_RESP_MAX_SGE: u16 = 10;
pub const UVERBS_ATTR_CREATE_WQ_RESP_WQ_NUM: u16 = 11;

// enum uverbs_attrs_destroy_wq_cmd_attr_ids
pub const UVERBS_ATTR_DESTROY_WQ_HANDLE: u16 = 0;
pub const UVERBS_ATTR_DESTROY_WQ_RESP: u16 = 1;

// enum uverbs_methods_wq
pub const UVERBS_METHOD_WQ_CREATE: u16 = 0;
pub const UVERBS_METHOD_WQ_DESTROY: u16 = 1;

// enum uverbs_methods_actions_flow_action_ops
pub const UVERBS_METHOD_FLOW_ACTION_ESP_CREATE: u16 = 0;
pub const UVERBS_METHOD_FLOW_ACTION_DESTROY: u16 = 1;
pub const UVERBS_METHOD_FLOW_ACTION_ESP_MODIFY: u16 = 2;

// enum uverbs_attrs_alloc_dm_cmd_attr_ids
pub const UVERBS_ATTR_ALLOC_DM_HANDLE: u16 = 0;
pub const UVERBS_ATTR_ALLOC_DM_LENGTH: u16 = 1;
pub const UVERBS_ATTR_ALLOC_DM_ALIGNMENT: u16 = 2;

// enum uverbs_attrs_free_dm_cmd_attr_ids
pub const UVERBS_ATTR_FREE_DM_HANDLE: u16 = 0;

// enum uverbs_methods_dm
pub const UVERBS_METHOD_DM_ALLOC: u16 = 0;
pub const UVERBS_METHOD_DM_FREE: u16 = 1;

// enum uverbs_attrs_reg_dm_mr_cmd_attr_ids
pub const UVERBS_ATTR_REG_DM_MR_HANDLE: u16 = 0;
pub const UVERBS_ATTR_REG_DM_MR_OFFSET: u16 = 1;
pub const UVERBS_ATTR_REG_DM_MR_LENGTH: u16 = 2;
pub const UVERBS_ATTR_REG_DM_MR_PD_HANDLE: u16 = 3;
pub const UVERBS_ATTR_REG_DM_MR_ACCESS_FLAGS: u16 = 4;
pub const UVERBS_ATTR_REG_DM_MR_DM_HANDLE: u16 = 5;
pub const UVERBS_ATTR_REG_DM_MR_RESP_LKEY: u16 = 6;
pub const UVERBS_ATTR_REG_DM_MR_RESP_RKEY: u16 = 7;

// enum uverbs_methods_mr
pub const UVERBS_METHOD_DM_MR_REG: u16 = 0;
pub const UVERBS_METHOD_MR_DESTROY: u16 = 1;
pub const UVERBS_METHOD_ADVISE_MR: u16 = 2;
pub const UVERBS_METHOD_QUERY_MR: u16 = 3;
pub const UVERBS_METHOD_REG_DMABUF_MR: u16 = 4;

// enum uverbs_attrs_mr_destroy_ids
pub const UVERBS_ATTR_DESTROY_MR_HANDLE: u16 = 0;

// enum uverbs_attrs_advise_mr_cmd_attr_ids
pub const UVERBS_ATTR_ADVISE_MR_PD_HANDLE: u16 = 0;
pub const UVERBS_ATTR_ADVISE_MR_ADVICE: u16 = 1;
pub const UVERBS_ATTR_ADVISE_MR_FLAGS: u16 = 2;
pub const UVERBS_ATTR_ADVISE_MR_SGE_LIST: u16 = 3;

// enum uverbs_attrs_query_mr_cmd_attr_ids
pub const UVERBS_ATTR_QUERY_MR_HANDLE: u16 = 0;
pub const UVERBS_ATTR_QUERY_MR_RESP_LKEY: u16 = 1;
pub const UVERBS_ATTR_QUERY_MR_RESP_RKEY: u16 = 2;
pub const UVERBS_ATTR_QUERY_MR_RESP_LENGTH: u16 = 3;
pub const UVERBS_ATTR_QUERY_MR_RESP_IOVA: u16 = 4;

// enum uverbs_attrs_reg_dmabuf_mr_cmd_attr_ids
pub const UVERBS_ATTR_REG_DMABUF_MR_HANDLE: u16 = 0;
pub const UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE: u16 = 1;
pub const UVERBS_ATTR_REG_DMABUF_MR_OFFSET: u16 = 2;
pub const UVERBS_ATTR_REG_DMABUF_MR_LENGTH: u16 = 3;
pub const UVERBS_ATTR_REG_DMABUF_MR_IOVA: u16 = 4;
pub const UVERBS_ATTR_REG_DMABUF_MR_FD: u16 = 5;
pub const UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS: u16 = 6;
pub const UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY: u16 = 7;
pub const UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY: u16 = 8;

// enum uverbs_attrs_create_counters_cmd_attr_ids
pub const UVERBS_ATTR_CREATE_COUNTERS_HANDLE: u16 = 0;

// enum uverbs_attrs_destroy_counters_cmd_attr_ids
pub const UVERBS_ATTR_DESTROY_COUNTERS_HANDLE: u16 = 0;

// enum uverbs_attrs_read_counters_cmd_attr_ids
pub const UVERBS_ATTR_READ_COUNTERS_HANDLE: u16 = 0;
pub const UVERBS_ATTR_READ_COUNTERS_BUFF: u16 = 1;
pub const UVERBS_ATTR_READ_COUNTERS_FLAGS: u16 = 2;

// enum uverbs_methods_actions_counters_ops
pub const UVERBS_METHOD_COUNTERS_CREATE: u16 = 0;
pub const UVERBS_METHOD_COUNTERS_DESTROY: u16 = 1;
pub const UVERBS_METHOD_COUNTERS_READ: u16 = 2;

// enum uverbs_attrs_info_handles_id
pub const UVERBS_ATTR_INFO_OBJECT_ID: u16 = 0;
pub const UVERBS_ATTR_INFO_TOTAL_HANDLES: u16 = 1;
pub const UVERBS_ATTR_INFO_HANDLES_LIST: u16 = 2;

// enum uverbs_methods_pd
pub const UVERBS_METHOD_PD_DESTROY: u16 = 0;

// enum uverbs_attrs_pd_destroy_ids
pub const UVERBS_ATTR_DESTROY_PD_HANDLE: u16 = 0;

// enum uverbs_methods_mw
pub const UVERBS_METHOD_MW_DESTROY: u16 = 0;

// enum uverbs_attrs_mw_destroy_ids
pub const UVERBS_ATTR_DESTROY_MW_HANDLE: u16 = 0;

// enum uverbs_methods_xrcd
pub const UVERBS_METHOD_XRCD_DESTROY: u16 = 0;

// enum uverbs_attrs_xrcd_destroy_ids
pub const UVERBS_ATTR_DESTROY_XRCD_HANDLE: u16 = 0;

// enum uverbs_methods_ah
pub const UVERBS_METHOD_AH_DESTROY: u16 = 0;

// enum uverbs_attrs_ah_destroy_ids
pub const UVERBS_ATTR_DESTROY_AH_HANDLE: u16 = 0;

// enum uverbs_methods_rwq_ind_tbl
pub const UVERBS_METHOD_RWQ_IND_TBL_DESTROY: u16 = 0;

// enum uverbs_attrs_rwq_ind_tbl_destroy_ids
pub const UVERBS_ATTR_DESTROY_RWQ_IND_TBL_HANDLE: u16 = 0;

// enum uverbs_methods_flow
pub const UVERBS_METHOD_FLOW_DESTROY: u16 = 0;

// enum uverbs_attrs_flow_destroy_ids
pub const UVERBS_ATTR_DESTROY_FLOW_HANDLE: u16 = 0;

// enum uverbs_method_async_event
pub const UVERBS_METHOD_ASYNC_EVENT_ALLOC: u16 = 0;

// enum uverbs_attrs_async_event_create
pub const UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE: u16 = 0;

// enum uverbs_attrs_query_gid_table_cmd_attr_ids
pub const UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE: u16 = 0;
pub const UVERBS_ATTR_QUERY_GID_TABLE_FLAGS: u16 = 1;
pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES: u16 = 2;
pub const UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES: u16 = 3;

// enum uverbs_attrs_query_gid_entry_cmd_attr_ids
pub const UVERBS_ATTR_QUERY_GID_ENTRY_PORT: u16 = 0;
pub const UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX: u16 = 1;
pub const UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS: u16 = 2;
pub const UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY: u16 = 3;

// ===========================================================================
// rdma_netlink.h (and NETLINK_RDMA from linux/netlink.h)
// ===========================================================================

/// The netlink protocol of RDMA (`socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA)`).
pub const NETLINK_RDMA: i32 = 20;

// Netlink clients (the high bits of nlmsg_type)
pub const RDMA_NL_IWCM: u16 = 2;
pub const RDMA_NL_RSVD: u16 = 3;
/// RDMA Local Services
pub const RDMA_NL_LS: u16 = 4;
/// RDMA device interface
pub const RDMA_NL_NLDEV: u16 = 5;
pub const RDMA_NL_NUM_CLIENTS: u16 = 6;

// Multicast groups
pub const RDMA_NL_GROUP_IWPM: u32 = 2;
pub const RDMA_NL_GROUP_LS: u32 = 3;
pub const RDMA_NL_NUM_GROUPS: u32 = 4;

/// The client of an `nlmsg_type` (C macro `RDMA_NL_GET_CLIENT`).
pub const fn RDMA_NL_GET_CLIENT(r#type: u16) -> u16 {
    (r#type & (((1 << 6) - 1) << 10)) >> 10
}

/// The operation of an `nlmsg_type` (C macro `RDMA_NL_GET_OP`).
pub const fn RDMA_NL_GET_OP(r#type: u16) -> u16 {
    r#type & ((1 << 10) - 1)
}

/// The `nlmsg_type` of operation `op` of `client` (C macro
/// `RDMA_NL_GET_TYPE`), e.g. `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV,
/// RDMA_NLDEV_CMD_GET)`.
pub const fn RDMA_NL_GET_TYPE(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// The minimum version that the iwpm kernel supports
pub const IWPM_UABI_VERSION_MIN: u32 = 3;
/// The latest version that the iwpm kernel supports
pub const IWPM_UABI_VERSION: u32 = 4;

// iwarp port mapper message flags
/// Do not map the port for this IWPM request
pub const IWPM_FLAGS_NO_PORT_MAP: u16 = 1 << 0;

// iwarp port mapper op-codes
pub const RDMA_NL_IWPM_REG_PID: u16 = 0;
pub const RDMA_NL_IWPM_ADD_MAPPING: u16 = 1;
pub const RDMA_NL_IWPM_QUERY_MAPPING: u16 = 2;
pub const RDMA_NL_IWPM_REMOVE_MAPPING: u16 = 3;
pub const RDMA_NL_IWPM_REMOTE_INFO: u16 = 4;
pub const RDMA_NL_IWPM_HANDLE_ERR: u16 = 5;
pub const RDMA_NL_IWPM_MAPINFO: u16 = 6;
pub const RDMA_NL_IWPM_MAPINFO_NUM: u16 = 7;
pub const RDMA_NL_IWPM_HELLO: u16 = 8;
pub const RDMA_NL_IWPM_NUM_OPS: u16 = 9;

pub const IWPM_NLA_REG_PID_UNSPEC: u16 = 0;
pub const IWPM_NLA_REG_PID_SEQ: u16 = 1;
pub const IWPM_NLA_REG_IF_NAME: u16 = 2;
pub const IWPM_NLA_REG_IBDEV_NAME: u16 = 3;
pub const IWPM_NLA_REG_ULIB_NAME: u16 = 4;
pub const IWPM_NLA_REG_PID_MAX: u16 = 5;

pub const IWPM_NLA_RREG_PID_UNSPEC: u16 = 0;
pub const IWPM_NLA_RREG_PID_SEQ: u16 = 1;
pub const IWPM_NLA_RREG_IBDEV_NAME: u16 = 2;
pub const IWPM_NLA_RREG_ULIB_NAME: u16 = 3;
pub const IWPM_NLA_RREG_ULIB_VER: u16 = 4;
pub const IWPM_NLA_RREG_PID_ERR: u16 = 5;
pub const IWPM_NLA_RREG_PID_MAX: u16 = 6;

pub const IWPM_NLA_MANAGE_MAPPING_UNSPEC: u16 = 0;
pub const IWPM_NLA_MANAGE_MAPPING_SEQ: u16 = 1;
pub const IWPM_NLA_MANAGE_ADDR: u16 = 2;
pub const IWPM_NLA_MANAGE_FLAGS: u16 = 3;
pub const IWPM_NLA_MANAGE_MAPPING_MAX: u16 = 4;

pub const IWPM_NLA_RMANAGE_MAPPING_UNSPEC: u16 = 0;
pub const IWPM_NLA_RMANAGE_MAPPING_SEQ: u16 = 1;
pub const IWPM_NLA_RMANAGE_ADDR: u16 = 2;
pub const IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR: u16 = 3;
pub const IWPM_NLA_MANAGE_MAPPED_LOC_ADDR: u16 = IWPM_NLA_RMANAGE_MAPPED_LOC_ADDR;
pub const IWPM_NLA_RMANAGE_MAPPING_ERR: u16 = 4;
pub const IWPM_NLA_RMANAGE_MAPPING_MAX: u16 = 5;

pub const IWPM_NLA_MAPINFO_SEND_MAX: u16 = 3;
pub const IWPM_NLA_REMOVE_MAPPING_MAX: u16 = 3;

pub const IWPM_NLA_QUERY_MAPPING_UNSPEC: u16 = 0;
pub const IWPM_NLA_QUERY_MAPPING_SEQ: u16 = 1;
pub const IWPM_NLA_QUERY_LOCAL_ADDR: u16 = 2;
pub const IWPM_NLA_QUERY_REMOTE_ADDR: u16 = 3;
pub const IWPM_NLA_QUERY_FLAGS: u16 = 4;
pub const IWPM_NLA_QUERY_MAPPING_MAX: u16 = 5;

pub const IWPM_NLA_RQUERY_MAPPING_UNSPEC: u16 = 0;
pub const IWPM_NLA_RQUERY_MAPPING_SEQ: u16 = 1;
pub const IWPM_NLA_RQUERY_LOCAL_ADDR: u16 = 2;
pub const IWPM_NLA_RQUERY_REMOTE_ADDR: u16 = 3;
pub const IWPM_NLA_RQUERY_MAPPED_LOC_ADDR: u16 = 4;
pub const IWPM_NLA_RQUERY_MAPPED_REM_ADDR: u16 = 5;
pub const IWPM_NLA_RQUERY_MAPPING_ERR: u16 = 6;
pub const IWPM_NLA_RQUERY_MAPPING_MAX: u16 = 7;

pub const IWPM_NLA_MAPINFO_REQ_UNSPEC: u16 = 0;
pub const IWPM_NLA_MAPINFO_ULIB_NAME: u16 = 1;
pub const IWPM_NLA_MAPINFO_ULIB_VER: u16 = 2;
pub const IWPM_NLA_MAPINFO_REQ_MAX: u16 = 3;

pub const IWPM_NLA_MAPINFO_UNSPEC: u16 = 0;
pub const IWPM_NLA_MAPINFO_LOCAL_ADDR: u16 = 1;
pub const IWPM_NLA_MAPINFO_MAPPED_ADDR: u16 = 2;
pub const IWPM_NLA_MAPINFO_FLAGS: u16 = 3;
pub const IWPM_NLA_MAPINFO_MAX: u16 = 4;

pub const IWPM_NLA_MAPINFO_NUM_UNSPEC: u16 = 0;
pub const IWPM_NLA_MAPINFO_SEQ: u16 = 1;
pub const IWPM_NLA_MAPINFO_SEND_NUM: u16 = 2;
pub const IWPM_NLA_MAPINFO_ACK_NUM: u16 = 3;
pub const IWPM_NLA_MAPINFO_NUM_MAX: u16 = 4;

pub const IWPM_NLA_ERR_UNSPEC: u16 = 0;
pub const IWPM_NLA_ERR_SEQ: u16 = 1;
pub const IWPM_NLA_ERR_CODE: u16 = 2;
pub const IWPM_NLA_ERR_MAX: u16 = 3;

pub const IWPM_NLA_HELLO_UNSPEC: u16 = 0;
pub const IWPM_NLA_HELLO_ABI_VERSION: u16 = 1;
pub const IWPM_NLA_HELLO_MAX: u16 = 2;

// For RDMA_NLDEV_ATTR_DEV_NODE_TYPE; IB values map to NodeInfo:NodeType.
pub const RDMA_NODE_IB_CA: u8 = 1;
pub const RDMA_NODE_IB_SWITCH: u8 = 2;
pub const RDMA_NODE_IB_ROUTER: u8 = 3;
pub const RDMA_NODE_RNIC: u8 = 4;
pub const RDMA_NODE_USNIC: u8 = 5;
pub const RDMA_NODE_USNIC_UDP: u8 = 6;
pub const RDMA_NODE_UNSPECIFIED: u8 = 7;

// Local service operations: RESOLVE - the client requests the local service
// to resolve a path; SET_TIMEOUT - the local service requests the client to
// set the timeout; IP_RESOLVE - the client requests the local service to
// resolve an IP to GID.
pub const RDMA_NL_LS_OP_RESOLVE: u16 = 0;
pub const RDMA_NL_LS_OP_SET_TIMEOUT: u16 = 1;
pub const RDMA_NL_LS_OP_IP_RESOLVE: u16 = 2;
pub const RDMA_NL_LS_NUM_OPS: u16 = 3;

/// Local service netlink message flag: failed response
pub const RDMA_NL_LS_F_ERR: u16 = 0x0100;

// Local service path use: ALL - connected CM operation (6 pathrecords);
// UNIDIRECTIONAL - unidirectional UD (1 pathrecord); GMP - miscellaneous GMP
// like operation (at least 1 reversible pathrecord).
pub const LS_RESOLVE_PATH_USE_ALL: u8 = 0;
pub const LS_RESOLVE_PATH_USE_UNIDIRECTIONAL: u8 = 1;
pub const LS_RESOLVE_PATH_USE_GMP: u8 = 2;
pub const LS_RESOLVE_PATH_USE_MAX: u8 = 3;

pub const LS_DEVICE_NAME_MAX: usize = 64;

/// Local service resolve operation family header (nlmsg header, this,
/// attributes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ls_resolve_header {
    pub device_name: [u8; LS_DEVICE_NAME_MAX],
    pub port_num: u8,
    pub path_use: u8,
}
impl_zeroed!(rdma_ls_resolve_header);

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ls_ip_resolve_header {
    pub ifindex: u32,
}

// Local service attribute type
pub const RDMA_NLA_F_MANDATORY: u16 = 1 << 13;
/// `~(NLA_F_NESTED | NLA_F_NET_BYTEORDER | RDMA_NLA_F_MANDATORY)`, as the
/// 16-bit `nla_type` it masks (C: an `int`, all high bits set).
pub const RDMA_NLA_TYPE_MASK: u16 = !((1 << 15) | (1 << 14) | RDMA_NLA_F_MANDATORY);

// Local service attributes: PATH_RECORD (struct ib_path_rec_data), TIMEOUT
// (u32, cpu), SERVICE_ID (u64, cpu), DGID/SGID (u8[16], BE), TCLASS (u8),
// PKEY/QOS_CLASS (u16, cpu), IPV4 (u32, BE), IPV6 (u8[16], BE).
pub const LS_NLA_TYPE_UNSPEC: u16 = 0;
pub const LS_NLA_TYPE_PATH_RECORD: u16 = 1;
pub const LS_NLA_TYPE_TIMEOUT: u16 = 2;
pub const LS_NLA_TYPE_SERVICE_ID: u16 = 3;
pub const LS_NLA_TYPE_DGID: u16 = 4;
pub const LS_NLA_TYPE_SGID: u16 = 5;
pub const LS_NLA_TYPE_TCLASS: u16 = 6;
pub const LS_NLA_TYPE_PKEY: u16 = 7;
pub const LS_NLA_TYPE_QOS_CLASS: u16 = 8;
pub const LS_NLA_TYPE_IPV4: u16 = 9;
pub const LS_NLA_TYPE_IPV6: u16 = 10;
pub const LS_NLA_TYPE_MAX: u16 = 11;

/// Local service DGID/SGID attribute: big endian
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_nla_ls_gid {
    pub gid: [u8; 16],
}

// enum rdma_nldev_command
pub const RDMA_NLDEV_CMD_UNSPEC: u16 = 0;
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
pub const RDMA_NLDEV_CMD_SET: u16 = 2;
pub const RDMA_NLDEV_CMD_NEWLINK: u16 = 3;
pub const RDMA_NLDEV_CMD_DELLINK: u16 = 4;
pub const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;
pub const RDMA_NLDEV_CMD_RES_GET: u16 = 9;
pub const RDMA_NLDEV_CMD_RES_QP_GET: u16 = 10;
pub const RDMA_NLDEV_CMD_RES_CM_ID_GET: u16 = 11;
pub const RDMA_NLDEV_CMD_RES_CQ_GET: u16 = 12;
pub const RDMA_NLDEV_CMD_RES_MR_GET: u16 = 13;
pub const RDMA_NLDEV_CMD_RES_PD_GET: u16 = 14;
pub const RDMA_NLDEV_CMD_GET_CHARDEV: u16 = 15;
pub const RDMA_NLDEV_CMD_STAT_SET: u16 = 16;
pub const RDMA_NLDEV_CMD_STAT_GET: u16 = 17;
pub const RDMA_NLDEV_CMD_STAT_DEL: u16 = 18;
pub const RDMA_NLDEV_CMD_RES_QP_GET_RAW: u16 = 19;
pub const RDMA_NLDEV_CMD_RES_CQ_GET_RAW: u16 = 20;
pub const RDMA_NLDEV_CMD_RES_MR_GET_RAW: u16 = 21;
pub const RDMA_NLDEV_CMD_RES_CTX_GET: u16 = 22;
pub const RDMA_NLDEV_CMD_RES_SRQ_GET: u16 = 23;
pub const RDMA_NLDEV_CMD_STAT_GET_STATUS: u16 = 24;
pub const RDMA_NLDEV_NUM_OPS: u16 = 25;

// enum rdma_nldev_print_type
pub const RDMA_NLDEV_PRINT_TYPE_UNSPEC: u8 = 0;
pub const RDMA_NLDEV_PRINT_TYPE_HEX: u8 = 1;

// enum rdma_nldev_attr: don't change the order or add anything between, this is ABI!
// The comments give each attribute's payload.
pub const RDMA_NLDEV_ATTR_UNSPEC: u16 = 0;
pub const RDMA_NLDEV_ATTR_PAD: u16 = RDMA_NLDEV_ATTR_UNSPEC;
/// u32
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// string
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// u32
pub const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
/// u64
pub const RDMA_NLDEV_ATTR_CAP_FLAGS: u16 = 4;
/// string
pub const RDMA_NLDEV_ATTR_FW_VERSION: u16 = 5;
/// u64
pub const RDMA_NLDEV_ATTR_NODE_GUID: u16 = 6;
/// u64
pub const RDMA_NLDEV_ATTR_SYS_IMAGE_GUID: u16 = 7;
/// u64
pub const RDMA_NLDEV_ATTR_SUBNET_PREFIX: u16 = 8;
/// u32
pub const RDMA_NLDEV_ATTR_LID: u16 = 9;
/// u32
pub const RDMA_NLDEV_ATTR_SM_LID: u16 = 10;
/// u8
pub const RDMA_NLDEV_ATTR_LMC: u16 = 11;
/// u8
pub const RDMA_NLDEV_ATTR_PORT_STATE: u16 = 12;
/// u8
pub const RDMA_NLDEV_ATTR_PORT_PHYS_STATE: u16 = 13;
/// u8
pub const RDMA_NLDEV_ATTR_DEV_NODE_TYPE: u16 = 14;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_SUMMARY: u16 = 15;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY: u16 = 16;
/// string
pub const RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME: u16 = 17;
/// u64
pub const RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR: u16 = 18;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_QP: u16 = 19;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_QP_ENTRY: u16 = 20;
/// u32
pub const RDMA_NLDEV_ATTR_RES_LQPN: u16 = 21;
/// u32
pub const RDMA_NLDEV_ATTR_RES_RQPN: u16 = 22;
/// u32
pub const RDMA_NLDEV_ATTR_RES_RQ_PSN: u16 = 23;
/// u32
pub const RDMA_NLDEV_ATTR_RES_SQ_PSN: u16 = 24;
/// u8
pub const RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE: u16 = 25;
/// u8
pub const RDMA_NLDEV_ATTR_RES_TYPE: u16 = 26;
/// u8
pub const RDMA_NLDEV_ATTR_RES_STATE: u16 = 27;
/// u32
pub const RDMA_NLDEV_ATTR_RES_PID: u16 = 28;
/// string
pub const RDMA_NLDEV_ATTR_RES_KERN_NAME: u16 = 29;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CM_ID: u16 = 30;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY: u16 = 31;
/// u32
pub const RDMA_NLDEV_ATTR_RES_PS: u16 = 32;
/// __kernel_sockaddr_storage
pub const RDMA_NLDEV_ATTR_RES_SRC_ADDR: u16 = 33;
/// __kernel_sockaddr_storage
pub const RDMA_NLDEV_ATTR_RES_DST_ADDR: u16 = 34;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CQ: u16 = 35;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CQ_ENTRY: u16 = 36;
/// u32
pub const RDMA_NLDEV_ATTR_RES_CQE: u16 = 37;
/// u64
pub const RDMA_NLDEV_ATTR_RES_USECNT: u16 = 38;
/// u8
pub const RDMA_NLDEV_ATTR_RES_POLL_CTX: u16 = 39;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_MR: u16 = 40;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_MR_ENTRY: u16 = 41;
/// u32
pub const RDMA_NLDEV_ATTR_RES_RKEY: u16 = 42;
/// u32
pub const RDMA_NLDEV_ATTR_RES_LKEY: u16 = 43;
/// u64
pub const RDMA_NLDEV_ATTR_RES_IOVA: u16 = 44;
/// u64
pub const RDMA_NLDEV_ATTR_RES_MRLEN: u16 = 45;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_PD: u16 = 46;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_PD_ENTRY: u16 = 47;
/// u32
pub const RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY: u16 = 48;
/// u32
pub const RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY: u16 = 49;
/// u32
pub const RDMA_NLDEV_ATTR_NDEV_INDEX: u16 = 50;
/// string
pub const RDMA_NLDEV_ATTR_NDEV_NAME: u16 = 51;
/// nested table
pub const RDMA_NLDEV_ATTR_DRIVER: u16 = 52;
/// nested table
pub const RDMA_NLDEV_ATTR_DRIVER_ENTRY: u16 = 53;
/// string
pub const RDMA_NLDEV_ATTR_DRIVER_STRING: u16 = 54;
/// u8
pub const RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE: u16 = 55;
/// s32
pub const RDMA_NLDEV_ATTR_DRIVER_S32: u16 = 56;
/// u32
pub const RDMA_NLDEV_ATTR_DRIVER_U32: u16 = 57;
/// s64
pub const RDMA_NLDEV_ATTR_DRIVER_S64: u16 = 58;
/// u64
pub const RDMA_NLDEV_ATTR_DRIVER_U64: u16 = 59;
/// u32
pub const RDMA_NLDEV_ATTR_RES_PDN: u16 = 60;
/// u32
pub const RDMA_NLDEV_ATTR_RES_CQN: u16 = 61;
/// u32
pub const RDMA_NLDEV_ATTR_RES_MRN: u16 = 62;
/// u32
pub const RDMA_NLDEV_ATTR_RES_CM_IDN: u16 = 63;
/// u32
pub const RDMA_NLDEV_ATTR_RES_CTXN: u16 = 64;
/// string
pub const RDMA_NLDEV_ATTR_LINK_TYPE: u16 = 65;
/// u8
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// string
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// u32
pub const RDMA_NLDEV_NET_NS_FD: u16 = 68;
/// string
pub const RDMA_NLDEV_ATTR_CHARDEV_TYPE: u16 = 69;
/// string
pub const RDMA_NLDEV_ATTR_CHARDEV_NAME: u16 = 70;
/// u64
pub const RDMA_NLDEV_ATTR_CHARDEV_ABI: u16 = 71;
/// u64
pub const RDMA_NLDEV_ATTR_CHARDEV: u16 = 72;
/// u64
pub const RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID: u16 = 73;
/// u32
pub const RDMA_NLDEV_ATTR_STAT_MODE: u16 = 74;
/// u32
pub const RDMA_NLDEV_ATTR_STAT_RES: u16 = 75;
/// u32
pub const RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK: u16 = 76;
/// nested table
pub const RDMA_NLDEV_ATTR_STAT_COUNTER: u16 = 77;
/// nested table
pub const RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY: u16 = 78;
/// u32
pub const RDMA_NLDEV_ATTR_STAT_COUNTER_ID: u16 = 79;
/// nested table
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTERS: u16 = 80;
/// nested table
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
/// string
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
/// u64
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
/// u8
pub const RDMA_NLDEV_ATTR_DEV_DIM: u16 = 84;
/// binary
pub const RDMA_NLDEV_ATTR_RES_RAW: u16 = 85;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CTX: u16 = 86;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_CTX_ENTRY: u16 = 87;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_SRQ: u16 = 88;
/// nested table
pub const RDMA_NLDEV_ATTR_RES_SRQ_ENTRY: u16 = 89;
/// u32
pub const RDMA_NLDEV_ATTR_RES_SRQN: u16 = 90;
/// u32
pub const RDMA_NLDEV_ATTR_MIN_RANGE: u16 = 91;
/// u32
pub const RDMA_NLDEV_ATTR_MAX_RANGE: u16 = 92;
/// u8
pub const RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK: u16 = 93;
/// u32
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX: u16 = 94;
/// u8
pub const RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC: u16 = 95;
// RDMA_NLDEV_ATTR_MAX, the enum's end, is left out: it moves with every
// kernel that adds an attribute (Debian's 6.1.192-3 headers added three,
// 96 -> 99), and nothing here needs it.

// enum rdma_nl_counter_mode: supported counter bind modes, mutually exclusive.
pub const RDMA_COUNTER_MODE_NONE: u32 = 0;
pub const RDMA_COUNTER_MODE_AUTO: u32 = 1;
pub const RDMA_COUNTER_MODE_MANUAL: u32 = 2;
pub const RDMA_COUNTER_MODE_MAX: u32 = 3;

// enum rdma_nl_counter_mask: supported criteria in counter auto mode.
pub const RDMA_COUNTER_MASK_QP_TYPE: u32 = 1;
pub const RDMA_COUNTER_MASK_PID: u32 = 1 << 1;

// ===========================================================================
// rdma_user_rxe.h
// ===========================================================================

// `rxe_av.network_type`
pub const RXE_NETWORK_TYPE_IPV4: u8 = 1;
pub const RXE_NETWORK_TYPE_IPV6: u8 = 2;

/// `rxe_gid.global`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_gid_global {
    pub subnet_prefix: __be64,
    pub interface_id: __be64,
}

/// `union rxe_gid`; `Default` is all zeroes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rxe_gid {
    pub raw: [u8; 16],
    pub global: rxe_gid_global,
}
impl_zeroed!(rxe_gid);

impl core::fmt::Debug for rxe_gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: both members are 16 bytes of plain integers, so whichever
        // was written, all of `raw` is initialised and valid.
        let raw = unsafe { self.raw };
        f.debug_struct("rxe_gid").field("raw", &raw).finish()
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_global_route {
    pub dgid: rxe_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// The type of `rxe_av.sgid_addr` and `rxe_av.dgid_addr` (C: an anonymous
/// union); `Default` is all zeroes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rxe_av_addr {
    pub _sockaddr_in: libc::sockaddr_in,
    pub _sockaddr_in6: libc::sockaddr_in6,
}
impl_zeroed!(rxe_av_addr);

impl core::fmt::Debug for rxe_av_addr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: `sin_family`/`sin6_family` is the first field of either
        // member, a plain integer at the same offset, initialised whichever
        // member was written.
        let family = unsafe { self._sockaddr_in.sin_family };
        write!(f, "rxe_av_addr {{ family: {family}, .. }}")
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_av {
    pub port_num: u8,
    /// From RXE_NETWORK_TYPE_*
    pub network_type: u8,
    pub dmac: [u8; 6],
    pub grh: rxe_global_route,
    pub sgid_addr: rxe_av_addr,
    pub dgid_addr: rxe_av_addr,
}

/// `rxe_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// `rxe_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// `rxe_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wr_ud {
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub pkey_index: u16,
    pub reserved: u16,
    pub ah_num: u32,
    pub pad: [u32; 4],
    pub av: rxe_av,
}

/// `rxe_send_wr.wr.mw`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wr_mw {
    pub addr: u64,
    pub length: u64,
    pub mr_lkey: u32,
    pub mw_rkey: u32,
    pub rkey: u32,
    pub access: u32,
}

/// The `wr` union of [`rxe_send_wr`] (`reg` is kernel-only, not uapi).
/// `Default` is all zeroes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rxe_send_wr_wr {
    pub rdma: rxe_send_wr_rdma,
    pub atomic: rxe_send_wr_atomic,
    pub ud: rxe_send_wr_ud,
    pub mw: rxe_send_wr_mw,
}
impl_zeroed!(rxe_send_wr_wr);

impl core::fmt::Debug for rxe_send_wr_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Which member is live depends on the opcode; print none.
        f.write_str("rxe_send_wr_wr { .. }")
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wr {
    pub wr_id: u64,
    pub reserved: u32,
    pub opcode: u32,
    pub send_flags: u32,
    /// C: `union { __be32 imm_data; __u32 invalidate_rkey; } ex`.
    pub ex: u32,
    pub wr: rxe_send_wr_wr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct mminfo {
    pub offset: u64,
    pub size: u32,
    pub pad: u32,
}

/// Followed by C's anonymous union of the flexible arrays `__u8
/// inline_data[]` and `struct rxe_sge sge[]` (omitted): the gather/scatter
/// list or the inline data start at `size_of::<rxe_dma_info>()`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_dma_info {
    pub length: u32,
    pub resid: u32,
    pub cur_sge: u32,
    pub num_sge: u32,
    pub sge_offset: u32,
    pub reserved: u32,
}

/// A send queue element; its `dma` is followed by the SGEs or inline data.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_send_wqe {
    pub wr: rxe_send_wr,
    pub status: u32,
    pub state: u32,
    pub iova: u64,
    pub mask: u32,
    pub first_psn: u32,
    pub last_psn: u32,
    pub ack_length: u32,
    pub ssn: u32,
    pub has_rd_atomic: u32,
    pub dma: rxe_dma_info,
}

/// A receive queue element; its `dma` is followed by the SGEs.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_recv_wqe {
    pub wr_id: u64,
    pub reserved: u32,
    pub padding: u32,
    pub dma: rxe_dma_info,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_create_ah_resp {
    pub ah_num: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_create_cq_resp {
    pub mi: mminfo,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_resize_cq_resp {
    pub mi: mminfo,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_create_qp_resp {
    pub rq_mi: mminfo,
    pub sq_mi: mminfo,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_create_srq_resp {
    pub mi: mminfo,
    pub srq_num: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_modify_srq_cmd {
    pub mmap_info_addr: u64,
}

/// Stored at the base of the work and completion queues that user space and
/// the kernel share: producer and consumer indices (in separate cache
/// lines) and a copy of the queue size parameters for user space.  Followed
/// by the elements (`__u8 data[]`, omitted).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rxe_queue_buf {
    pub log2_elem_size: u32,
    pub index_mask: u32,
    pub pad_1: [u32; 30],
    pub producer_index: u32,
    pub pad_2: [u32; 31],
    pub consumer_index: u32,
    pub pad_3: [u32; 31],
}

// ===========================================================================
// siw-abi.h
// ===========================================================================

pub const SIW_NODE_DESC_COMMON: &str = "Software iWARP stack";
pub const SIW_ABI_VERSION: u32 = 1;
pub const SIW_MAX_SGE: usize = 6;
pub const SIW_UOBJ_MAX_KEY: u32 = 0x08FFFF;
pub const SIW_INVAL_UOBJ_KEY: u32 = SIW_UOBJ_MAX_KEY + 1;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_uresp_create_cq {
    pub cq_id: u32,
    pub num_cqe: u32,
    pub cq_key: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_uresp_create_qp {
    pub qp_id: u32,
    pub num_sqe: u32,
    pub num_rqe: u32,
    pub pad: u32,
    pub sq_key: u64,
    pub rq_key: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_ureq_reg_mr {
    pub stag_key: u8,
    pub reserved: [u8; 3],
    pub pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_uresp_reg_mr {
    pub stag: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_uresp_create_srq {
    pub num_rqe: u32,
    pub pad: u32,
    pub srq_key: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_uresp_alloc_ctx {
    pub dev_id: u32,
    pub pad: u32,
}

// enum siw_opcode
pub const SIW_OP_WRITE: u8 = 0;
pub const SIW_OP_READ: u8 = 1;
pub const SIW_OP_READ_LOCAL_INV: u8 = 2;
pub const SIW_OP_SEND: u8 = 3;
pub const SIW_OP_SEND_WITH_IMM: u8 = 4;
pub const SIW_OP_SEND_REMOTE_INV: u8 = 5;
/// Unsupported.
pub const SIW_OP_FETCH_AND_ADD: u8 = 6;
/// Unsupported.
pub const SIW_OP_COMP_AND_SWAP: u8 = 7;
pub const SIW_OP_RECEIVE: u8 = 8;
/// Provider internal SQE.
pub const SIW_OP_READ_RESPONSE: u8 = 9;
/// For in-kernel clients only.
pub const SIW_OP_INVAL_STAG: u8 = 10;
/// For in-kernel clients only.
pub const SIW_OP_REG_MR: u8 = 11;
pub const SIW_NUM_OPCODES: u8 = 12;

/// Keep it same as ibv_sge to allow for memcpy.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_sge {
    pub laddr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Inline data are kept within the work request itself, occupying the space
/// of sge[1] .. sge[n].
pub const SIW_MAX_INLINE: usize = size_of::<siw_sge>() * (SIW_MAX_SGE - 1);

// enum siw_wqe_flags (`flags` of siw_sqe/siw_rqe; siw_cqe's is a u8)
pub const SIW_WQE_VALID: u16 = 1;
pub const SIW_WQE_INLINE: u16 = 1 << 1;
pub const SIW_WQE_SIGNALLED: u16 = 1 << 2;
pub const SIW_WQE_SOLICITED: u16 = 1 << 3;
pub const SIW_WQE_READ_FENCE: u16 = 1 << 4;
pub const SIW_WQE_REM_INVAL: u16 = 1 << 5;
pub const SIW_WQE_COMPLETED: u16 = 1 << 6;

/// Send Queue Element.
///
/// C's anonymous unions: `raddr` is also `base_mr`, and `sge` is also
/// `__aligned_u64 access` (the first 8 bytes, see [`Self::access`]).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_sqe {
    pub id: u64,
    pub flags: u16,
    pub num_sge: u8,
    /// Contains enum siw_opcode values
    pub opcode: u8,
    pub rkey: u32,
    pub raddr: u64,
    pub sge: [siw_sge; SIW_MAX_SGE],
}

impl siw_sqe {
    /// `base_mr`, the other view of `raddr`.
    pub const fn base_mr(&self) -> u64 {
        self.raddr
    }

    /// `access`, which shares its bytes with `sge[0].laddr`.
    pub const fn access(&self) -> u64 {
        self.sge[0].laddr
    }

    /// Sets `access` (overwrites `sge[0].laddr`).
    pub fn set_access(&mut self, access: u64) {
        self.sge[0].laddr = access;
    }
}

/// Receive Queue Element.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_rqe {
    pub id: u64,
    pub flags: u16,
    pub num_sge: u8,
    /// Only used by kernel driver, ignored if set by user.
    pub opcode: u8,
    pub unused: u32,
    pub sge: [siw_sge; SIW_MAX_SGE],
}

// enum siw_notify_flags
pub const SIW_NOTIFY_NOT: u32 = 0;
pub const SIW_NOTIFY_SOLICITED: u32 = 1 << 0;
pub const SIW_NOTIFY_NEXT_COMPLETION: u32 = 1 << 1;
pub const SIW_NOTIFY_MISSED_EVENTS: u32 = 1 << 2;
pub const SIW_NOTIFY_ALL: u32 =
    SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION | SIW_NOTIFY_MISSED_EVENTS;

// enum siw_wc_status
pub const SIW_WC_SUCCESS: u16 = 0;
pub const SIW_WC_LOC_LEN_ERR: u16 = 1;
pub const SIW_WC_LOC_PROT_ERR: u16 = 2;
pub const SIW_WC_LOC_QP_OP_ERR: u16 = 3;
pub const SIW_WC_WR_FLUSH_ERR: u16 = 4;
pub const SIW_WC_BAD_RESP_ERR: u16 = 5;
pub const SIW_WC_LOC_ACCESS_ERR: u16 = 6;
pub const SIW_WC_REM_ACCESS_ERR: u16 = 7;
pub const SIW_WC_REM_INV_REQ_ERR: u16 = 8;
pub const SIW_WC_GENERAL_ERR: u16 = 9;
pub const SIW_NUM_WC_STATUS: u16 = 10;

/// Completion Queue Element.
///
/// C's anonymous unions: `imm_data` is also `__u32 inval_stag` (its first
/// 4 bytes, see [`Self::inval_stag`]); `qp_id` is also the kernel's
/// `struct ib_qp *base_qp`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_cqe {
    pub id: u64,
    pub flags: u8,
    pub opcode: u8,
    pub status: u16,
    pub bytes: u32,
    pub imm_data: u64,
    /// QP number or QP pointer
    pub qp_id: u64,
}

impl siw_cqe {
    /// `inval_stag`: the first 4 bytes of `imm_data`.
    pub const fn inval_stag(&self) -> u32 {
        let b = self.imm_data.to_ne_bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// Shared between user and kernel to control CQ arming.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct siw_cq_ctrl {
    pub flags: u32,
    pub pad: u32,
}

// ---------------------------------------------------------------------------
// rdma/ib_user_sa.h and rdma/rdma_user_cm.h: the kernel's RDMA CM
// (`/dev/infiniband/rdma_cm`), driven by write() of a header and a command.

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

pub const RDMA_USER_CM_ABI_VERSION: u32 = 4;
pub const RDMA_MAX_PRIVATE_DATA: u32 = 256;

pub const RDMA_USER_CM_CMD_CREATE_ID: u32 = 0;
pub const RDMA_USER_CM_CMD_DESTROY_ID: u32 = 1;
pub const RDMA_USER_CM_CMD_BIND_IP: u32 = 2;
pub const RDMA_USER_CM_CMD_RESOLVE_IP: u32 = 3;
pub const RDMA_USER_CM_CMD_RESOLVE_ROUTE: u32 = 4;
pub const RDMA_USER_CM_CMD_QUERY_ROUTE: u32 = 5;
pub const RDMA_USER_CM_CMD_CONNECT: u32 = 6;
pub const RDMA_USER_CM_CMD_LISTEN: u32 = 7;
pub const RDMA_USER_CM_CMD_ACCEPT: u32 = 8;
pub const RDMA_USER_CM_CMD_REJECT: u32 = 9;
pub const RDMA_USER_CM_CMD_DISCONNECT: u32 = 10;
pub const RDMA_USER_CM_CMD_INIT_QP_ATTR: u32 = 11;
pub const RDMA_USER_CM_CMD_GET_EVENT: u32 = 12;
pub const RDMA_USER_CM_CMD_GET_OPTION: u32 = 13;
pub const RDMA_USER_CM_CMD_SET_OPTION: u32 = 14;
pub const RDMA_USER_CM_CMD_NOTIFY: u32 = 15;
pub const RDMA_USER_CM_CMD_JOIN_IP_MCAST: u32 = 16;
pub const RDMA_USER_CM_CMD_LEAVE_MCAST: u32 = 17;
pub const RDMA_USER_CM_CMD_MIGRATE_ID: u32 = 18;
pub const RDMA_USER_CM_CMD_QUERY: u32 = 19;
pub const RDMA_USER_CM_CMD_BIND: u32 = 20;
pub const RDMA_USER_CM_CMD_RESOLVE_ADDR: u32 = 21;
pub const RDMA_USER_CM_CMD_JOIN_MCAST: u32 = 22;

pub const RDMA_USER_CM_QUERY_ADDR: u32 = 0;
pub const RDMA_USER_CM_QUERY_PATH: u32 = 1;
pub const RDMA_USER_CM_QUERY_GID: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_cmd_hdr {
    pub cmd: u32,
    pub r#in: u16,
    pub out: u16,
}

/// `struct sockaddr_in6` as the kernel lays it out (28 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ucma_sockaddr_in6 {
    pub sin6_family: u16,
    pub sin6_port: u16,
    pub sin6_flowinfo: u32,
    pub sin6_addr: [u8; 16],
    pub sin6_scope_id: u32,
}

/// `struct __kernel_sockaddr_storage`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct kernel_sockaddr_storage {
    pub ss_family: u16,
    pub __data: [u8; 126],
}

impl Default for kernel_sockaddr_storage {
    fn default() -> Self {
        kernel_sockaddr_storage {
            ss_family: 0,
            __data: [0; 126],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_create_id {
    pub uid: u64,
    pub response: u64,
    pub ps: u16,
    pub qp_type: u8,
    pub reserved: [u8; 5],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_create_id_resp {
    pub id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_destroy_id {
    pub response: u64,
    pub id: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_destroy_id_resp {
    pub events_reported: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_bind_ip {
    pub response: u64,
    pub addr: ucma_sockaddr_in6,
    pub id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_resolve_ip {
    pub src_addr: ucma_sockaddr_in6,
    pub dst_addr: ucma_sockaddr_in6,
    pub id: u32,
    pub timeout_ms: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_resolve_route {
    pub id: u32,
    pub timeout_ms: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_query {
    pub response: u64,
    pub id: u32,
    pub option: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_query_route_resp {
    pub node_guid: u64,
    pub ib_route: [ib_user_path_rec; 2],
    pub src_addr: ucma_sockaddr_in6,
    pub dst_addr: ucma_sockaddr_in6,
    pub num_paths: u32,
    pub port_num: u8,
    pub reserved: [u8; 3],
    pub ibdev_index: u32,
    pub reserved1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ucm_conn_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub srq: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub valid: u8,
}

impl Default for rdma_ucm_conn_param {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all zeroes is valid.
        unsafe { core::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ucm_ud_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub reserved: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_connect {
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_listen {
    pub id: u32,
    pub backlog: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_accept {
    pub uid: u64,
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ucm_reject {
    pub id: u32,
    pub private_data_len: u8,
    pub reason: u8,
    pub reserved: [u8; 2],
    pub private_data: [u8; 256],
}

impl Default for rdma_ucm_reject {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all zeroes is valid.
        unsafe { core::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_disconnect {
    pub id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_init_qp_attr {
    pub response: u64,
    pub id: u32,
    pub qp_state: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_notify {
    pub id: u32,
    pub event: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_join_mcast {
    pub response: u64,
    pub uid: u64,
    pub id: u32,
    pub addr_size: u16,
    pub join_flags: u16,
    pub addr: kernel_sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_get_event {
    pub response: u64,
}

/// `rdma_ucm_event_resp.param`; 4-byte aligned, as the kernel's comment
/// insists.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_ucm_event_param {
    pub conn: rdma_ucm_conn_param,
    pub ud: rdma_ucm_ud_param,
}

impl core::fmt::Debug for rdma_ucm_event_param {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("rdma_ucm_event_param")
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ucm_event_resp {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    pub status: u32,
    pub param: rdma_ucm_event_param,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

impl Default for rdma_ucm_event_resp {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all zeroes is valid.
        unsafe { core::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_set_option {
    pub optval: u64,
    pub id: u32,
    pub level: u32,
    pub optname: u32,
    pub optlen: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_migrate_id {
    pub response: u64,
    pub id: u32,
    pub fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ucm_migrate_resp {
    pub events_reported: u32,
}
