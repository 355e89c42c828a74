//! `<rdma/rdma_cma.h>`, `<infiniband/sa.h>` and `<infiniband/ib.h>` of
//! rdma-core 44 as `#[repr(C)]` Rust.
//!
//! As in [`crate::verbs`], names follow C.  `rdma_addr` has two anonymous
//! unions in C; here they are the fields `src` (members `src_addr`,
//! `src_sin`, `src_sin6`, `src_storage`) and `dst` (`dst_addr`, `dst_sin`,
//! `dst_sin6`, `dst_storage`).  Each also has an `*_ib` member of type
//! [`sockaddr_ib`] that C lacks: the storage is large enough, and it saves
//! a cast where AF_IB addresses are handled.

use core::ffi::{c_char, c_int, c_uint, c_ushort, c_void};
use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

use crate::verbs::{
    __be16, __be32, __be64, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd,
    ibv_qp, ibv_qp_type, ibv_srq, impl_zeroed,
};

// ---------------------------------------------------------------------------
// AF_IB socket addresses (<infiniband/ib.h>)
// ---------------------------------------------------------------------------

/// Address family of [`sockaddr_ib`]; glibc may not define it.
pub const AF_IB: c_int = 27;
pub const PF_IB: c_int = AF_IB;

/// `ib_addr.ib_u`: one 128-bit GID viewed at several widths.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_addr_ib_u {
    pub uib_addr8: [u8; 16],
    pub uib_addr16: [__be16; 8],
    pub uib_addr32: [__be32; 4],
    pub uib_addr64: [__be64; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_addr {
    pub ib_u: ib_addr_ib_u,
}

impl ib_addr {
    /// The 16 bytes of the address (C: `sib_raw`).
    #[inline]
    pub fn raw(&self) -> [u8; 16] {
        // SAFETY: all members are 16 bytes of plain integers; any bit
        // pattern is a valid `[u8; 16]`.
        unsafe { self.ib_u.uib_addr8 }
    }
}

/// An InfiniBand socket address (family `AF_IB`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sockaddr_ib {
    pub sib_family: c_ushort,
    pub sib_pkey: __be16,
    pub sib_flowinfo: __be32,
    pub sib_addr: ib_addr,
    pub sib_sid: __be64,
    pub sib_sid_mask: __be64,
    pub sib_scope_id: u64,
}

// ---------------------------------------------------------------------------
// Path records (<infiniband/sa.h>)
// ---------------------------------------------------------------------------

/// A path record in host-friendly form (one field per attribute).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: __be16,
    pub slid: __be16,
    pub raw_traffic: c_int,
    pub flow_label: __be32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: __be16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// Bit of `ibv_path_record.reversible_numpath`.
pub const IBV_PATH_RECORD_REVERSIBLE: u8 = 0x80;

/// A path record in wire form (64 bytes, packed bit fields, network order).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_path_record {
    pub service_id: __be64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: __be16,
    pub slid: __be16,
    /// Bits 27..8 flow label, 7..0 hop limit.
    pub flowlabel_hoplimit: __be32,
    pub tclass: u8,
    /// Bit 7 reversible, bits 6..0 number of paths.
    pub reversible_numpath: u8,
    pub pkey: __be16,
    /// Bits 15..4 QoS class, 3..0 SL.
    pub qosclass_sl: __be16,
    /// Bits 7..6 selector, 5..0 MTU.
    pub mtu: u8,
    /// Bits 7..6 selector, 5..0 rate.
    pub rate: u8,
    /// Bits 7..6 selector, 5..0 packet lifetime.
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

pub const IBV_PATH_FLAG_GMP: u32 = 1 << 0;
pub const IBV_PATH_FLAG_PRIMARY: u32 = 1 << 1;
pub const IBV_PATH_FLAG_ALTERNATE: u32 = 1 << 2;
pub const IBV_PATH_FLAG_OUTBOUND: u32 = 1 << 3;
pub const IBV_PATH_FLAG_INBOUND: u32 = 1 << 4;
pub const IBV_PATH_FLAG_INBOUND_REVERSE: u32 = 1 << 5;
pub const IBV_PATH_FLAG_BIDIRECTIONAL: u32 = IBV_PATH_FLAG_OUTBOUND | IBV_PATH_FLAG_INBOUND_REVERSE;

/// One element of the `RDMA_OPTION_IB_PATH` option value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_path_data {
    /// `IBV_PATH_FLAG_*` bits.
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}

// ---------------------------------------------------------------------------
// rdma_cma.h
// ---------------------------------------------------------------------------

pub type rdma_cm_event_type = c_uint;
pub const RDMA_CM_EVENT_ADDR_RESOLVED: rdma_cm_event_type = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: rdma_cm_event_type = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: rdma_cm_event_type = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: rdma_cm_event_type = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: rdma_cm_event_type = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm_event_type = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: rdma_cm_event_type = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: rdma_cm_event_type = 7;
pub const RDMA_CM_EVENT_REJECTED: rdma_cm_event_type = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: rdma_cm_event_type = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: rdma_cm_event_type = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: rdma_cm_event_type = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: rdma_cm_event_type = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: rdma_cm_event_type = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: rdma_cm_event_type = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: rdma_cm_event_type = 15;

