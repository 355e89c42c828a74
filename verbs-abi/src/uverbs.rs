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
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
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
#[derive(Clone, Copy, Default, Debug)]
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