/// Port spaces; the value is also the IB service-ID prefix.
pub type rdma_port_space = c_uint;
pub const RDMA_PS_IPOIB: rdma_port_space = 0x0002;
pub const RDMA_PS_TCP: rdma_port_space = 0x0106;
pub const RDMA_PS_UDP: rdma_port_space = 0x0111;
pub const RDMA_PS_IB: rdma_port_space = 0x013F;

/// Service-ID layout for IP-based port spaces: `0x0000_0000_0PPP_pppp`
/// where PPP is the port space and pppp the 16-bit port.
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013F_0000;

/// Q_Key used by `RDMA_PS_UDP` / `RDMA_PS_IPOIB` ids.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Largest `responder_resources` / `initiator_depth`; typed `u8` like the
/// `rdma_conn_param` fields they bound (anonymous enum in C).
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: __be16,
}

/// C's first anonymous union in `rdma_addr` (source address).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_src {
    pub src_addr: sockaddr,
    pub src_sin: sockaddr_in,
    pub src_sin6: sockaddr_in6,
    pub src_storage: sockaddr_storage,
    /// Not in C; see the module documentation.
    pub src_ib: sockaddr_ib,
}

/// C's second anonymous union in `rdma_addr` (destination address).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_dst {
    pub dst_addr: sockaddr,
    pub dst_sin: sockaddr_in,
    pub dst_sin6: sockaddr_in6,
    pub dst_storage: sockaddr_storage,
    /// Not in C; see the module documentation.
    pub dst_ib: sockaddr_ib,
}

/// `rdma_addr.addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_addr {
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    /// C: the anonymous `src_addr`/`src_sin`/`src_sin6`/`src_storage` union.
    pub src: rdma_addr_src,
    /// C: the anonymous `dst_addr`/`dst_sin`/`dst_sin6`/`dst_storage` union.
    pub dst: rdma_addr_dst,
    pub addr: rdma_addr_addr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    /// Array of `num_paths` records, owned by librdmacm.
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// Event channel; `fd` is readable when an event is queued.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// An RDMA CM identifier (the CM's analogue of a socket).
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    /// The event being processed, for the synchronous-mode helpers.
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: ibv_qp_type,
}

/// Connection parameters of `rdma_connect` / `rdma_accept` and of
/// connection events.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Ignored by `rdma_accept`.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// This and `qp_num` are ignored when the id has a QP.
    pub srq: u8,
    pub qp_num: u32,
}

/// Parameters of UD / multicast events.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `rdma_cm_event.param`: `conn` for connected port spaces, `ud` for
/// `RDMA_PS_UDP` / `RDMA_PS_IPOIB` and multicast.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    /// The listening id, for `RDMA_CM_EVENT_CONNECT_REQUEST`.
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `rdma_addrinfo.ai_flags` bits (plain `#define`s in C).
pub const RAI_PASSIVE: c_int = 0x0000_0001;
pub const RAI_NUMERICHOST: c_int = 0x0000_0002;
pub const RAI_NOROUTE: c_int = 0x0000_0004;
pub const RAI_FAMILY: c_int = 0x0000_0008;

/// Result (linked list) and hints of `rdma_getaddrinfo`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_addrinfo {
    /// `RAI_*` bits.
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

pub type rdma_cm_join_mc_attr_mask = c_uint;
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: rdma_cm_join_mc_attr_mask = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: rdma_cm_join_mc_attr_mask = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: rdma_cm_join_mc_attr_mask = 1 << 2;

pub type rdma_cm_mc_join_flags = c_uint;
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: rdma_cm_mc_join_flags = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: rdma_cm_mc_join_flags = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: rdma_cm_mc_join_flags = 2;

/// Argument of `rdma_join_multicast_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    /// `RDMA_CM_JOIN_MC_ATTR_*` bits.
    pub comp_mask: u32,
    /// One `RDMA_MC_JOIN_FLAG_*` value.
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

/// `level` argument of `rdma_set_option` (anonymous enums in C, passed as
/// `int`).
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;

/// `optname` values for `RDMA_OPTION_ID`.
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

/// `optname` values for `RDMA_OPTION_IB`.
pub const RDMA_OPTION_IB_PATH: c_int = 1;

impl_zeroed!(
    ib_addr_ib_u,
    ib_addr,
    sockaddr_ib,
    ibv_sa_path_rec,
    ibv_path_record,
    ibv_path_data,
    rdma_ib_addr,
    rdma_addr_src,
    rdma_addr_dst,
    rdma_addr_addr,
    rdma_addr,
    rdma_route,
    rdma_event_channel,
    rdma_cm_id,
    rdma_conn_param,
    rdma_ud_param,
    rdma_cm_event_param,
    rdma_cm_event,
    rdma_addrinfo,
    rdma_cm_join_mc_attr_ex,
);
